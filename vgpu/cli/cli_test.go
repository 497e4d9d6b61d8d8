package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

type sim struct {
	k    *hostsim.Kernel
	opts host.Options
}

func newSim(t *testing.T, fixture string) *sim {
	t.Helper()
	k, _ := hostsim.NewHost(t, fixture)
	return &sim{k: k, opts: k.Options()}
}

// run runs vgpu-device-manager on the simulated host; no kubelet is asked
// unless the args name a socket.
func (s *sim) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--pod-resources-socket") }) {
		args = append(args, "--pod-resources-socket=")
	}
	args = append(args, "--run-dir", t.TempDir(), "--sysfs-root", s.opts.SysfsRoot, "--dev-root", s.opts.DevRoot, "--proc-root", s.opts.ProcRoot)
	code := shell.Run(context.Background(), ProgramOn(s.k), args, shell.IO{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

type report struct {
	Actions []struct{ Op, Type string } `json:"actions"`
	Refused []struct {
		Address, Reason string
	} `json:"refused"`
	GPUs []struct {
		Have map[string]int `json:"have"`
	} `json:"gpus"`
}

func decode(t *testing.T, out string) report {
	t.Helper()
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"plan", "--help"}, {"apply", "-h"}, {"run", "--help"}} {
		var out bytes.Buffer
		code := shell.Run(context.Background(), Program(), args, shell.IO{Stdout: &out})
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, out.String(), "vgpu-device-manager", "%v", args)
	}
}

func TestPlanChangesNothingApplyConverges(t *testing.T) {
	s := newSim(t, "a10-vgpu")
	code, out, errOut := s.run(t, "plan", "--selected", "A10-4Q", "--output", "json")
	require.Equal(t, 0, code, errOut)
	assert.Len(t, decode(t, out).Actions, 7, "enable the A10's VFs, six creates")
	assert.Empty(t, s.k.Writes(), "plan writes nothing")

	code, out, errOut = s.run(t, "apply", "--selected", "A10-4Q", "--output", "json")
	require.Equal(t, 0, code, errOut)
	r := decode(t, out)
	assert.Len(t, r.Actions, 7)
	assert.Equal(t, map[string]int{"A10-4Q": 6}, r.GPUs[0].Have)

	s.k.ResetWrites()
	code, out, _ = s.run(t, "apply", "--selected", "A10-4Q", "--output", "json")
	require.Equal(t, 0, code)
	assert.Empty(t, decode(t, out).Actions, "idempotent: nothing to do")
	assert.Empty(t, s.k.Writes())
}

func TestBadUsageAndConfigErrorsExitOne(t *testing.T) {
	s := newSim(t, "a10-vgpu")
	bad := filepath.Join(t.TempDir(), "vgpu.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: v1\nvgpu-configs:\n  mine:\n  - devices: all\n    vgpu-devices: {\"A10-4Q\": 3}\n    colour: red\n"), 0o644))
	cases := map[string]struct {
		args []string
		want []string
	}{
		"no selection":   {[]string{"apply"}, []string{"--selected"}},
		"unknown key":    {[]string{"apply", "--config", bad, "--selected", "mine"}, []string{bad, "colour"}},
		"unknown config": {[]string{"plan", "--selected", "nope"}, []string{"nope"}},
		"bad output":     {[]string{"plan", "--selected", "A10-4Q", "--output", "yaml"}, []string{"yaml"}},
		"too many":       {[]string{"plan", "--config", writeConfig(t, `{"A10-4Q": 7}`), "--selected", "mine"}, []string{"A10-4Q", "0000:3b:00.0"}},
		"wrong type":     {[]string{"plan", "--config", writeConfig(t, `{"L40S-12Q": 1}`), "--selected", "mine"}, []string{"L40S-12Q", "A10-4Q"}},
		"run no config":  {[]string{"run", "--node-name", "n"}, []string{"--config FILE is required"}},
		"release config": {[]string{"run", "--release", "--config", bad, "--node-name", "n"}, []string{"--release reads no config"}},
	}
	for name, c := range cases {
		code, _, errOut := s.run(t, c.args...)
		assert.Equal(t, 1, code, "%s: %s", name, errOut)
		for _, w := range c.want {
			assert.Contains(t, errOut, w, name)
		}
	}
	assert.Empty(t, s.k.Writes(), "bad input changes nothing")
}

func writeConfig(t *testing.T, devices string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vgpu.yaml")
	require.NoError(t, os.WriteFile(p, []byte("version: v1\nvgpu-configs:\n  mine:\n  - devices: all\n    vgpu-devices: "+devices+"\n"), 0o644))
	return p
}

// TestHeldVGPURefusedExitTwo: a VM holds one of the GPU's vGPUs, so a
// config that would remove it is refused for that GPU: exit 2, no remove.
func TestHeldVGPURefusedExitTwo(t *testing.T) {
	s := newSim(t, "a10-vgpu")
	code, _, errOut := s.run(t, "apply", "--selected", "A10-4Q")
	require.Equal(t, 0, code, errOut)
	mdevs, err := host.New(s.opts).Mdevs()
	require.NoError(t, err)
	require.NotEmpty(t, mdevs)
	require.NoError(t, s.k.HoldOpen(4242, "qemu-kvm", "vfio/"+strconv.Itoa(mdevs[0].IOMMUGroup)))
	s.k.ResetWrites()

	code, out, _ := s.run(t, "apply", "--selected", "A10-8Q", "--output", "json")
	assert.Equal(t, 2, code)
	r := decode(t, out)
	require.Len(t, r.Refused, 1)
	assert.Contains(t, r.Refused[0].Reason, "in use")
	assert.Contains(t, r.Refused[0].Reason, "qemu-kvm")
	assert.Empty(t, s.k.Writes(), "no write to the held GPU")
	assert.Empty(t, s.k.Violations())

	code, _, errOut = s.run(t, "plan", "--selected", "A10-4Q", "--pod-resources-socket", filepath.Join(t.TempDir(), "none.sock"))
	assert.Equal(t, 1, code, "a socket given explicitly must exist")
	assert.Contains(t, errOut, "none.sock")
}
