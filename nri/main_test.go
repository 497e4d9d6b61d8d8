package nri

import (
	"context"
	"os"
	"testing"

	nrilog "github.com/containerd/nri/pkg/log"
)

// quiet drops the NRI runtime side's own logging (a process-wide logger in
// NRI; the plugin's logging goes through logr).
type quiet struct{}

func (quiet) Debugf(context.Context, string, ...any) {}
func (quiet) Infof(context.Context, string, ...any)  {}
func (quiet) Warnf(context.Context, string, ...any)  {}
func (quiet) Errorf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	nrilog.Set(quiet{})
	os.Exit(m.Run())
}
