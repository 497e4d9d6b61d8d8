package nritest

import (
	"context"

	nrilog "github.com/containerd/nri/pkg/log"
)

// QuietNRI drops the NRI runtime side's own logging, a process-wide logger
// in NRI (the plugin's own logging goes through logr). Call it from
// TestMain.
func QuietNRI() { nrilog.Set(quiet{}) }

type quiet struct{}

func (quiet) Debugf(context.Context, string, ...any) {}
func (quiet) Infof(context.Context, string, ...any)  {}
func (quiet) Warnf(context.Context, string, ...any)  {}
func (quiet) Errorf(context.Context, string, ...any) {}
