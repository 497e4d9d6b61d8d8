//go:build cgo

package gpucdi

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dgx is go-nvml's DGX A100 (8 A100s, driver 550.54.15) with GPU 1 at
// minor 9, in MIG mode with MIG devices in slots 0 and 2 of 7.
func dgx(t *testing.T) (*server.Server, []string) {
	t.Helper()
	srv := dgxa100.New()
	require.Equal(t, testVersion, srv.DriverVersion)
	gpu := srv.Devices[1].(*server.Device)
	gpu.Minor = 9
	_, ret := gpu.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	require.Equal(t, nvml.SUCCESS, ret)
	migUUIDs := []string{"MIG-11111111-2222-3333-4444-555555555555", "MIG-66666666-7777-8888-9999-000000000000"}
	migs := map[int]*mock.Device{
		0: migDevice(migUUIDs[0], 1, 0),
		2: migDevice(migUUIDs[1], 2, 0),
	}
	gpu.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	gpu.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if m, ok := migs[i]; ok {
			return m, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return srv, migUUIDs
}

func migDevice(uuid string, gi, ci int) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ci, nvml.SUCCESS },
	}
}

func dgxHost(t *testing.T) *fakeHost {
	h := newFakeHost(t, 0, 2, 3, 4, 5, 6, 7, 9)
	h.write(h.proc, "driver/nvidia-caps/mig-minors", "gpu9/gi1/access 111\ngpu9/gi1/ci0/access 112\ngpu9/gi2/access 120\ngpu9/gi2/ci0/access 121\n")
	return h
}

func TestGenerateDGXA100(t *testing.T) {
	srv, migUUIDs := dgx(t)
	h := dgxHost(t)
	spec, err := Generate(srv, h.opts())
	require.NoError(t, err)

	var want []string
	for i, d := range srv.Devices {
		want = append(want, strconv.Itoa(i), d.(*server.Device).UUID)
		if i == 1 {
			want = append(want, "1:0", migUUIDs[0], "1:2", migUUIDs[1])
		}
	}
	want = append(want, "all")
	assert.Equal(t, want, deviceNames(spec))

	for i, d := range srv.Devices {
		minor := d.(*server.Device).Minor
		node := "/dev/nvidia" + strconv.Itoa(minor) + " " + filepath.Join(h.dev, "nvidia"+strconv.Itoa(minor)) + " c 195:" + strconv.Itoa(minor)
		assert.Equal(t, []string{node}, nodeSummary(device(t, spec, strconv.Itoa(i)).ContainerEdits.DeviceNodes), "GPU %d", i)
		assert.Equal(t, []string{node}, nodeSummary(device(t, spec, d.(*server.Device).UUID).ContainerEdits.DeviceNodes), "GPU %d", i)
	}
	caps := filepath.Join(h.dev, "nvidia-caps")
	assert.Equal(t, []string{
		"/dev/nvidia9 " + filepath.Join(h.dev, "nvidia9") + " c 195:9",
		"/dev/nvidia-caps/nvidia-cap120 " + filepath.Join(caps, "nvidia-cap120") + " c 237:120",
		"/dev/nvidia-caps/nvidia-cap121 " + filepath.Join(caps, "nvidia-cap121") + " c 237:121",
	}, nodeSummary(device(t, spec, migUUIDs[1]).ContainerEdits.DeviceNodes))
	assert.Len(t, device(t, spec, "all").ContainerEdits.DeviceNodes, 8+4)
	require.NoError(t, Validate(spec))
}

func TestGenerateMIGModeNotSupported(t *testing.T) {
	srv, _ := dgx(t)
	srv.Devices[1].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	spec, err := Generate(srv, dgxHost(t).opts())
	require.NoError(t, err)
	assert.Len(t, spec.Devices, 8*2+1, "no MIG devices")
}

func TestGenerateNVMLErrorsNameTheDevice(t *testing.T) {
	for name, tc := range map[string]struct {
		breakIt func(*server.Server)
		want    string
	}{
		"driver version": {func(s *server.Server) {
			s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNINITIALIZED }
		}, "NVML driver version"},
		"count": {func(s *server.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, "NVML GPU count"},
		"handle": {func(s *server.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 9, nvml.SUCCESS }
		}, "GPU 8: handle"},
		"minor": {func(s *server.Server) {
			d := s.Devices[3].(*server.Device)
			d.GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
		}, "GPU 3 (GPU-"},
		"mig mode": {func(s *server.Server) {
			d := s.Devices[2].(*server.Device)
			d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
		}, "GPU 2 (GPU-"},
		"mig handle": {func(s *server.Server) {
			d := s.Devices[1].(*server.Device)
			d.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
		}, "MIG device 0"},
		"mig instance": {func(s *server.Server) {
			m, _ := s.Devices[1].GetMigDeviceHandleByIndex(2)
			m.(*mock.Device).GetGpuInstanceIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
		}, "MIG device 1:2 (MIG-66666666-7777-8888-9999-000000000000): GPU instance"},
	} {
		t.Run(name, func(t *testing.T) {
			srv, _ := dgx(t)
			tc.breakIt(srv)
			_, err := Generate(srv, dgxHost(t).opts())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var ret nvml.Return
			require.ErrorAs(t, err, &ret, "the nvml.Return is wrapped")
			assert.NotEqual(t, nvml.SUCCESS, ret)
		})
	}
}

func TestGenerateReportsHostErrors(t *testing.T) {
	srv, _ := dgx(t)
	h := dgxHost(t)
	h.write(h.proc, "driver/nvidia-caps/mig-minors", "")
	_, err := Generate(srv, h.opts())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MIG device 1:0")
}

func TestOpenNVMLWithoutADriver(t *testing.T) {
	root := t.TempDir()
	o := Options{DriverRoot: root}
	_, _, err := OpenNVML(o)
	require.ErrorIs(t, err, nvml.ERROR_LIBRARY_NOT_FOUND)
	assert.Contains(t, err.Error(), "libnvidia-ml.so.1 not found under driver root "+root)

	// A file that is no library: dlopen's reason is given.
	h := &fakeHost{t: t}
	h.file(root, "/usr/lib64/libnvidia-ml.so.1")
	_, _, err = OpenNVML(o)
	require.ErrorIs(t, err, nvml.ERROR_LIBRARY_NOT_FOUND)
	assert.Contains(t, err.Error(), "load NVML "+filepath.Join(root, "/usr/lib64/libnvidia-ml.so.1"))
	assert.Regexp(t, `file too short|invalid ELF header`, err.Error())
}
