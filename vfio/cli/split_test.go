package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanVMGPUs: `plan --vm-gpus 2` on the HGX H100 previews the split
// (the two VM GPUs on NUMA node 1, the six container GPUs) and the moves,
// touching nothing; the table says the same; a model name matches through
// --pci-ids.
func TestPlanVMGPUs(t *testing.T) {
	code, out, stderr := runCLI(t, "plan", "--vm-gpus", "2", "--output", "json", "--simulate", "hgx-h100")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Target  string
		DryRun  bool
		Actions []struct{ Address, From, To string }
		Refused []struct{ Address, Reason string }
		Split   struct {
			Declared, Source string
			VM, Container    []string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, "split", r.Target)
	assert.True(t, r.DryRun)
	assert.Equal(t, []string{"0000:9a:00.0", "0000:ab:00.0"}, r.Split.VM)
	assert.Len(t, r.Split.Container, 6)
	assert.Equal(t, "--vm-gpus", r.Split.Source)
	require.Len(t, r.Actions, 2)
	for _, a := range r.Actions {
		assert.Equal(t, "nvidia", a.From)
		assert.Equal(t, "vfio-pci", a.To)
	}
	assert.Empty(t, r.Refused)

	code, out, stderr = runCLI(t, "plan", "--vm-gpus", "index:0,7", "--simulate", "hgx-h100")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "Split index:0,7: VM GPUs (vfio): 0000:18:00.0 0000:db:00.0")
	assert.Contains(t, out, "Container GPUs (host driver): 0000:2a:00.0 0000:3a:00.0")
	assert.Contains(t, out, "PLANNED")

	ids := filepath.Join(t.TempDir(), "pci.ids")
	require.NoError(t, os.WriteFile(ids, []byte("10de  NVIDIA Corporation\n\t2330  GH100 [H100 SXM5 80GB]\n"), 0o644))
	code, out, stderr = runCLI(t, "plan", "--vm-gpus", "model:H100", "--pci-ids", ids, "--simulate", "hgx-h100")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "Container GPUs (host driver): none")
}

// TestBindVMGPUs: `bind --vm-gpus 1` moves one GPU and leaves the rest.
func TestBindVMGPUs(t *testing.T) {
	code, out, stderr := runCLI(t, "bind", "--vm-gpus", "1", "--lock-file", "", "--simulate", "hgx-h100")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "Split 1: VM GPUs (vfio): 0000:9a:00.0")
	assert.Contains(t, out, "DONE")
}

// TestBadVMGPUs: a bad --vm-gpus, one the host does not fit, a model name
// without --pci-ids, and --vm-gpus with a selection or a release are bad
// usage (exit 1) naming the flag and the value.
func TestBadVMGPUs(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"syntax":       {[]string{"plan", "--vm-gpus", "three"}, `--vm-gpus: bad input: "three"`},
		"too many":     {[]string{"plan", "--vm-gpus", "9"}, `"9": this node has 8 GPUs`},
		"name no ids":  {[]string{"plan", "--vm-gpus", "model:H100"}, "needs a pci.ids file"},
		"with all":     {[]string{"plan", "--vm-gpus", "2", "--all"}, "takes no --all"},
		"with --to":    {[]string{"plan", "--vm-gpus", "2", "--to", "host"}, "takes no --all, --device or --to"},
		"release":      {[]string{"daemon", "--release", "--vm-gpus", "2"}, "take no --release"},
		"both":         {[]string{"daemon", "--vm-gpus", "2", "--vm-gpus-from-node"}, "exclude each other"},
		"daemon bad":   {[]string{"daemon", "--vm-gpus", "x"}, `--vm-gpus: bad input`},
		"no node name": {[]string{"daemon", "--vm-gpus-from-node", "--node-name", ""}, "no node name"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(c.args, "--simulate", "hgx-h100")...)
			assert.Equal(t, 1, code, stderr)
			assert.Contains(t, stderr, c.want)
		})
	}
}
