package nritest

import (
	"context"
	"os"
	"testing"

	nrilog "github.com/containerd/nri/pkg/log"
)

// QuietNRI drops the NRI runtime side's own logging, a process-wide logger
// in NRI (the plugin's own logging goes through logr). Call it from
// TestMain, or use Main.
func QuietNRI() { nrilog.Set(quiet{}) }

// Main is the TestMain of a package that runs the NRI runtime side: its
// tests run with QuietNRI.
func Main(m *testing.M) {
	QuietNRI()
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Debugf(context.Context, string, ...any) {}
func (quiet) Infof(context.Context, string, ...any)  {}
func (quiet) Warnf(context.Context, string, ...any)  {}
func (quiet) Errorf(context.Context, string, ...any) {}
