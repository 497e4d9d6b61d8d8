package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/cliflags"
	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

// generateConfig is what the flags of generate-cdi say.
type generateConfig struct {
	opts   gpucdi.Options
	dir    string   // where the spec is written
	others []string // where another spec of the kind is looked for
	force  bool
}

// parseGenerateFlags reads the flags of generate-cdi; --help prints them
// to stdout and returns flag.ErrHelp.
func parseGenerateFlags(args []string, stdout io.Writer) (generateConfig, error) {
	var c generateConfig
	others := list("/etc/cdi", "/var/run/cdi")
	libDirs := list(gpucdi.DefaultLibDirs()...)
	binDirs := list(gpucdi.DefaultBinDirs()...)
	fs := flag.NewFlagSet("nri-gpu-plugin generate-cdi", flag.ContinueOnError)
	fs.StringVar(&c.dir, "cdi-dir", "/var/run/cdi", "folder to write the spec into")
	fs.Var(&others, "check-cdi-dir", "folders searched for another spec of the kind (repeatable; default /etc/cdi and /var/run/cdi)")
	fs.StringVar(&c.opts.Kind, "cdi-kind", gpucdi.DefaultKind, "CDI kind of the GPU devices")
	fs.StringVar(&c.opts.DevRoot, "dev-root", "/dev", "dev root")
	fs.StringVar(&c.opts.ProcRoot, "proc-root", "/proc", "proc root")
	fs.StringVar(&c.opts.DriverRoot, "driver-root", "/", "root of the driver files (/run/nvidia/driver for a containerized driver)")
	fs.Var(&libDirs, "lib-dir", "folder inside the driver root searched for driver libraries (repeatable; the first use replaces the defaults)")
	fs.Var(&binDirs, "bin-dir", "folder inside the driver root searched for driver binaries (repeatable; the first use replaces the defaults)")
	fs.String("sysfs-root", "/sys", "sysfs root (unused; accepted as by every node binary)")
	fs.BoolVar(&c.force, "force", false, "write even when another spec of the kind exists (the CDI library then drops devices both name)")
	if err := cliflags.Parse(fs, args, stdout); err != nil {
		return generateConfig{}, err
	}
	c.others, c.opts.LibDirs, c.opts.BinDirs = others.vals, libDirs.vals, binDirs.vals
	return c, nil
}

// generateCDI writes a GPU CDI spec (no hooks) from NVML, unless another
// spec of the kind (nvidia-ctk's) is already there.
func generateCDI(_ context.Context, args []string, stdout, _ io.Writer) error {
	c, err := parseGenerateFlags(args, stdout)
	if err != nil {
		return err
	}
	o, dir := c.opts, c.dir
	if !c.force {
		found, err := gpucdi.OtherSpecs(o.Kind, c.others...)
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
