package kata

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
)

// loadCDI reads a folder with the real CDI library, requiring that it
// found no errors.
func loadCDI(t *testing.T, dir string) *cdi.Cache {
	t.Helper()
	cache, err := cdiCache(dir)
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors(), "the CDI library accepts every spec")
	return cache
}

// cdiCache reads a folder with the real CDI library, for polling.
func cdiCache(dir string) (*cdi.Cache, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, err
	}
	return cache, cache.Refresh()
}

// nodes lists the device nodes a CDI device injects: its own edits plus
// its spec's, sorted.
func nodes(d *cdi.Device) []string {
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	for _, n := range d.GetSpec().ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	sort.Strings(out)
	return out
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st
}

func TestCDISpecResolvesA10(t *testing.T) {
	_, h := onVFIO(t, "a10")
	res := scanAll(t, &Scanner{Host: h})
	dir := t.TempDir()
	w := &CDIWriter{Dir: dir}
	require.NoError(t, w.Write(res))
	assert.Equal(t, []string{"sandbox-gpu-kata-nvidia.com-pgpu.yaml"}, dirEntries(t, dir), "one spec, no temporary files left")

	cache := loadCDI(t, dir)
	assert.Equal(t, []string{"nvidia.com/pgpu=12"}, cache.ListDevices())
	for _, d := range res[0].Devices {
		for _, v := range d.Values {
			assert.NotNil(t, cache.GetDevice(v), "the Allocate name %s resolves", v)
		}
	}
	dev := cache.GetDevice("nvidia.com/pgpu=12")
	require.NotNil(t, dev)
	assert.Equal(t, "nvidia.com/pgpu", dev.GetSpec().Kind)
	assert.Equal(t, []string{"/dev/vfio/12", "/dev/vfio/vfio"}, nodes(dev))
	assert.Equal(t, filepath.Join(dir, "sandbox-gpu-kata-nvidia.com-pgpu.yaml"), dev.GetSpec().GetPath())

	built, err := Spec(res[0])
	require.NoError(t, err)
	minimum, err := cdispec.MinimumRequiredVersion(built)
	require.NoError(t, err)
	assert.Equal(t, minimum, dev.GetSpec().Version, "the lowest cdiVersion the content needs")
	// Device names starting with a digit (IOMMU groups) need 0.5.0; nothing
	// newer is used.
	assert.Equal(t, "0.5.0", dev.GetSpec().Version)
	raw, err := os.ReadFile(specPath(dir, DefaultResource))
	require.NoError(t, err)
	assert.Contains(t, string(raw), "cdiVersion: 0.5.0")
}

func TestCDISpecIOMMUFD(t *testing.T) {
	k, h := onVFIO(t, "a10")
	require.NoError(t, k.EnableIOMMUFD())
	res := scanAll(t, &Scanner{Host: h})
	dir := t.TempDir()
	require.NoError(t, (&CDIWriter{Dir: dir}).Write(res))
	cache := loadCDI(t, dir)
	dev := cache.GetDevice("nvidia.com/pgpu=vfio0")
	require.NotNil(t, dev)
	assert.Equal(t, []string{"/dev/iommu", "/dev/vfio/12", "/dev/vfio/devices/vfio0", "/dev/vfio/vfio"}, nodes(dev))
	var spec []string
	for _, n := range dev.GetSpec().ContainerEdits.DeviceNodes {
		spec = append(spec, n.Path)
	}
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/iommu"}, spec, "the shared nodes are spec-level edits")
	assert.Equal(t, "0.3.0", dev.GetSpec().Version, "vfioN names need no more than the earliest version")
}

