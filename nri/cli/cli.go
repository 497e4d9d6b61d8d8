// Package cli is the nri-gpu-plugin command line on the shared
// entry-point shell: the plugin itself (the default command) and
// generate-cdi.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/nri"
)

// Program is nri-gpu-plugin.
func Program() *shell.Program {
	o := defaults()
	return &shell.Program{Name: "nri-gpu-plugin",
		Summary: "a containerd NRI plugin that gives each ordinary container exactly the GPUs the kubelet allocated to it",
		Commands: []*shell.Command{
			{Synopsis: "[--nri-socket PATH] [--pod-resources-socket PATH] [--cdi-dir DIR]... [--resource NAME]... [--fail-open]",
				Roots: true, Listen: true, Daemon: true,
				Flags: func(fs *flag.FlagSet) { o.register(fs) },
				Run: func(ctx context.Context, env *shell.Env) error {
					if err := o.check(); err != nil {
						return err
					}
					// Started by the runtime (pre-registered as NN-name in its plugin
					// dir): the settings come from its config file, handed over in
					// Configure.
					o.preregistered = os.Getenv(api.PluginSocketEnvVar) != ""
					return run(ctx, env, o)
				}},
			generateCommand(),
		}}
}

// options are the plugin's flags.
type options struct {
	nriSocket, podResources, cdiKind, index, name, injection  string
	hooks                                                     string
	checkpoint                                                string
	podResourcesTimeout                                       time.Duration
	cdiDirs, resources, skip, annotationNS, kata, driverRoots listFlag
	failOpen, preregistered, strictPrivileged                 bool
}

func defaults() *options {
	return &options{
		cdiDirs:     list("/etc/cdi", "/var/run/cdi"),
		resources:   list(nri.DefaultResources...),
		skip:        listFlag{vals: []string{"kata*"}, allowEmpty: true},
		kata:        listFlag{allowEmpty: true},
		driverRoots: list(nri.DefaultDriverRoots...),
	}
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	fs.StringVar(&o.podResources, "pod-resources-socket", names.PodResourcesSocket, "the kubelet's PodResources socket")
	fs.DurationVar(&o.podResourcesTimeout, "pod-resources-timeout", time.Second, "bound on each kubelet call (keep it well inside the runtime's 2 s per request)")
	fs.StringVar(&o.checkpoint, "kubelet-checkpoint", nri.DefaultCheckpoint, "the kubelet device manager's checkpoint, for init containers the PodResources API does not list (empty: none)")
	fs.Var(&o.cdiDirs, "cdi-dir", "CDI spec folder (repeatable; default /etc/cdi and /var/run/cdi)")
	fs.Var(&o.resources, "resource", "resource name whose devices are GPUs, path.Match patterns allowed (repeatable; the first use replaces the default "+strings.Join(nri.DefaultResources, ", ")+")")
	fs.StringVar(&o.cdiKind, "cdi-kind", "nvidia.com/gpu", "CDI kind of the GPU devices")
	fs.StringVar(&o.index, "plugin-index", "10", "plugin index (two digits; order among NRI plugins)")
	fs.StringVar(&o.name, "plugin-name", "sandbox-gpu", "plugin name")
	fs.BoolVar(&o.strictPrivileged, "strict-privileged", false, "apply the allocation rule to privileged containers too (default: a privileged container without an allocation keeps env-based GPU access, as nvidia-container-toolkit's accept-envvar-when-privileged)")
	fs.BoolVar(&o.failOpen, "fail-open", false, "start a container with an allocation without its GPUs when they cannot be resolved (default: fail its creation)")
	fs.Var(&o.skip, "skip-runtime-handler", "runtime handler pattern of sandboxed pods to leave alone (repeatable; the first use replaces the default kata*; \"\" is the default runtime's empty handler: pass --skip-runtime-handler kata* --skip-runtime-handler \"\" where Kata is the default runtime)")
	fs.Var(&o.kata, "kata-runtime-handler", "runtime handler of a Kata RuntimeClass (its handler field, exact; repeatable; \"\" is the default runtime): its pods are sandboxed and left alone. Once given, the --skip-runtime-handler default kata* no longer applies")
	fs.Var(&o.driverRoots, "driver-root", "where the driver's files are on the host, which a GPU CDI spec may mount read-only (repeatable; the first use replaces the default "+strings.Join(nri.DefaultDriverRoots, " and ")+")")
	fs.Var(&o.annotationNS, "annotation-namespace", "namespace whose pods may ask for GPUs with the "+names.RequestAnnotation+" annotation (repeatable; default none)")
	fs.StringVar(&o.hooks, "cdi-hooks", nri.HooksNVIDIA, "OCI hooks a GPU CDI spec may bring: nvidia (only NVIDIA's toolkit hooks at their installed paths, with NVIDIA's hook names and argument shapes and no env but NVIDIA_CTK_DEBUG), none, or any; a container whose spec brings another is refused (mounts, device nodes and env of the spec are checked whatever this says)")
	fs.StringVar(&o.injection, "injection", nri.InjectAuto, "auto (CDI requests on containerd 2.1+, resolved edits elsewhere), cdi or edits")
}

var pluginName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (o *options) check() error {
	if len(o.index) != 2 || o.index[0] < '0' || o.index[0] > '9' || o.index[1] < '0' || o.index[1] > '9' {
		return shell.Usagef("--plugin-index %q: want two digits", o.index)
	}
	if !pluginName.MatchString(o.name) {
		return shell.Usagef("--plugin-name %q: want letters, digits, '.', '_' or '-'", o.name)
	}
	return nil
}

// parseConfig reads a pre-registered plugin's config file: the same flags,
// whitespace-separated (the shell's -v and host roots are accepted too).
func parseConfig(config string) (*options, error) {
	o := defaults()
	fs := flag.NewFlagSet("nri-gpu-plugin config", flag.ContinueOnError)
	fs.SetOutput(discard{})
	o.register(fs)
	fs.String("v", "", "")
	for _, root := range []string{"sysfs-root", "dev-root", "proc-root", "health-addr"} {
		fs.String(root, "", "")
	}
	if err := fs.Parse(strings.Fields(config)); err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("plugin config: unexpected argument %q", fs.Arg(0))
	}
	return o, o.check()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// listFlag is a repeatable flag whose first use replaces the default.
type listFlag struct {
	vals []string
	set  bool
	// allowEmpty accepts "" as a value (--skip-runtime-handler "": the
	// default runtime, whose handler is empty).
	allowEmpty bool
}

func list(defaults ...string) listFlag { return listFlag{vals: defaults} }

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(v string) error {
	if v == "" && !l.allowEmpty {
		return errors.New("empty value")
	}
	if !l.set {
		l.vals, l.set = nil, true
	}
	l.vals = append(l.vals, v)
	return nil
}
