package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// runCLI runs vfio-manager in process; "--simulate NAME" in args runs it
// on that simulated host, as the demo does: its kernel given to ProgramOn,
// its tree named by the root flags (shipped binaries have no such flag).
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	p := Program()
	if i := slices.Index(args, "--simulate"); i >= 0 {
		k, _ := hostsim.NewHost(t, args[i+1])
		p = ProgramOn(k)
		args = append(slices.Delete(slices.Clone(args), i, i+2), simFlags(k, args[0])...)
	}
	code = shell.Run(context.Background(), p, args, shell.IO{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// simFlags point command at the simulated host k: its roots, and no
// kubelet (commands that change functions ask one).
func simFlags(k *hostsim.Kernel, command string) []string {
	flags := rootFlags(k.Options())
	if command != "status" {
		flags = append(flags, "--pod-resources-socket=")
	}
	return flags
}

// rootFlags are the flags that point vfio-manager at the roots of opts.
func rootFlags(opts host.Options) []string {
	return []string{"--sysfs-root", opts.SysfsRoot, "--dev-root", opts.DevRoot, "--proc-root", opts.ProcRoot, "--modules-dir", opts.ModulesDir}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"status", "--help"}, {"plan", "--help"}, {"bind", "-h"}, {"unbind", "--help"}, {"daemon", "--help"}} {
		code, out, _ := runCLI(t, args...)
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, out, "Usage", "%v", args)
	}
}

func TestBadUsageExitsOne(t *testing.T) {
	cases := map[string][]string{
		"no command":       {},
		"unknown command":  {"frobnicate"},
		"no selection":     {"bind", "--simulate", "a10"},
		"path in --device": {"bind", "--device", "../../x", "--simulate", "a10"},
		"bad --vendor":     {"plan", "--all", "--vendor", "nvidia", "--simulate", "a10"},
		"bad --output":     {"status", "--output", "yaml", "--simulate", "a10"},
		"bad --to":         {"plan", "--all", "--to", "elsewhere", "--simulate", "a10"},
		"unknown device":   {"plan", "--device", "0000:99:00.0", "--simulate", "a10"},
		"unknown flag":     {"status", "--frob"},
		"stray argument":   {"status", "extra"},
		"simulate flag":    {"status", "--simulate=a10"},
		"release with all": {"daemon", "--release", "--all", "--simulate", "a10"},
		"release config":   {"daemon", "--release", "--config", "x.yaml", "--simulate", "a10"},
		"missing sysfs":    {"status", "--sysfs-root", "/nonexistent/sys"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runCLI(t, args...)
			assert.Equal(t, 1, code, stderr)
			assert.NotEmpty(t, stderr)
		})
	}
	_, _, stderr := runCLI(t, "bind", "--device", "../../x", "--simulate", "a10")
	assert.Contains(t, stderr, `"../../x"`, "the error names the input")
	_, _, stderr = runCLI(t, "status", "--sysfs-root", "/nonexistent/sys")
	assert.Contains(t, stderr, "/nonexistent/sys/bus/pci/devices", "the error names the path")
}

