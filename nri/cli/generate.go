package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

// generateConfig is what the flags of generate-cdi say.
type generateConfig struct {
	opts             gpucdi.Options
	dir              string   // where the spec is written
	others           listFlag // where another spec of the kind is looked for
	libDirs, binDirs listFlag
	force            bool
}

// generateFlags registers the flags of generate-cdi into c.
func generateFlags(fs *flag.FlagSet, c *generateConfig) {
	c.others = list("/etc/cdi", "/var/run/cdi")
	c.libDirs = list(gpucdi.DefaultLibDirs()...)
	c.binDirs = list(gpucdi.DefaultBinDirs()...)
	fs.StringVar(&c.dir, "cdi-dir", "/var/run/cdi", "folder to write the spec into")
	fs.Var(&c.others, "check-cdi-dir", "folders searched for another spec of the kind (repeatable; default /etc/cdi and /var/run/cdi)")
	fs.StringVar(&c.opts.Kind, "cdi-kind", gpucdi.DefaultKind, "CDI kind of the GPU devices")
	fs.StringVar(&c.opts.DriverRoot, "driver-root", "/", "root of the driver files (/run/nvidia/driver for a containerized driver)")
	fs.Var(&c.libDirs, "lib-dir", "folder inside the driver root searched for driver libraries (repeatable; the first use replaces the defaults)")
	fs.Var(&c.binDirs, "bin-dir", "folder inside the driver root searched for driver binaries (repeatable; the first use replaces the defaults)")
	fs.BoolVar(&c.force, "force", false, "write even when another spec of the kind exists (the CDI library then drops devices both name)")
}

func generateCommand() *shell.Command {
	var c generateConfig
	return &shell.Command{Name: "generate-cdi", Synopsis: "[--cdi-dir DIR] [--driver-root DIR] [--lib-dir DIR]... [--force]",
		Summary: "writes a GPU CDI spec (no hooks) from NVML, where nvidia-ctk wrote none", Roots: true,
		Flags: func(fs *flag.FlagSet) { generateFlags(fs, &c) },
		Run: func(ctx context.Context, env *shell.Env) error {
			roots := hostroots.Options(env.Roots)
			c.opts.DevRoot, c.opts.ProcRoot = roots.DevRoot, roots.ProcRoot
			c.opts.LibDirs, c.opts.BinDirs = c.libDirs.vals, c.binDirs.vals
			return generateCDI(ctx, c, env.Stdout)
		}}
}

// generateCDI writes a GPU CDI spec (no hooks) from NVML, unless another
// spec of the kind (nvidia-ctk's) is already there.
func generateCDI(_ context.Context, c generateConfig, stdout io.Writer) error {
	o, dir := c.opts, c.dir
	if !c.force {
		found, err := gpucdi.OtherSpecs(o.Kind, c.others.vals...)
		if err != nil {
			return err
		}
		if len(found) > 0 {
			if err := gpucdi.Remove(dir, o.Kind); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "kept the existing spec for %s: %s\n", o.Kind, strings.Join(found, ", "))
			return nil
		}
	}
	spec, err := generate(o)
	if err != nil {
		return err
	}
	path, changed, err := gpucdi.Write(spec, dir)
	if err != nil {
		return err
	}
	state := "unchanged"
	if changed {
		state = "written"
	}
	fmt.Fprintf(stdout, "%s %s (%d devices)\n", state, path, len(spec.Devices))
	return nil
}
