package main

import (
	"context"
	"io"
	"strings"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
	"github.com/sandbox-gpu/sandbox-gpu/internal/plugincmd"
	"github.com/sandbox-gpu/sandbox-gpu/kata"
)

type options struct {
	common           plugincmd.Common
	cdiDir           string
	resource         string
	nvswitchResource string
	perModel         bool
	namesConfig      string
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	log := o.common.Logger(stderr)
	h, cleanup, err := o.common.Host(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	s := &kata.Scanner{Host: h, Resource: o.resource, NVSwitchResource: o.nvswitchResource}
	if o.perModel {
		if s.Namer, err = gpuname.NewNamer(o.common.PCIIDs, o.namesConfig); err != nil {
			return err
		}
	}
	cdi := &kata.CDIWriter{Dir: o.cdiDir}
	var reported string
	return o.common.Serve(ctx, h, plugincmd.Plugin{
		Name: "sandbox-gpu-kata", Scanner: s,
		OnScan: func(res []deviceplugin.Resource) error {
			reported = reportPreflight(log, s.LastPreflight(), reported)
			return cdi.Write(res)
		},
		Health: func() (any, bool) {
			pf := s.LastPreflight()
			return pf, pf.IOMMU
		},
	}, log)
}

// reportPreflight logs preflight problems when they change.
func reportPreflight(log logr.Logger, pf kata.Preflight, last string) string {
	problems := strings.Join(pf.Problems(), "; ")
	if problems != last && problems != "" {
		log.Info("Preflight found problems", "problems", pf.Problems())
	}
	return problems
}