// TestStatusJSONContract decodes status exactly as the contract shapes it.
func TestStatusJSONContract(t *testing.T) {
	code, out, stderr := runCLI(t, "status", "--output", "json", "--simulate", "workstation")
	require.Equal(t, 0, code, stderr)
	var raw struct {
		IOMMU   map[string]any   `json:"iommu"`
		Devices []map[string]any `json:"devices"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	assert.Equal(t, true, raw.IOMMU["enabled"])
	require.Len(t, raw.Devices, 4)
	d := raw.Devices[1]
	assert.Equal(t, "0000:01:00.1", d["address"])
	assert.Equal(t, "10de", d["vendor"])
	assert.Equal(t, "1aef", d["device"])
	assert.Equal(t, "040300", d["class"])
	assert.Equal(t, "snd_hda_intel", d["driver"])
	assert.Equal(t, float64(1), d["iommuGroup"])
	assert.Equal(t, "audio", d["role"])
	roles := []string{}
	for _, d := range raw.Devices {
		roles = append(roles, d["role"].(string))
	}
	assert.Equal(t, []string{"gpu", "audio", "usb", "serial"}, roles)
	assert.Equal(t, "vfio-pci", raw.Devices[0]["vfioDriver"])

	var gh struct {
		VFIO    map[string]any   `json:"vfio"`
		Devices []map[string]any `json:"devices"`
	}
	code, out, _ = runCLI(t, "status", "--output", "json", "--simulate", "gh200")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &gh))
	assert.Equal(t, "nvgrace_gpu_vfio_pci", gh.Devices[0]["vfioDriver"])
	assert.Equal(t, true, gh.VFIO["loaded"])
	assert.Equal(t, true, gh.VFIO["loadable"])

	code, out, _ = runCLI(t, "status", "--output", "json", "--simulate", "iommu-off")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	assert.Equal(t, false, raw.IOMMU["enabled"])
	assert.Contains(t, raw.Devices[0], "iommuGroup")
	assert.Nil(t, raw.Devices[0]["iommuGroup"], "iommuGroup is null without IOMMU")
}

type change struct {
	Actions []struct{ Address, From, To string } `json:"actions"`
	Refused []struct{ Address, Reason string }   `json:"refused"`
}

func TestChangeCommandsExitCodesAndJSON(t *testing.T) {
	cases := []struct {
		args    []string
		code    int
		actions int
		reason  string
	}{
		{[]string{"plan", "--all", "--simulate", "hgx-h100"}, 0, 8, ""},
		{[]string{"plan", "--all", "--nvswitches", "--simulate", "hgx-h100"}, 0, 12, ""},
		{[]string{"bind", "--all", "--simulate", "a10"}, 0, 1, ""},
		{[]string{"bind", "--device", "3b:00.0", "--simulate", "a10"}, 0, 1, ""},
		{[]string{"unbind", "--all", "--simulate", "a10"}, 0, 0, ""},
		{[]string{"plan", "--all", "--to", "host", "--simulate", "a10"}, 0, 0, ""},
		{[]string{"bind", "--all", "--simulate", "shared-nic"}, 2, 1, "group"},
		{[]string{"bind", "--all", "--simulate", "iommu-off"}, 2, 0, "iommu"},
		{[]string{"bind", "--all", "--simulate", "gpu-in-use"}, 2, 1, "in use"},
		{[]string{"plan", "--all", "--simulate", "gpu-in-use"}, 2, 1, "in use"},
		{[]string{"bind", "--all", "--sequential", "--simulate", "gh200"}, 0, 1, ""},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, stderr := runCLI(t, append(tc.args, "--output", "json")...)
			require.Equal(t, tc.code, code, stderr+out)
			var c change
			require.NoError(t, json.Unmarshal([]byte(out), &c), out)
			assert.Len(t, c.Actions, tc.actions)
			if tc.reason != "" {
				require.NotEmpty(t, c.Refused)
				assert.Contains(t, c.Refused[0].Reason, tc.reason)
			} else {
				assert.Empty(t, c.Refused)
			}
			assert.True(t, strings.Contains(out, `"refused": [`), "refused is a list, never null")
		})
	}
}

func TestTableOutput(t *testing.T) {
	code, out, _ := runCLI(t, "status", "--simulate", "hgx-h100")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "IOMMU enabled: true")
	assert.Equal(t, 4, strings.Count(out, "nvswitch"))
	code, out, _ = runCLI(t, "bind", "--all", "--simulate", "gpu-in-use")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "REFUSED")
	assert.Contains(t, out, "pid 4242 (python3)")
}

// TestRootFlagsAreHonoured points the roots at a simulated tree by flag:
// status reads only from there.
func TestRootFlagsAreHonoured(t *testing.T) {
	k, _ := hostsim.NewHost(t, "gh200")
	opts := k.Options()
	code, out, stderr := runCLI(t, append([]string{"plan", "--all", "--output", "json"}, rootFlags(opts)...)...)
	require.Equal(t, 0, code, stderr)
	var c change
	require.NoError(t, json.Unmarshal([]byte(out), &c))
	require.Len(t, c.Actions, 1)
	assert.Equal(t, "0009:01:00.0", c.Actions[0].Address)
	assert.Equal(t, "nvgrace_gpu_vfio_pci", c.Actions[0].To, "variant driver found through --modules-dir")

	// A modules folder without modules.alias: no variant is known, so
	// vfio-pci is the fallback.
	code, out, _ = runCLI(t, "plan", "--all", "--output", "json", "--sysfs-root", opts.SysfsRoot, "--dev-root", opts.DevRoot,
		"--proc-root", opts.ProcRoot, "--modules-dir", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &c))
	assert.Equal(t, "vfio-pci", c.Actions[0].To)
}

// TestNoModprobeUnderOtherRoots: with roots other than the running
// kernel's, a missing vfio-pci is refused, never loaded into this kernel.
func TestNoModprobeUnderOtherRoots(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	opts := k.Options()
	require.NoError(t, os.RemoveAll(filepath.Join(opts.SysfsRoot, "bus", "pci", "drivers", "vfio-pci")))
	code, out, stderr := runCLI(t, append([]string{"bind", "--all", "--output", "json"}, rootFlags(opts)...)...)
	require.Equal(t, 2, code, stderr)
	var c change
	require.NoError(t, json.Unmarshal([]byte(out), &c))
	require.Len(t, c.Refused, 1)
	assert.Contains(t, c.Refused[0].Reason, "driver vfio-pci is not loaded")
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
}
