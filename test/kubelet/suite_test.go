package kubelet

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"

	v1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// Deadlines: generous for a loaded machine; polling returns as soon as the state is reached.
const (
	registerWithin = 15 * time.Second // a plugin's first (or a restarted kubelet's) registration
	changeWithin   = 5 * time.Second  // a rebind seen through the plugin's watch
	exitWithin     = 10 * time.Second // SIGTERM to exit
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func TestKubeVirtA10(t *testing.T)     { runSuite(t, kubevirt(), a10, 1) }
func TestKubeVirtHGXH100(t *testing.T) { runSuite(t, kubevirt(), hgxH100, 3) }
func TestKataA10(t *testing.T)         { runSuite(t, kata(), a10, 1) }
func TestKataHGXH100(t *testing.T)     { runSuite(t, kata(), hgxH100, 3) }

// runSuite drives one plugin binary on one fixture against the kubelet's device manager: the
// registration, an allocation of take devices, an over-request, a kubelet restart, a device rebound to
// its host driver and back, and the plugin's exit on SIGTERM.
func runSuite(t *testing.T, fl *flavour, fx fixture, take int) {
	top := t
	bin := pluginBinary(t, fl.name)
	goroutines := runtime.NumGoroutine()
	ctx := context.Background()
	res := fl.resource(fx)
	n := newNode(t, fx.name)
	dir := socketDir(t, "dp")
	kl, err := startKubelet(t, dir) // before the plugin: Start wipes the sockets in dir
	if err != nil {
		t.Fatal(err)
	}
	p := proc.StartProgram(t, bin, fl.args(t, n, dir)...)
	byID := map[string]pciFunc{}
	for _, f := range fx.gpus {
		byID[fl.id(f)] = f
	}
	total := int64(len(fx.gpus))
	var want []string

	ok := t.Run("registration", func(t *testing.T) {
		// NVSwitches are not required in the GPU resource, nor refused there: reported.
		withSwitches := total + int64(len(fx.switches))
		var last map[string]counts
		err := e2e.Poll(registerWithin, func() bool {
			last = kl.resources()
			c := last[res]
			return c.capacity == c.allocatable && (c.capacity == total || c.capacity == withSwitches)
		})
		if err != nil {
			t.Fatalf("resource %s: want capacity = allocatable = %d: %v; the manager reports %v", res, total, err, last)
		}
		if last[res].capacity != total {
			t.Logf("report: fixture %s: %s holds the %d NVSwitches too", fx.name, res, len(fx.switches))
			for _, f := range fx.switches {
				byID[fl.id(f)] = f
			}
			total = withSwitches
		}
		for id := range byID {
			want = append(want, id)
		}
		want = sortedStrings(want)
		if got := kl.deviceIDs(res); joined(got) != joined(want) {
			t.Errorf("%s device IDs %v, want %v", res, got, want)
		}
		reportOthers(t, kl, res, fx)
		if fl.checkScan != nil {
			fl.checkScan(t, fx, want)
		}
	})
	if !ok {
		return
	}

	t.Run("over-request", func(t *testing.T) {
		pod := newPod("too-many", res, total+1)
		if _, err := kl.allocate(ctx, pod); err == nil || !strings.Contains(err.Error(), "unavailable") {
			t.Fatalf("%d of %d %s: err %v, want the manager's 'unavailable' refusal", total+1, total, res, err)
		}
		if got := kl.m.GetDevices(string(pod.UID), "ctr")[res]; len(got) != 0 {
			t.Errorf("refused pod holds devices %v", got)
		}
	})

	t.Run("allocate", func(t *testing.T) {
		allocateAndCheck(t, kl, fl, fx, byID, newPod("vm-a", res, int64(take)))
		// What is left is allocatable; one more than that is not.
		if _, err := kl.allocate(ctx, newPod("vm-over", res, total-int64(take)+1)); err == nil {
			t.Errorf("allocating %d more %s with %d left succeeded", total-int64(take)+1, res, total-int64(take))
		}
	})

	restarted := t.Run("kubelet-restart", func(t *testing.T) {
		kl.stop(t)
		if n := kl.registrations.of(res); n != 1 {
			t.Errorf("the first kubelet received %d registrations of %s, want 1", n, res)
		}
		// Same folder: Start wipes the plugin's sockets and recreates kubelet.sock. The new kubelet has
		// no active pod (vm-a ended meanwhile), so its checkpointed devices are free again. It lives
		// until the end of the whole test.
		var err error
		if kl, err = startKubelet(top, dir); err != nil {
			t.Fatal(err)
		}
		kl.waitCounts(t, res, counts{total, total}, registerWithin)
		// The new registration serves allocations: the plugin is reachable on a fresh socket.
		allocateAndCheck(t, kl, fl, fx, byID, newPod("vm-b", res, int64(take)))
	})

	gone := fx.gpus[len(fx.gpus)-1]
	t.Run("rebind-to-host", func(t *testing.T) {
		if !restarted {
			t.Skip("the restarted kubelet has no registration")
		}
		sel := vfio.Selection{Devices: []host.Address{gone.addr}}
		if err := n.move(sel, vfio.ToHost); err != nil {
			t.Fatal(err)
		}
		var last map[string]counts
		err := e2e.Poll(changeWithin, func() bool {
			last = kl.resources()
			return last[res].allocatable == total-1
		})
		if err != nil {
			t.Fatalf("after %s left vfio-pci: allocatable of %s: %v; the manager reports %v", gone.addr, res, err, last)
		}
		if c := last[res].capacity; c != total-1 {
			t.Logf("report: %s stays in the capacity of %s (%d) as an unhealthy device", gone.addr, res, c)
		}
		if ids := kl.deviceIDs(res); slices.Contains(ids, fl.id(gone)) {
			t.Errorf("%s still allocatable after %s left vfio-pci: %v", fl.id(gone), gone.addr, ids)
		}
		// And back: the plugin sees the device again.
		if err := n.move(sel, vfio.ToVFIO); err != nil {
			t.Fatal(err)
		}
		kl.waitCounts(t, res, counts{total, total}, changeWithin)
	})

	t.Run("sigterm", func(t *testing.T) {
		// One registration per kubelet start: a second one makes the v1.36 kubelet run two
		// ListAndWatch streams and leak the first client's connection.
		if n := kl.registrations.of(res); n != 1 {
			t.Errorf("the restarted kubelet received %d registrations of %s, want 1", n, res)
		}
		p.Stop(t, exitWithin)
		if left, err := sockets(dir); err != nil || len(left) != 0 {
			t.Errorf("sockets left in %s after the plugin exited: %v %v", dir, left, err)
		}
		// The kubelet sees its endpoint go: the devices are no longer allocatable.
		var last map[string]counts
		if err := e2e.Poll(changeWithin, func() bool { last = kl.resources(); return last[res].allocatable == 0 }); err != nil {
			t.Errorf("after the plugin exited: allocatable of %s: %v; the manager reports %v", res, err, last)
		}
	})

	kl.stop(t)
	checkGoroutines(t, goroutines)
}

// allocateAndCheck allocates the pod's devices through the manager and checks the runtime options
// the plugin's answer gave the container.
func allocateAndCheck(t *testing.T, kl *kubelet, fl *flavour, fx fixture, byID map[string]pciFunc, pod *v1.Pod) {
	t.Helper()
	res := fl.resource(fx)
	opts, err := kl.allocate(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	var fs []pciFunc
	for id := range kl.m.GetDevices(string(pod.UID), pod.Spec.Containers[0].Name)[res] {
		f, known := byID[id]
		if !known {
			t.Fatalf("manager allocated unknown device %q of %s", id, res)
		}
		fs = append(fs, f)
	}
	want := pod.Spec.Containers[0].Resources.Limits[v1.ResourceName(res)]
	if int64(len(fs)) != want.Value() {
		t.Fatalf("manager allocated %d devices of %s to %s, want %d", len(fs), res, pod.Name, want.Value())
	}
	got := summarise(opts)
	t.Logf("%s: %d of %s: env %v, devices %v, CDI devices %v", pod.Name, len(fs), res, got.env, got.devices, got.cdi)
	fl.checkAlloc(t, fx, fs, got)
}

// reportOthers logs every resource besides res (NVSwitches, if a plugin advertises them): the suite
// does not require either way.
func reportOthers(t *testing.T, kl *kubelet, res string, fx fixture) {
	t.Helper()
	for name, c := range kl.resources() {
		if name != res {
			t.Logf("report: fixture %s: the plugin also advertises %s (%v): %v", fx.name, name, c, kl.deviceIDs(name))
		}
	}
}

// checkGoroutines requires the goroutines the suite started (the manager's server and plugin clients)
// to have ended.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	if err := e2e.Poll(changeWithin, func() bool { return runtime.NumGoroutine() <= before }); err != nil {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines: %d now, %d before the test: %v\n%s", runtime.NumGoroutine(), before, err, buf)
	}
}
