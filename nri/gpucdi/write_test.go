package gpucdi

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestSpecFileName(t *testing.T) {
	assert.Equal(t, "sandbox-gpu-nri-nvidia.com-gpu.yaml", SpecFileName("nvidia.com/gpu"))
	assert.Equal(t, "sandbox-gpu-nri-example.com-mig.yaml", SpecFileName("example.com/mig"))
}

func TestWriteIsIdempotentAndAtomic(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	dir := filepath.Join(t.TempDir(), "cdi")
	spec := buildTwo(t, h.opts())

	p, changed, err := Write(spec, dir)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, filepath.Join(dir, "sandbox-gpu-nri-nvidia.com-gpu.yaml"), p)
	st1, err := os.Stat(p)
	require.NoError(t, err)

	again := buildTwo(t, h.opts())
	_, changed, err = Write(again, dir)
	require.NoError(t, err)
	assert.False(t, changed, "the same spec is not rewritten")
	st2, err := os.Stat(p)
	require.NoError(t, err)
	assert.True(t, os.SameFile(st1, st2))

	h.file(h.dev, "nvidia-modeset")
	spec = buildTwo(t, h.opts())
	_, changed, err = Write(spec, dir)
	require.NoError(t, err)
	assert.True(t, changed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
	read, err := cdi.ReadSpec(p, 0)
	require.NoError(t, err)
	assert.Equal(t, spec, read.Spec)

	bad := *spec
	bad.Devices = slices.Clone(spec.Devices)
	bad.Devices[1].Name = "0"
	_, _, err = Write(&bad, dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `device "0" twice`)

	_, _, err = Write(spec, filepath.Join(p, "under-a-file"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "under-a-file")
}

func TestOtherSpecsAndRemove(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	etc, run := filepath.Join(t.TempDir(), "etc-cdi"), filepath.Join(t.TempDir(), "run-cdi")
	spec := buildTwo(t, h.opts())
	_, _, err := Write(spec, run)
	require.NoError(t, err)

	other, err := OtherSpecs(DefaultKind, etc, run)
	require.NoError(t, err)
	assert.Empty(t, other, "our own spec does not count")

	// nvidia-ctk's spec, a spec of another kind and a broken one.
	h.write(etc, "nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n")
	h.write(run, "pgpu.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/pgpu\ndevices:\n- name: x\n  containerEdits:\n    deviceNodes:\n    - path: /dev/vfio/1\n")
	h.write(run, "broken.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [\n")
	other, err = OtherSpecs(DefaultKind, etc, run)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(etc, "nvidia.yaml")}, other)
	other, err = OtherSpecs("nvidia.com/pgpu", etc, run)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(run, "pgpu.yaml")}, other)

	require.NoError(t, Remove(run, DefaultKind))
	assert.NoFileExists(t, filepath.Join(run, SpecFileName(DefaultKind)))
	require.NoError(t, Remove(run, DefaultKind), "removing twice is fine")
	assert.FileExists(t, filepath.Join(run, "pgpu.yaml"))
}

