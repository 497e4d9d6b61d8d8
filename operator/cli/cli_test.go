package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

func TestHelpListsTheImageFlags(t *testing.T) {
	var out bytes.Buffer
	if code := shell.Run(context.Background(), Program(), []string{"--help"}, shell.IO{Stdout: &out}); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, f := range []string{"-registry", "-operand-version", "-image-pull-secret", "-image-pull-policy"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help lacks %s:\n%s", f, out.String())
		}
	}
}

// Bad values are bad usage (exit 1, the flag named) before anything starts.
func TestBadFlagValues(t *testing.T) {
	for _, args := range [][]string{
		{"--image-pull-policy=Sometimes"},
		{"--operand-host-root=/var/lib/sandbox-gpu-test/host"}, // the test-only flag is gone: unknown
	} {
		var stderr bytes.Buffer
		code := shell.Run(context.Background(), Program(), args, shell.IO{Stderr: &stderr})
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		name := strings.TrimPrefix(strings.SplitN(args[0], "=", 2)[0], "--")
		if !strings.Contains(stderr.String(), name) {
			t.Errorf("%v: error does not name the flag: %s", args, stderr.String())
		}
	}
}

// The uninstall hook is a subcommand with its timeout.
func TestUninstallCommandHelp(t *testing.T) {
	var out bytes.Buffer
	if code := shell.Run(context.Background(), Program(), []string{"uninstall", "--help"}, shell.IO{Stdout: &out}); code != 0 {
		t.Fatalf("uninstall --help exit %d", code)
	}
	for _, f := range []string{"-timeout", "-kubeconfig", "never one in use"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("uninstall --help lacks %s:\n%s", f, out.String())
		}
	}
}
