// Package shell is the one entry-point shell of every sandbox-gpu binary:
// flags and help, one structured log format (JSON lines through slog, with
// klog routed into it), the health and metrics listener, signals and exit
// codes. Each part's cli package defines its program, and a main is one
// line:
//
//	func main() { os.Exit(shell.Main(cli.Program())) }
//
// Commands get everything through an Env; nothing here is package-level
// state, so tests and the demo run programs in process with shell.Run.
package shell

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Program is one binary: a single command (Name "") or subcommands.
type Program struct {
	Name     string
	Summary  string // one sentence: what the binary does
	Commands []*Command
	Notes    string // appended to the usage (exit codes, examples)
}

// Command is one command of a program.
type Command struct {
	// Name is the subcommand; "" is the program's default command.
	Name string
	// Synopsis follows the name in the usage, e.g. "(--all | --device BDF)...".
	Synopsis string
	Summary  string
	// Roots registers --sysfs-root, --dev-root and --proc-root.
	Roots bool
	// Listen registers --health-addr, with HealthAddr as its default: the
	// listener serving /healthz, /readyz and /metrics ("" turns it off).
	Listen     bool
	HealthAddr string
	// Args, when set, names the positional arguments the command takes
	// (they end up in Env.Args); without it any is bad usage.
	Args string
	// Daemon commands log their final error as JSON; others print it (and
	// so do daemons, for bad usage).
	Daemon bool
	// Flags registers the command's own flags.
	Flags func(fs *flag.FlagSet)
	Run   func(ctx context.Context, env *Env) error
}

// IO is what a run reads and writes besides its flags.
type IO struct {
	Stdout, Stderr io.Writer
	// grpcLogs routes grpc-go's process-wide logger into the run's log
	// (Main's run only: the process is the program).
	grpcLogs bool
}

// Main runs the program on the process's arguments until SIGINT or SIGTERM
// and returns the exit code.
func Main(p *Program) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, p, os.Args[1:], IO{Stdout: os.Stdout, Stderr: os.Stderr, grpcLogs: true})
}

// Run runs the program with args and returns the exit code: 0 done (or
// help shown), 1 bad usage or input, 2 refused (see ExitCode).
func Run(ctx context.Context, p *Program, args []string, o IO) int {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	cmd, rest, err := p.pick(args, o.Stdout)
	if err == nil && cmd != nil {
		err = cmd.execute(ctx, p, rest, o)
	}
	if err != nil && !errors.Is(err, errHelp) && !isQuiet(err) && !isLogged(err) {
		fmt.Fprintf(o.Stderr, "%s: %v\n", p.Name, err)
	}
	return ExitCode(err)
}

// pick chooses the command args[0] names, else the default command.
func (p *Program) pick(args []string, stdout io.Writer) (*Command, []string, error) {
	var def *Command
	for _, c := range p.Commands {
		if c.Name == "" {
			def = c
		}
	}
	if len(args) > 0 {
		for _, c := range p.Commands {
			if c.Name != "" && c.Name == args[0] {
				return c, args[1:], nil
			}
		}
		switch args[0] {
		case "help", "-h", "-help", "--help":
			if def == nil || args[0] == "help" {
				fmt.Fprint(stdout, p.usage())
				return nil, nil, errHelp
			}
		}
	}
	if def != nil {
		return def, args, nil
	}
	if len(args) == 0 {
		return nil, nil, Usagef("missing command\n\n%s", p.usage())
	}
	return nil, nil, Usagef("unknown command %q\n\n%s", args[0], p.usage())
}

func (c *Command) execute(ctx context.Context, p *Program, args []string, o IO) error {
	env := &Env{Stdout: o.Stdout, Stderr: o.Stderr}
	fs := flag.NewFlagSet(c.fullName(p), flag.ContinueOnError)
	var healthAddr string
	fs.Var(&env.verbosity, "v", "log verbosity: -v or -v=N shows debug logs up to level N")
	if c.Roots {
		env.Roots.register(fs)
	}
	if c.Listen {
		fs.StringVar(&healthAddr, "health-addr", c.HealthAddr, "address of /healthz, /readyz and /metrics (empty: none)")
	}
	if c.Flags != nil {
		c.Flags(fs)
	}
	if err := parse(fs, args, o.Stdout, c.usageHeader(p), c.Args != ""); err != nil {
		return err
	}
	env.Args = fs.Args()
	h := newHandler(o.Stderr, int(env.verbosity))
	if o.grpcLogs {
		installGRPCLogs(h, int(env.verbosity))
	}
	env.Log = logger(h, p.Name)
	env.health = &health{}
	env.Metrics = newRegistry()
	if healthAddr != "" {
		stop, err := serve(healthAddr, env)
		if err != nil {
			return err
		}
		defer stop()
	}
	err := c.Run(ctx, env)
	var usage *UsageError
	if err != nil && c.Daemon && ExitCode(err) != 0 && !errors.As(err, &usage) {
		env.Log.Error(err, "Stopped")
		return logged{err}
	}
	return err
}

func (c *Command) fullName(p *Program) string {
	if c.Name == "" {
		return p.Name
	}
	return p.Name + " " + c.Name
}