// TestSpecInjects resolves the written spec with the CDI library, as a
// runtime does, and checks the OCI edits.
func TestSpecInjects(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	// No control node exists: the spec's numbers are enough for the CDI
	// library.
	h.write(h.proc, "driver/nvidia-caps/mig-minors", "gpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\ngpu3/gi2/access 39\ngpu3/gi2/ci0/access 40\n")
	dir := t.TempDir()
	spec, err := Build(migInventory(), h.opts())
	require.NoError(t, err)
	_, _, err = Write(spec, dir)
	require.NoError(t, err)
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors(), "the CDI library accepts the spec")
	assert.Len(t, cache.ListDevices(), 9)

	inject := func(devices ...string) *oci.Spec {
		t.Helper()
		s := &oci.Spec{Process: &oci.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=all", "PATH=/bin"}}}
		unresolved, err := cache.InjectDevices(s, devices...)
		require.NoError(t, err)
		require.Empty(t, unresolved)
		return s
	}
	devs := func(s *oci.Spec) []string {
		var out []string
		for _, d := range s.Linux.Devices {
			out = append(out, d.Path+" "+d.Type+" "+itoa64(d.Major)+":"+itoa64(d.Minor))
		}
		return out
	}

	s := inject("nvidia.com/gpu=0")
	ctl := []string{"/dev/nvidiactl c 195:255", "/dev/nvidia-uvm c 508:0", "/dev/nvidia-uvm-tools c 508:1"}
	assert.Equal(t, append(ctl, "/dev/nvidia0 c 195:0"), devs(s))
	var allowed []string
	for _, r := range s.Linux.Resources.Devices {
		assert.True(t, r.Allow)
		allowed = append(allowed, r.Type+" "+itoa64(*r.Major)+":"+itoa64(*r.Minor)+" "+r.Access)
	}
	assert.ElementsMatch(t, []string{"c 195:0 rwm", "c 195:255 rwm", "c 508:0 rwm", "c 508:1 rwm"}, allowed)
	assert.ElementsMatch(t, []string{"NVIDIA_VISIBLE_DEVICES=void", "PATH=/bin"}, s.Process.Env)
	assert.Nil(t, s.Hooks, "no hooks reach the container")
	var mounts []string
	for _, m := range s.Mounts {
		mounts = append(mounts, m.Destination+" <- "+m.Source)
	}
	lib := "/usr/lib/x86_64-linux-gnu/libcuda.so." + testVersion
	assert.Contains(t, mounts, "/usr/lib/x86_64-linux-gnu/libcuda.so.1 <- "+filepath.Join(h.driver, lib))
	assert.Contains(t, mounts, lib+" <- "+filepath.Join(h.driver, lib))
	assert.Contains(t, mounts, "/usr/local/nvidia/lib64/libcuda.so.1 <- "+filepath.Join(h.driver, lib))
	assert.Contains(t, mounts, "/usr/bin/nvidia-smi <- "+filepath.Join(h.driver, "/usr/bin/nvidia-smi"))

	byUUID := inject("nvidia.com/gpu=GPU-bbbb")
	assert.Equal(t, append(ctl, "/dev/nvidia3 c 195:3"), devs(byUUID))

	mig := inject("nvidia.com/gpu=1:2")
	assert.Equal(t, append(ctl,
		"/dev/nvidia3 c 195:3", "/dev/nvidia-caps/nvidia-cap39 c 237:39", "/dev/nvidia-caps/nvidia-cap40 c 237:40",
	), devs(mig))

	all := inject("nvidia.com/gpu=all")
	assert.Len(t, all.Linux.Devices, 9, "two GPUs, four caps, three control nodes")

	// A pod with hostUsers: false: nothing to run in the bundle; the CDI
	// library makes the bind mounts ID-mapped.
	userns := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{
		Namespaces:  []oci.LinuxNamespace{{Type: oci.UserNamespace}},
		UIDMappings: []oci.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
		GIDMappings: []oci.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
	}}
	_, err = cache.InjectDevices(userns, "nvidia.com/gpu=0")
	require.NoError(t, err)
	assert.Nil(t, userns.Hooks)
	require.NotEmpty(t, userns.Mounts)
	for _, m := range userns.Mounts {
		assert.Contains(t, m.Options, "ridmap", m.Destination)
	}
}

func TestValidateRejects(t *testing.T) {
	good := func() *cdispec.Spec {
		return &cdispec.Spec{Kind: DefaultKind, Devices: []cdispec.Device{{
			Name: "0", ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0"}}},
		}}}
	}
	require.NoError(t, Validate(good()))
	for name, break_ := range map[string]func(*cdispec.Spec){
		"vendor":       func(s *cdispec.Spec) { s.Kind = "-x/gpu" },
		"no devices":   func(s *cdispec.Spec) { s.Devices = nil },
		"device name":  func(s *cdispec.Spec) { s.Devices[0].Name = "a/b" },
		"empty edits":  func(s *cdispec.Spec) { s.Devices[0].ContainerEdits = cdispec.ContainerEdits{} },
		"node":         func(s *cdispec.Spec) { s.Devices[0].ContainerEdits.DeviceNodes[0].Type = "x" },
		"common mount": func(s *cdispec.Spec) { s.ContainerEdits.Mounts = []*cdispec.Mount{{HostPath: "/a"}} },
		"version":      func(s *cdispec.Spec) { s.Version = "0.3.0" },
	} {
		s := good()
		break_(s)
		assert.Error(t, Validate(s), name)
	}
	assert.Error(t, Validate(nil))
}
