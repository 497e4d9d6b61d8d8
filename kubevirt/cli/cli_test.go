package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// TestBadPCIIDsAndNamesConfigFailClosed: a pci.ids with a short line (which
// crashed pcidb v1.1.1 with "slice bounds out of range") and a names config
// with a bad key or name each stop kubevirt-device-plugin with exit 1 and
// an error naming the file and the line or key, never a panic.
func TestBadPCIIDsAndNamesConfigFailClosed(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	o := k.Options()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	good := write("good.ids", "10de  NVIDIA Corporation\n\t2230  GA102GL [RTX A6000]\n")
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--pci-ids", write("short.ids", "10de  NVIDIA Corporation\n\t23\n")}, []string{"short.ids: line 2", `device`}},
		{[]string{"--pci-ids", write("vendor.ids", "10de\n")}, []string{"vendor.ids: line 1"}},
		{[]string{"--pci-ids", good, "--names-config", write("hex.yaml", "\"10de:0x22\": A10\n")}, []string{"hex.yaml", `key \"10de:0x22`}},
		{[]string{"--pci-ids", good, "--names-config", write("zz.yaml", "\"10de:22zz\": A10\n")}, []string{"zz.yaml", `key \"10de:22zz`}},
		{[]string{"--pci-ids", good, "--names-config", write("long.yaml", "10de:2236: "+string(bytes.Repeat([]byte("A"), 100))+"\n")}, []string{"long.yaml", `key \"10de:2236`, "63"}},
	}
	for _, c := range cases {
		var out bytes.Buffer
		args := append([]string{"--print-permitted-host-devices", "--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot,
			"--modules-dir", o.ModulesDir}, c.args...)
		code := shell.Run(context.Background(), Program(), args, shell.IO{Stdout: &out, Stderr: &out})
		assert.Equal(t, 1, code, "%v: %s", c.args, out.String())
		for _, w := range c.want {
			assert.Contains(t, out.String(), w, "%v", c.args)
		}
		assert.NotContains(t, out.String(), "panic")
	}
	var out bytes.Buffer
	code := shell.Run(context.Background(), Program(), []string{"--print-permitted-host-devices", "--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot,
		"--proc-root", o.ProcRoot, "--modules-dir", o.ModulesDir, "--pci-ids", good}, shell.IO{Stdout: &out, Stderr: &out})
	assert.Equal(t, 0, code, out.String())
}
