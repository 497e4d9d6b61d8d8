package kata

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vfio/vfiotest"
)

var allNVIDIA = vfiotest.AllNVIDIA

func move(t testing.TB, h *host.Host, sel vfio.Selection, target vfio.Target) {
	t.Helper()
	vfiotest.Move(t, h, sel, target)
}

// onVFIO builds a fixture with every NVIDIA function bound to vfio.
func onVFIO(t testing.TB, fixture string) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	k, h := hostsim.NewHost(t, fixture)
	move(t, h, allNVIDIA, vfio.ToVFIO)
	return k, h
}

// toHost returns functions to their host drivers.
func toHost(t testing.TB, h *host.Host, addrs ...host.Address) {
	t.Helper()
	move(t, h, vfio.Selection{Devices: addrs, Vendor: host.VendorNVIDIA}, vfio.ToHost)
}

func scanAll(t testing.TB, s *Scanner) []deviceplugin.Resource {
	t.Helper()
	res, err := s.Scan(context.Background())
	require.NoError(t, err)
	return res
}

func byName(rs []deviceplugin.Resource) map[string]deviceplugin.Resource {
	out := map[string]deviceplugin.Resource{}
	for _, r := range rs {
		out[r.Name] = r
	}
	return out
}

func names(rs []deviceplugin.Resource) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

func ids(r deviceplugin.Resource) []string {
	out := []string{}
	for _, d := range r.Devices {
		out = append(out, d.ID)
	}
	return out
}

func device(t testing.TB, r deviceplugin.Resource, id string) deviceplugin.Device {
	t.Helper()
	for _, d := range r.Devices {
		if d.ID == id {
			return d
		}
	}
	t.Fatalf("resource %s has no device %q (have %v)", r.Name, id, ids(r))
	return deviceplugin.Device{}
}

func hostPaths(d deviceplugin.Device) []string {
	return testutil.Map(d.Specs, func(s *pluginapi.DeviceSpec) string { return s.HostPath })
}

// dirEntries lists a folder's file names, sorted.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := []string{}
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	testutil.Eventually(t, within, fmt.Sprintf(msg, args...), cond)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func specPath(dir, resource string) string { return filepath.Join(dir, SpecName(resource)) }
