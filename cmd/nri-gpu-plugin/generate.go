package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

// generateCDI writes a GPU CDI spec (no hooks) from NVML, unless another
// spec of the kind (nvidia-ctk's) is already there.
func generateCDI(_ context.Context, args []string, stdout, _ io.Writer) error {
	var o gpucdi.Options
	var dir string
	var others listFlag
	others.vals = []string{"/etc/cdi", "/var/run/cdi"}
	var force bool
	fs := flag.NewFlagSet("nri-gpu-plugin generate-cdi", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&dir, "cdi-dir", "/var/run/cdi", "folder to write the spec into")
	fs.Var(&others, "check-cdi-dir", "folders searched for another spec of the kind (repeatable; default /etc/cdi and /var/run/cdi)")
	fs.StringVar(&o.Kind, "cdi-kind", gpucdi.DefaultKind, "CDI kind of the GPU devices")
	fs.StringVar(&o.DevRoot, "dev-root", "/dev", "dev root")
	fs.StringVar(&o.ProcRoot, "proc-root", "/proc", "proc root")
	fs.StringVar(&o.DriverRoot, "driver-root", "/", "root of the driver files (/run/nvidia/driver for a containerized driver)")
	fs.String("sysfs-root", "/sys", "sysfs root (unused; accepted as by every node binary)")
	fs.BoolVar(&force, "force", false, "write even when another spec of the kind exists (the CDI library then drops devices both name)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage of nri-gpu-plugin generate-cdi:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return err
	}
	if !force {
		found, err := gpucdi.OtherSpecs(o.Kind, others.vals...)
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
