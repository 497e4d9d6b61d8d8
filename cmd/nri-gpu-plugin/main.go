// Command nri-gpu-plugin is a containerd NRI plugin that gives each
// ordinary container exactly the GPUs the kubelet allocated to it (see
// package nri). `nri-gpu-plugin generate-cdi` writes a GPU CDI spec for
// nodes without nvidia-ctk's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/sandbox-gpu/sandbox-gpu/internal/cliflags"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/nri"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := mainErr(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nri-gpu-plugin:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "generate-cdi" {
		return generateCDI(ctx, args[1:], stdout, stderr)
	}
	o, err := parse(args, stdout)
	if err != nil {
		return err
	}
	// Started by the runtime (pre-registered as NN-name in its plugin dir):
	// the settings come from its config file, handed over in Configure.
	o.preregistered = os.Getenv(api.PluginSocketEnvVar) != ""
	return run(ctx, o, stderr)
}

// parse reads the flags; a pre-registered plugin's config file holds the
// same flags, whitespace-separated.
func parse(args []string, stdout io.Writer) (options, error) {
	o := options{
		cdiDirs:   list("/etc/cdi", "/var/run/cdi"),
		resources: list(nri.DefaultResources...),
		skip:      list("kata*"),
	}
	fs := flag.NewFlagSet("nri-gpu-plugin [generate-cdi]", flag.ContinueOnError)
	fs.StringVar(&o.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	fs.StringVar(&o.podResources, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket")
	fs.DurationVar(&o.podResourcesTimeout, "pod-resources-timeout", time.Second, "bound on each kubelet call (keep it well inside the runtime's 2 s per request)")
	fs.StringVar(&o.checkpoint, "kubelet-checkpoint", nri.DefaultCheckpoint, "the kubelet device manager's checkpoint, for init containers the PodResources API does not list (empty: none)")
	fs.Var(&o.cdiDirs, "cdi-dir", "CDI spec folder (repeatable; default /etc/cdi and /var/run/cdi)")
	fs.Var(&o.resources, "resource", "resource name whose devices are GPUs, path.Match patterns allowed (repeatable; the first use replaces the default "+strings.Join(nri.DefaultResources, ", ")+")")
	fs.StringVar(&o.cdiKind, "cdi-kind", "nvidia.com/gpu", "CDI kind of the GPU devices")
	fs.StringVar(&o.index, "plugin-index", "10", "plugin index (two digits; order among NRI plugins)")
	fs.StringVar(&o.name, "plugin-name", "sandbox-gpu", "plugin name")
	fs.BoolVar(&o.failOpen, "fail-open", false, "start a container with an allocation without its GPUs when they cannot be resolved (default: fail its creation)")
	fs.Var(&o.skip, "skip-runtime-handler", "runtime handler pattern of sandboxed pods to leave alone (repeatable; default kata*; add \"\" where Kata is the default runtime)")
	fs.Var(&o.annotationNS, "annotation-namespace", "namespace whose pods may ask for GPUs with the "+names.RequestAnnotation+" annotation (repeatable; default none)")
	fs.StringVar(&o.injection, "injection", nri.InjectAuto, "auto (CDI requests on containerd 2.1+, resolved edits elsewhere), cdi or edits")
	fs.StringVar(&o.healthAddr, "health-addr", "", "address of /healthz, /readyz and /metrics (empty: none; the operand DaemonSet uses :8083)")
	fs.BoolVar(&o.verbose, "v", false, "log every injection")
	// Host roots of the contract; the plugin reads host paths only through
	// the flags above, these are accepted for uniformity.
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "sysfs root")
	fs.StringVar(&o.devRoot, "dev-root", "/dev", "dev root")
	fs.StringVar(&o.procRoot, "proc-root", "/proc", "proc root")
	if err := cliflags.Parse(fs, args, stdout); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if len(o.index) != 2 || o.index[0] < '0' || o.index[0] > '9' || o.index[1] < '0' || o.index[1] > '9' {
		return o, fmt.Errorf("--plugin-index %q: want two digits", o.index)
	}
	if !pluginName.MatchString(o.name) {
		return o, fmt.Errorf("--plugin-name %q: want letters, digits, '.', '_' or '-'", o.name)
	}
	return o, nil
}

var pluginName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// listFlag is a repeatable flag whose first use replaces the default.
type listFlag struct {
	vals []string
	set  bool
}

func list(defaults ...string) listFlag { return listFlag{vals: defaults} }

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	if !l.set {
		l.vals, l.set = nil, true
	}
	l.vals = append(l.vals, v)
	return nil
}
