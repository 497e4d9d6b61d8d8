package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// vgpuCase is a vGPU host, the config the vGPU device manager applies to it, and what the KubeVirt
// plugin must advertise for it.
type vgpuCase struct {
	fixture, config string
	resource        string // nvidia.com/NVIDIA_<type>
	env             string // KubeVirt's env variable of the resource
	mdev            bool   // mediated devices (else vendor-specific VFIO VFs as PCI devices)
	count           int
}

// An A10 (SR-IOV, a mediated device on each VF): A10-4Q fills it with six mdevs on six of its 32 VFs,
// advertised by UUID.
func TestKubeVirtVGPUMdev(t *testing.T) {
	runVGPU(t, vgpuCase{fixture: "a10-vgpu", config: "A10-4Q", resource: "nvidia.com/NVIDIA_A10-4Q",
		env: "MDEV_PCI_RESOURCE_NVIDIA_COM_NVIDIA_A10-4Q", mdev: true, count: 6})
}

// Two L40S with vendor-specific VFIO: L40S-24Q gives each two VFs with that type, advertised by VF
// address. Both cards are full then, so sysfs names the type nowhere: only the manager's ready file
// does.
func TestKubeVirtVGPUSRIOV(t *testing.T) {
	runVGPU(t, vgpuCase{fixture: "l40s-vgpu", config: "L40S-24Q", resource: "nvidia.com/NVIDIA_L40S-24Q",
		env: "PCI_RESOURCE_NVIDIA_COM_NVIDIA_L40S-24Q", count: 4})
}