func TestCDISpecPerModelAndCustomKinds(t *testing.T) {
	n, err := gpuname.NewNamer("", "")
	require.NoError(t, err)
	_, h := onVFIO(t, "hgx-h100")
	dir := t.TempDir()
	require.NoError(t, (&CDIWriter{Dir: dir}).Write(scanAll(t, &Scanner{Host: h, Namer: n})))
	assert.Equal(t, []string{"sandbox-gpu-kata-nvidia.com-GH100_H100_SXM5_80GB.yaml", "sandbox-gpu-kata-nvidia.com-nvswitch.yaml"}, dirEntries(t, dir))
	cache := loadCDI(t, dir)
	assert.NotNil(t, cache.GetDevice("nvidia.com/GH100_H100_SXM5_80GB=27"))
	assert.NotNil(t, cache.GetDevice("nvidia.com/nvswitch=40"))
	assert.Len(t, cache.ListDevices(), 12)

	dir = t.TempDir()
	require.NoError(t, (&CDIWriter{Dir: dir}).Write(scanAll(t, &Scanner{Host: h, Resource: "example.com/gpu"})))
	cache = loadCDI(t, dir)
	assert.NotNil(t, cache.GetDevice("example.com/gpu=20"))
}

// writtenHGX puts an HGX H100's GPUs and NVSwitches on vfio and writes
// their specs once into a fresh folder (the writer's Dir).
func writtenHGX(t *testing.T) (*host.Host, *Scanner, *CDIWriter) {
	t.Helper()
	_, h := onVFIO(t, "hgx-h100")
	s := &Scanner{Host: h}
	w := &CDIWriter{Dir: t.TempDir()}
	require.NoError(t, w.Write(scanAll(t, s)))
	return h, s, w
}

func TestCDIWriteOnlyOnChange(t *testing.T) {
	h, s, w := writtenHGX(t)
	dir := w.Dir
	gpuSpec, swSpec := specPath(dir, DefaultResource), specPath(dir, DefaultNVSwitchResource)
	gpu1, sw1 := mustStat(t, gpuSpec), mustStat(t, swSpec)

	require.NoError(t, w.Write(scanAll(t, s)))
	gpu2 := mustStat(t, gpuSpec)
	assert.True(t, os.SameFile(gpu1, gpu2), "unchanged resources: the spec is not rewritten")
	assert.Equal(t, gpu1.ModTime(), gpu2.ModTime())

	// A spec removed behind the writer's back is written again.
	require.NoError(t, os.Remove(gpuSpec))
	require.NoError(t, w.Write(scanAll(t, s)))
	require.FileExists(t, gpuSpec)
	gpu1 = mustStat(t, gpuSpec)

	toHost(t, h, hgxGPUs[0])
	require.NoError(t, w.Write(scanAll(t, s)))
	assert.False(t, os.SameFile(gpu1, mustStat(t, gpuSpec)), "a changed resource is rewritten (atomically: new file)")
	assert.True(t, os.SameFile(sw1, mustStat(t, swSpec)), "the NVSwitch spec did not change")
	cache := loadCDI(t, dir)
	assert.Nil(t, cache.GetDevice("nvidia.com/pgpu=20"), "the returned GPU's ID is gone")
	assert.NotNil(t, cache.GetDevice("nvidia.com/pgpu=21"))
	assert.Len(t, cache.GetVendorSpecs("nvidia.com"), 2)
	assert.Equal(t, []string{"sandbox-gpu-kata-nvidia.com-nvswitch.yaml", "sandbox-gpu-kata-nvidia.com-pgpu.yaml"}, dirEntries(t, dir))
}

func TestCDIRemovesSpecsOfVanishedResources(t *testing.T) {
	h, s, w := writtenHGX(t)
	dir := w.Dir
	require.FileExists(t, specPath(dir, DefaultNVSwitchResource))

	toHost(t, h, hgxSwitches...)
	res := scanAll(t, s)
	require.Equal(t, []string{DefaultResource}, names(res))
	require.NoError(t, w.Write(res))
	assert.NoFileExists(t, specPath(dir, DefaultNVSwitchResource), "no NVSwitch on vfio: its spec is removed")
	assert.Equal(t, []string{"sandbox-gpu-kata-nvidia.com-pgpu.yaml"}, dirEntries(t, dir))
	assert.Nil(t, loadCDI(t, dir).GetDevice("nvidia.com/nvswitch=40"))

	require.NoError(t, w.Write(nil))
	assert.Empty(t, dirEntries(t, dir), "nothing advertised: no spec left")
	require.NoError(t, w.Write(nil), "removing again is no error")

	// A resource that comes back is written again.
	require.NoError(t, w.Write(res))
	assert.NotNil(t, loadCDI(t, dir).GetDevice("nvidia.com/pgpu=27"))
}

