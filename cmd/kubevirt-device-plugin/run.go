package main

import (
	"context"
	"encoding/json"
	"io"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/plugincmd"
	"github.com/sandbox-gpu/sandbox-gpu/kubevirt"
)

type options struct {
	common         plugincmd.Common
	namesConfig    string
	permittedFile  string
	printPermitted bool
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	log := o.common.Logger(stderr)
	h, cleanup, err := o.common.Host(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	namer, err := kubevirt.NewNamer(o.common.PCIIDs, o.namesConfig)
	if err != nil {
		return err
	}
	s := &kubevirt.Scanner{Host: h, Namer: namer}
	if o.printPermitted {
		if _, err := s.Scan(ctx); err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s.Permitted())
	}
	return o.common.Serve(ctx, h, plugincmd.Plugin{
		Name: "sandbox-gpu-kubevirt", Scanner: s,
		OnScan: func(res []deviceplugin.Resource) error {
			if o.permittedFile == "" {
				return nil
			}
			return kubevirt.WritePermitted(o.permittedFile, s.PermittedFor(res))
		},
	}, log)
}
