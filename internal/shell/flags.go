package shell

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// parse parses args; -h/--help prints the usage to stdout (so that --help
// exits 0, as the contract wants) and returns errHelp.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer, header string, positional bool) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, header)
		fmt.Fprintln(stdout, "\nFlags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return errHelp
	}
	if err != nil {
		return Usagef("%s: %v (see --help)", fs.Name(), err)
	}
	if fs.NArg() > 0 && !positional {
		return Usagef("%s: unexpected argument %q (see --help)", fs.Name(), fs.Arg(0))
	}
	return nil
}

func (p *Program) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\nUsage:\n", p.Name, p.Summary)
	for _, c := range p.Commands {
		line := strings.TrimSpace(strings.Join([]string{p.Name, c.Name, c.Synopsis, c.Args}, " "))
		fmt.Fprintf(&b, "  %s\n", strings.Join(strings.Fields(line), " "))
	}
	if len(p.Commands) > 1 || p.Commands[0].Name != "" {
		fmt.Fprintf(&b, "\nRun \"%s COMMAND --help\" for the flags of a command.\n", p.Name)
	}
	if p.Notes != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(p.Notes))
	}
	return b.String()
}

func (c *Command) usageHeader(p *Program) string {
	if c.Name == "" {
		return p.usage()
	}
	summary := c.Summary
	if summary == "" {
		summary = p.Summary
	}
	line := strings.Join(strings.Fields(strings.Join([]string{p.Name, c.Name, c.Synopsis, c.Args}, " ")), " ")
	return fmt.Sprintf("Usage of %s %s: %s\n  %s\n", p.Name, c.Name, summary, line)
}

// verbosity is -v (1) or -v=N, as a boolean-style flag so that a bare -v
// works the way it always did.
type verbosity int

func (v *verbosity) String() string { return strconv.Itoa(int(*v)) }

func (v *verbosity) Set(s string) error {
	if s == "true" {
		*v = 1
		return nil
	}
	if s == "false" {
		*v = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 10 {
		return fmt.Errorf("want a level from 0 to 10, got %q", s)
	}
	*v = verbosity(n)
	return nil
}

func (v *verbosity) IsBoolFlag() bool { return true }

// Roots are the host roots every node binary takes (contracts.md). An
// empty root is the host model's default (internal/hostroots fills it in):
// the shell knows no host path.
type Roots struct {
	Sysfs, Dev, Proc string
}

func (r *Roots) register(fs *flag.FlagSet) {
	fs.StringVar(&r.Sysfs, "sysfs-root", "", "sysfs root (default /sys)")
	fs.StringVar(&r.Dev, "dev-root", "", "dev root (default /dev)")
	fs.StringVar(&r.Proc, "proc-root", "", "proc root (default /proc)")
}