func TestCDIWriteLeavesOtherSpecsAlone(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "example.com-nic.yaml")
	require.NoError(t, os.WriteFile(other, []byte("cdiVersion: 0.3.0\nkind: example.com/nic\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n"), 0o644))
	_, h := onVFIO(t, "a10")
	w := &CDIWriter{Dir: dir}
	require.NoError(t, w.Write(scanAll(t, &Scanner{Host: h})))
	require.NoError(t, w.Write(nil))
	assert.FileExists(t, other, "specs the writer did not write are never removed")
}

func TestCDIUnwritableDir(t *testing.T) {
	_, h := onVFIO(t, "a10")
	res := scanAll(t, &Scanner{Host: h})
	base := t.TempDir()
	blocker := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	dir := filepath.Join(blocker, "cdi") // under a regular file: never creatable, even as root
	err := (&CDIWriter{Dir: dir}).Write(res)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "sandbox-gpu-kata-nvidia.com-pgpu.yaml"))
}

func TestCDIConcurrentWrites(t *testing.T) {
	_, h := onVFIO(t, "hgx-h100")
	s := &Scanner{Host: h}
	dir := t.TempDir()
	w := &CDIWriter{Dir: dir}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Scan(t.Context())
			if err == nil {
				err = w.Write(res)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, e := range dirEntries(t, dir) {
		assert.False(t, strings.HasSuffix(e, ".tmp"), "no temporary file left: %s", e)
	}
	assert.Len(t, loadCDI(t, dir).ListDevices(), 12)
}

func TestSpecNameAndShape(t *testing.T) {
	assert.Equal(t, "sandbox-gpu-kata-nvidia.com-pgpu.yaml", SpecName("nvidia.com/pgpu"))
	assert.Equal(t, "sandbox-gpu-kata-nvidia.com-nvswitch.yaml", SpecName("nvidia.com/nvswitch"))

	r := deviceplugin.Resource{Name: "nvidia.com/pgpu", Devices: []deviceplugin.Device{
		{ID: "3", Specs: deviceplugin.VFIOSpecs("", 3, nil, false)},
		{ID: "4", Specs: deviceplugin.VFIOSpecs("", 4, nil, false)},
	}}
	spec, err := Spec(r)
	require.NoError(t, err)
	require.Len(t, spec.ContainerEdits.DeviceNodes, 1, "/dev/vfio/vfio once, at spec level")
	assert.Equal(t, "/dev/vfio/vfio", spec.ContainerEdits.DeviceNodes[0].Path)
	require.Len(t, spec.Devices, 2)
	assert.Equal(t, "4", spec.Devices[1].Name)
	require.Len(t, spec.Devices[1].ContainerEdits.DeviceNodes, 1)
	assert.Equal(t, "/dev/vfio/4", spec.Devices[1].ContainerEdits.DeviceNodes[0].Path)
	assert.NoError(t, cdispec.ValidateVersion(spec))
}

// Specs this plugin wrote before a restart, for a resource that is gone
// now (or was renamed), are removed; other owners' specs are kept.
func TestStaleSpecsFromAnEarlierRunAreRemoved(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, SpecName("nvidia.com/oldname"))
	require.NoError(t, os.WriteFile(old, []byte(OwnerMarker+"\ncdiVersion: 0.5.0\nkind: nvidia.com/oldname\ndevices:\n- name: \"12\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/vfio/12\n"), 0o644))
	foreign := filepath.Join(dir, "nvidia.com-gpu.yaml")
	require.NoError(t, os.WriteFile(foreign, []byte("cdiVersion: 0.3.0\nkind: nvidia.com/gpu\ndevices:\n- name: gpu0\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"), 0o644))

	w := &CDIWriter{Dir: dir}
	require.NoError(t, w.Write([]deviceplugin.Resource{{Name: "nvidia.com/pgpu", Devices: []deviceplugin.Device{{ID: "12",
		Specs: deviceplugin.VFIOSpecs("", 12, nil, false)}}}}))
	_, err := os.Stat(old)
	assert.True(t, os.IsNotExist(err), "the earlier run's spec is gone")
	_, err = os.Stat(foreign)
	assert.NoError(t, err, "a spec owned by someone else stays")
	cache := loadCDI(t, dir)
	assert.Nil(t, cache.GetDevice("nvidia.com/oldname=12"))
	assert.NotNil(t, cache.GetDevice("nvidia.com/pgpu=12"))

	// A file at one of the plugin's names that it did not write stays too, and is reported.
	unmarked := filepath.Join(dir, SpecName("nvidia.com/other"))
	require.NoError(t, os.WriteFile(unmarked, []byte("cdiVersion: 0.5.0\nkind: nvidia.com/other\n"), 0o644))
	require.ErrorIs(t, w.Write(nil), errNotOurs)
	assert.FileExists(t, unmarked)
}

