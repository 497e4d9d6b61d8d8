package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

func TestHelpListsDiscover(t *testing.T) {
	var out bytes.Buffer
	if code := shell.Run(context.Background(), Program(), []string{"--help"}, shell.IO{Stdout: &out}); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	if !strings.Contains(out.String(), "sandbox-gpu-validator discover") {
		t.Errorf("usage lacks the discover command:\n%s", out.String())
	}
	out.Reset()
	if code := shell.Run(context.Background(), Program(), []string{"discover", "--help"}, shell.IO{Stdout: &out}); code != 0 {
		t.Fatalf("discover --help exit %d", code)
	}
	// The default listener is the port the operator probes and names "metrics".
	if want := fmt.Sprintf(`(default ":%d")`, names.GPUDiscoveryPort); !strings.Contains(out.String(), want) {
		t.Errorf("discover --help lacks %s:\n%s", want, out.String())
	}
	for _, f := range []string{"-sysfs-root", "-node-name", "-resync", "-kubeconfig", "-health-addr"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("discover --help lacks %s:\n%s", f, out.String())
		}
	}
}