// runVGPU applies the config with the vGPU library on a simulated host and drives the real KubeVirt
// plugin binary against the kubelet's device manager: the vGPUs registered and allocatable, an
// allocation's env and device specs, an over-request, no vGPU while the manager's pause file exists
// (allocations refused) and all back after, and the plugin's exit on SIGTERM.
func runVGPU(t *testing.T, c vgpuCase) {
	bin := pluginBinary(t, "kubevirt-device-plugin")
	goroutines := runtime.NumGoroutine()
	ctx := context.Background()
	n, want := newVGPUNode(t, c)
	state := tempDir(t, "", "state")
	pause, ready := filepath.Join(state, names.VGPUPauseFile), filepath.Join(state, names.VGPUReadyFile)
	permitted := filepath.Join(state, names.PermittedFile)
	n.writeReady(t, c, ready)
	ids, err := filepath.Abs(filepath.Join("testdata", "pci.ids"))
	if err != nil {
		t.Fatalf("testdata/pci.ids: %v", err)
	}
	dir := socketDir(t, "dp")
	kl, err := startKubelet(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--device-plugin-dir", dir, "--pci-ids", ids}, n.rootArgs()...)
	p := proc.StartProgram(t, bin, append(args, "--vfio-ready-file", filepath.Join(state, names.VFIOReadyFile), "--wait-vfio-ready=false",
		"--permitted-host-devices-file", permitted, "--vgpu-pause-file", pause, "--vgpu-ready-file", ready, "-v")...)
	wantIDs := slices.Sorted(maps.Keys(want))
	total := int64(c.count)

	ok := t.Run("registration", func(t *testing.T) {
		kl.waitCounts(t, c.resource, counts{total, total}, registerWithin)
		if got := kl.deviceIDs(c.resource); joined(got) != joined(wantIDs) {
			t.Errorf("%s device IDs %v, want the vGPUs %v", c.resource, got, wantIDs)
		}
		for name, cn := range kl.resources() {
			if name != c.resource && cn.capacity > 0 {
				t.Errorf("the plugin also advertises %s (%v): %v; want only %s on a vGPU host", name, cn, kl.deviceIDs(name), c.resource)
			}
		}
		checkVGPUPermitted(t, permitted, c)
	})
	if !ok {
		return
	}

	t.Run("over-request", func(t *testing.T) {
		if _, err := kl.allocate(ctx, newPod("too-many", c.resource, total+1)); err == nil || !strings.Contains(err.Error(), "unavailable") {
			t.Fatalf("%d of %d %s: err %v, want the manager's 'unavailable' refusal", total+1, total, c.resource, err)
		}
	})

	t.Run("allocate", func(t *testing.T) {
		pod := newPod("vm-a", c.resource, 2)
		defer kl.forget(pod)
		opts, err := kl.allocate(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		var got, groups []string
		for id := range kl.m.GetDevices(string(pod.UID), "ctr")[c.resource] {
			g, known := want[id]
			if !known {
				t.Fatalf("manager allocated unknown device %q of %s", id, c.resource)
			}
			got, groups = append(got, id), append(groups, strconv.Itoa(g))
		}
		if len(got) != 2 {
			t.Fatalf("manager allocated %v of %s to %s, want 2 devices", got, c.resource, pod.Name)
		}
		run := summarise(opts)
		t.Logf("%s: env %v, devices %v", pod.Name, run.env, run.devices)
		if sortedList(run.env[c.env]) != joined(sortedStrings(got)) {
			t.Errorf("env %s = %q, want the allocated vGPUs %s (comma-separated, any order); env: %v", c.env, run.env[c.env], joined(got), run.env)
		}
		if wantDev := vfioDevices(groups...); fmt.Sprint(run.devices) != fmt.Sprint(wantDev) {
			t.Errorf("device specs (host -> container) %v, want %v", run.devices, wantDev)
		}
	})

	t.Run("pause", func(t *testing.T) {
		if err := os.WriteFile(pause, []byte("vGPU changes in progress\n"), 0o644); err != nil {
			t.Fatalf("pause file %s: %v", pause, err)
		}
		var last map[string]counts
		if err := e2e.Poll(changeWithin, func() bool {
			last = kl.resources()
			return last[c.resource].allocatable == 0 && len(kl.deviceIDs(c.resource)) == 0
		}); err != nil {
			t.Fatalf("with %s present: %s still allocatable: %v; the manager reports %v, devices %v", pause, c.resource, err, last, kl.deviceIDs(c.resource))
		}
		if _, err := kl.allocate(ctx, newPod("vm-paused", c.resource, 1)); err == nil {
			t.Errorf("allocating a %s while the vGPU device manager is paused succeeded", c.resource)
		}
		if err := os.Remove(pause); err != nil {
			t.Fatalf("pause file %s: %v", pause, err)
		}
		kl.waitCounts(t, c.resource, counts{total, total}, changeWithin)
		if got := kl.deviceIDs(c.resource); joined(got) != joined(wantIDs) {
			t.Errorf("after the pause: %s device IDs %v, want %v", c.resource, got, wantIDs)
		}
		allocateOne(t, kl, c.resource, want)
	})

	t.Run("sigterm", func(t *testing.T) {
		if n := kl.registrations.of(c.resource); n != 1 {
			t.Errorf("the kubelet received %d registrations of %s, want 1", n, c.resource)
		}
		p.Stop(t, exitWithin)
		if left, err := sockets(dir); err != nil || len(left) != 0 {
			t.Errorf("sockets left in %s after the plugin exited: %v %v", dir, left, err)
		}
		var last map[string]counts
		if err := e2e.Poll(changeWithin, func() bool { last = kl.resources(); return last[c.resource].allocatable == 0 }); err != nil {
			t.Errorf("after the plugin exited: allocatable of %s: %v; the manager reports %v", c.resource, err, last)
		}
	})

	kl.stop(t)
	checkGoroutines(t, goroutines)
}

// allocateOne allocates one device of the resource to a fresh pod and requires it to be a known vGPU.
func allocateOne(t *testing.T, kl *kubelet, res string, want map[string]int) {
	t.Helper()
	pod := newPod("vm-after-pause", res, 1)
	defer kl.forget(pod)
	if _, err := kl.allocate(context.Background(), pod); err != nil {
		t.Fatalf("after the pause: %v", err)
	}
	for id := range kl.m.GetDevices(string(pod.UID), "ctr")[res] {
		if _, ok := want[id]; !ok {
			t.Errorf("after the pause: manager allocated unknown device %q of %s", id, res)
		}
	}
}

// vgpuNode is a simulated vGPU host with the config applied.
type vgpuNode struct {
	node
	res *vgpu.Result
}

// newVGPUNode builds the fixture (its GPUs stay on the vGPU host driver) and applies the config from
// the vGPU device manager's built-in file with the vgpu library, as the manager's loop does. It
// returns the vGPUs made, device ID (mdev UUID or VF address) -> IOMMU group, read back from the
// host model.
func newVGPUNode(t *testing.T, c vgpuCase) (*vgpuNode, map[string]int) {
	t.Helper()
	fx, err := hostsim.Lookup(c.fixture)
	if err != nil {
		t.Fatalf("fixture %s: %v", c.fixture, err)
	}
	dir := tempDir(t, fastTempBase(), "sim")
	k, err := fx.Build(dir)
	if err != nil {
		t.Fatalf("build fixture %s in %s: %v", c.fixture, dir, err)
	}
	n := &vgpuNode{node: node{k: k, h: host.New(k.Options())}}
	cfg, err := vgpuconfig.Default()
	if err != nil {
		t.Fatalf("the vGPU device manager's built-in config: %v", err)
	}
	ctx := context.Background()
	// The manager's memory of type names, as its run loop keeps it: the driver lists a type only
	// while it can be created, so a full card's ids are named by what the manager learned before.
	types, err := vgpu.LoadTypeMemory(filepath.Join(dir, names.VGPUTypesFile), nil)
	if err != nil {
		t.Fatalf("vGPU type memory: %v", err)
	}
	plan, err := vgpu.PlanConfig(ctx, n.h, cfg, c.config, vgpu.Options{NodeName: "kubelet-suite", TypeNames: types})
	if err != nil {
		t.Fatalf("fixture %s: plan config %s: %v", c.fixture, c.config, err)
	}
	if n.res = vgpu.Apply(ctx, n.h, plan, vgpu.ApplyOptions{}); !n.res.OK() {
		t.Fatalf("fixture %s: apply config %s: %v", c.fixture, c.config, n.res.Err())
	}
	if v := k.Violations(); len(v) > 0 {
		t.Fatalf("fixture %s: the simulated kernel recorded violations: %v", c.fixture, v)
	}
	want := n.vgpus(t, c)
	if len(want) != c.count {
		t.Fatalf("fixture %s: config %s made %d vGPUs of its type (%v), want %d", c.fixture, c.config, len(want), want, c.count)
	}
	return n, want
}

// vgpus reads the config type's vGPUs from the host model: mdevs of the type, or VFs whose
// current_vgpu_type is the type's id (which, on a full card, no VF's creatable list names).
func (n *vgpuNode) vgpus(t *testing.T, c vgpuCase) map[string]int {
	t.Helper()
	out := map[string]int{}
	if c.mdev {
		mdevs, err := n.h.Mdevs()
		if err != nil {
			t.Fatalf("fixture %s: mdevs: %v", c.fixture, err)
		}
		for _, m := range mdevs {
			if m.TypeName == "NVIDIA "+c.config && m.IOMMUGroup != host.NoGroup {
				out[m.UUID] = m.IOMMUGroup
			}
		}
		return out
	}
	snap, err := n.h.Scan()
	if err != nil {
		t.Fatalf("fixture %s: scan: %v", c.fixture, err)
	}
	id := n.typeID(t, c)
	for _, f := range snap.Functions {
		v, ok, err := n.h.VGPU(f.Address)
		if err != nil {
			t.Fatalf("fixture %s: VF %s: %v", c.fixture, f.Address, err)
		}
		if ok && v.Current == id {
			out[string(f.Address)] = f.IOMMUGroup
		}
		if ok && v.Creatable[id] != "" {
			t.Fatalf("fixture %s: VF %s still lists type %d (%s) as creatable: the cards are not full, so this case "+
				"would not show the ready file naming the type", c.fixture, f.Address, id, v.Creatable[id])
		}
	}
	return out
}

// typeID is the vendor type id of the config's vGPUs, from the apply's result.
func (n *vgpuNode) typeID(t *testing.T, c vgpuCase) int {
	t.Helper()
	for _, g := range n.res.GPUs {
		for _, v := range g.GPU.VGPUs {
			if v.Type == c.config {
				id, err := strconv.Atoi(v.TypeID)
				if err != nil {
					t.Fatalf("fixture %s: vGPU %s: type id %q: %v", c.fixture, v.ID, v.TypeID, err)
				}
				return id
			}
		}
	}
	t.Fatalf("fixture %s: the apply made no %s vGPU: %+v", c.fixture, c.config, n.res.GPUs)
	return 0
}

// writeReady writes the vGPU device manager's report of the apply (as its loop writes
// names.VGPUReadyFile after a pass): per GPU its vGPUs by type and, for vendor-specific VFIO, the
// type ids it holds by short name.
func (n *vgpuNode) writeReady(t *testing.T, c vgpuCase, file string) {
	t.Helper()
	var gpus []*vgpu.GPU
	for _, g := range n.res.GPUs {
		gpus = append(gpus, g.GPU)
	}
	r := wire.VGPUReady{Config: c.config, State: wire.VGPUStateSuccess, GPUs: vgpu.ReadyGPUs(gpus)}
	if err := wire.WriteVGPUReady(file, r); err != nil {
		t.Fatalf("ready file: %v", err)
	}
}

// checkVGPUPermitted requires the plugin's permittedHostDevices to hold the resource: a mediated
// device selected by its type name, or a PCI device (the VFs') with an NVIDIA selector; both provided
// externally.
func checkVGPUPermitted(t *testing.T, file string, c vgpuCase) {
	t.Helper()
	type entry struct {
		Selector string `json:"pciVendorSelector"`
		MDEVName string `json:"mdevNameSelector"`
		Resource string `json:"resourceName"`
		External bool   `json:"externalResourceProvider"`
	}
	var got struct {
		PCI      []entry `json:"pciHostDevices"`
		Mediated []entry `json:"mediatedDevices"`
	}
	var data []byte
	err := e2e.Poll(registerWithin, func() bool {
		var err error
		data, err = os.ReadFile(file)
		return err == nil && json.Unmarshal(data, &got) == nil && len(got.PCI)+len(got.Mediated) > 0
	})
	if err != nil {
		t.Fatalf("permittedHostDevices file %s: %v (%q)", file, err, data)
	}
	list, other := got.PCI, got.Mediated
	if c.mdev {
		list, other = got.Mediated, got.PCI
	}
	if len(list) != 1 || len(other) != 0 {
		t.Fatalf("permittedHostDevices %s: want one entry, for %s (mdev %v):\n%s", file, c.resource, c.mdev, data)
	}
	e := list[0]
	okSel := strings.HasPrefix(strings.ToUpper(e.Selector), "10DE:")
	if c.mdev {
		okSel = e.MDEVName == "NVIDIA "+c.config
	}
	if e.Resource != c.resource || !e.External || !okSel {
		t.Errorf("permittedHostDevices entry %+v, want %s with its selector, externalResourceProvider:\n%s", e, c.resource, data)
	}
}