// TestSpecOnAMovedDev: where the node's /dev is elsewhere (a simulated
// node), the CDI device nodes keep their container paths and name the
// host paths.
func TestSpecOnAMovedDev(t *testing.T) {
	spec, err := Spec(deviceplugin.Resource{Name: "nvidia.com/pgpu", Devices: []deviceplugin.Device{
		{ID: "3", Specs: deviceplugin.VFIOSpecs("/sim/dev", 3, nil, false)}}})
	require.NoError(t, err)
	require.Len(t, spec.Devices, 1)
	assert.Equal(t, "/dev/vfio/3", spec.Devices[0].ContainerEdits.DeviceNodes[0].Path)
	assert.Equal(t, "/sim/dev/vfio/3", spec.Devices[0].ContainerEdits.DeviceNodes[0].HostPath)
	assert.Equal(t, "/dev/vfio/vfio", spec.ContainerEdits.DeviceNodes[0].Path)
	assert.Equal(t, "/sim/dev/vfio/vfio", spec.ContainerEdits.DeviceNodes[0].HostPath)
}

// TestWriterKeepsToItsOwnKinds: the writer never writes a kind that is not
// the plugin's own, and never the container GPU kinds; RemoveAll (a
// graceful stop) removes only the plugin's own files.
func TestWriterKeepsToItsOwnKinds(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "nvidia.yaml")
	require.NoError(t, os.WriteFile(foreign, []byte("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: []\n"), 0o644))
	pgpu := deviceplugin.Resource{Name: "nvidia.com/pgpu", Devices: []deviceplugin.Device{{ID: "3", Specs: deviceplugin.VFIOSpecs("", 3, nil, false)}}}
	gpu := deviceplugin.Resource{Name: "nvidia.com/gpu", Devices: pgpu.Devices}
	other := deviceplugin.Resource{Name: "example.com/gpu", Devices: pgpu.Devices}

	w := &CDIWriter{Dir: dir, Kinds: map[string]bool{"nvidia.com/pgpu": true}}
	err := w.Write([]deviceplugin.Resource{pgpu, other, gpu})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "example.com/gpu: not a kind of this plugin")
	assert.Contains(t, err.Error(), "nvidia.com/gpu: not a kind of this plugin")
	assert.FileExists(t, filepath.Join(dir, SpecName("nvidia.com/pgpu")))
	assert.NoFileExists(t, filepath.Join(dir, SpecName("nvidia.com/gpu")))

	err = (&CDIWriter{Dir: dir}).Write([]deviceplugin.Resource{gpu})
	assert.ErrorContains(t, err, "nvidia.com/gpu: not a kind of this plugin", "per-model names never yield the GPU kind")

	require.NoError(t, w.RemoveAll())
	assert.NoFileExists(t, filepath.Join(dir, SpecName("nvidia.com/pgpu")))
	assert.FileExists(t, foreign, "another writer's spec is not ours to remove")
}

// TestCDIWriterRefusesFilesItDidNotWrite: at the plugin's own spec name, a
// planted symlink (to a file outside the folder), another writer's spec
// (no OwnerMarker), a FIFO and a folder are each refused with an error
// naming the file, and left exactly as they were: the link's target is not
// written, nothing blocks. Removal refuses them the same way. Once the
// name is free the spec is written, with the marker, and replaced later.
func TestCDIWriterRefusesFilesItDidNotWrite(t *testing.T) {
	res := []deviceplugin.Resource{{Name: DefaultResource, Devices: []deviceplugin.Device{{ID: "12", Specs: deviceplugin.VFIOSpecs("", 12, nil, false)}}}}
	target := filepath.Join(t.TempDir(), "nvidia.yaml")
	nvidia := []byte("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n")
	require.NoError(t, os.WriteFile(target, nvidia, 0o644))
	for _, tc := range []struct {
		name  string
		plant func(path string) error
		kind  string
	}{
		{"symlink", func(p string) error { return os.Symlink(target, p) }, "is a symbolic link, not followed"},
		{"foreign spec", func(p string) error { return os.WriteFile(p, nvidia, 0o644) }, `no "` + OwnerMarker + `" line`},
		{"marker not first", func(p string) error { return os.WriteFile(p, append(nvidia, OwnerMarker+"\n"...), 0o644) }, "no \""},
		{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is a FIFO, not a regular file"},
		{"folder", func(p string) error { return os.Mkdir(p, 0o755) }, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := specPath(dir, DefaultResource)
			require.NoError(t, tc.plant(p))
			before, err := os.Lstat(p)
			require.NoError(t, err)
			w := &CDIWriter{Dir: dir}
			err = w.Write(res)
			require.ErrorIs(t, err, errNotOurs)
			assert.ErrorContains(t, err, "CDI spec "+p+": ")
			assert.ErrorContains(t, err, tc.kind)
			after, err := os.Lstat(p)
			require.NoError(t, err)
			assert.True(t, os.SameFile(before, after), "left in place")
			assert.Equal(t, before.ModTime(), after.ModTime(), "unchanged")
			got, err := os.ReadFile(target)
			require.NoError(t, err)
			assert.Equal(t, nvidia, got, "the link's target is not written")
			assert.Equal(t, []string{filepath.Base(p)}, dirEntries(t, dir), "no temporary file left")
			require.ErrorIs(t, w.RemoveAll(), errNotOurs, "nor removed")
			_, err = os.Lstat(p)
			assert.NoError(t, err)

			require.NoError(t, os.RemoveAll(p))
			require.NoError(t, w.Write(res))
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(raw), OwnerMarker+"\n"), "written with the marker: %q", raw)
			assert.NotNil(t, loadCDI(t, dir).GetDevice(DefaultResource+"=12"), "a CDI reader takes the marked file")
			require.NoError(t, w.RemoveAll())
			assert.Empty(t, dirEntries(t, dir))
		})
	}
}

// TestCDIWriterMakesItsFolder: a folder that does not exist yet (a fresh
// node's) is made; an invalid device name is refused before any file is.
func TestCDIWriterMakesItsFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandbox-gpu", "kata-cdi")
	w := &CDIWriter{Dir: dir}
	require.NoError(t, w.Write([]deviceplugin.Resource{{Name: DefaultResource, Devices: []deviceplugin.Device{{ID: "3", Specs: deviceplugin.VFIOSpecs("", 3, nil, false)}}}}))
	assert.Equal(t, []string{SpecName(DefaultResource)}, dirEntries(t, dir))
	err := w.Write([]deviceplugin.Resource{{Name: DefaultResource, Devices: []deviceplugin.Device{{ID: "a/b", Specs: deviceplugin.VFIOSpecs("", 3, nil, false)}}}})
	require.ErrorContains(t, err, "CDI spec "+specPath(dir, DefaultResource)+": ")
	assert.NotNil(t, loadCDI(t, dir).GetDevice(DefaultResource+"=3"), "the last good spec stays")
}
