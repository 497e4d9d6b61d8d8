//go:build realkernelguest

package guest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// The plan tests run the vGPU device manager's whole pass, vgpu.PlanConfig from a config and
// then vgpu.Apply, on the guest's real kernel: the inventory takes mtty, or the NVMe
// controller, as a GPU (vgpu.Options.Parents), with mtty's two types standing for two vGPU
// types of different sizes.

// planConfigs are the configs the plan tests select from.
const planConfigs = `version: v1
vgpu-configs:
  two-dual:
    - devices: all
      vgpu-devices: {MTTY-2Q: 2}
  one-single:
    - devices: all
      vgpu-devices: {MTTY-1Q: 1}
  none:
    - devices: all
      vgpu-devices: {}
  vfs:
    - devices: all
      vgpu-devices: {A10-4Q: 2}
`

// planNode seeds the stable mdev UUIDs.
const planNode = "realkernel-guest"

// mttyAsGPU is mtty as the inventory takes it: a GPU whose single-port type is MTTY-1Q and
// dual-port type MTTY-2Q.
var mttyAsGPU = vgpu.Parent{Name: mttyParent, Types: map[string]string{"mtty-1": "MTTY-1Q", "mtty-2": "MTTY-2Q"}}

// TestPlanMtty runs plan and apply on mtty: the config's vGPUs are created with stable UUIDs, a
// second pass (a restarted manager's first) plans nothing and writes nothing, and a config
// change that removes vGPUs is refused whole, with no write, while a process holds one of them
// (planned before the holder came, or after), and done once it lets go.
func TestPlanMtty(t *testing.T) {
	rec := &recordingWriter{}
	h := newHost(rec)
	cfg := parsePlanConfigs(t)
	o := vgpu.Options{NodeName: planNode, Parents: []vgpu.Parent{mttyAsGPU}}
	slot := func(i int) string { return vgpu.StableUUID(planNode, mttyParent, i) }
	createPath := func(typeID string) string {
		return "/sys/class/mdev_bus/mtty/mdev_supported_types/" + typeID + "/create"
	}
	removePath := func(uuid string) string { return "/sys/bus/mdev/devices/" + uuid + "/remove" }

	t.Run("inventory takes mtty as a GPU", func(t *testing.T) {
		p := planMtty(t, h, cfg, "none", o)
		g := p.GPUs[0].GPU
		if g.Backend != vgpu.BackendMdev || len(g.VGPUs) != 0 {
			t.Errorf("mtty as a GPU: backend %s, vGPUs %v; want mdev and none", g.Backend, g.VGPUs)
		}
		want := map[string]vgpu.TypeInfo{
			"MTTY-1Q": {Name: "MTTY-1Q", ID: "mtty-1", SizeGB: 1, Max: 24, MaxFrom: "available_instances"},
			"MTTY-2Q": {Name: "MTTY-2Q", ID: "mtty-2", SizeGB: 2, Max: 12, MaxFrom: "available_instances"},
		}
		got := map[string]vgpu.TypeInfo{}
		for _, ti := range g.Types {
			got[ti.Name] = ti
		}
		if !maps.Equal(got, want) {
			t.Errorf("mtty's types as vGPU types: %+v, want %+v", got, want)
		}
		if p.Changes() {
			t.Errorf("config none on no vGPU plans %+v", p.GPUs[0].Steps)
		}
	})

	t.Run("create", func(t *testing.T) {
		p := planMtty(t, h, cfg, "two-dual", o)
		mark := rec.mark()
		requireApplied(t, h, p, map[string]int{"MTTY-2Q": 2})
		requireWrites(t, rec, mark, write{createPath("mtty-2"), slot(0)}, write{createPath("mtty-2"), slot(1)})
		requireListed(t, h, slot(0), "mtty-2")
		requireListed(t, h, slot(1), "mtty-2")
	})

	t.Run("a second pass writes nothing", func(t *testing.T) {
		requireNothingToDo(t, rec, h, cfg, "two-dual", o)
	})

	// Removal goes by stable slot: slot 0 first. The holder holds slot 1, so a pass that checks
	// only the vGPU it removes next would already have written slot 0's remove.
	held := slot(1)
	change := planMtty(t, h, cfg, "one-single", o) // planned while nothing holds anything
	t.Run("a config change that removes a held vGPU is refused whole", func(t *testing.T) {
		if got := stepOps(change.GPUs[0].Steps); got != "remove remove create" {
			t.Fatalf("two MTTY-2Q to one MTTY-1Q: steps %q, want remove remove create", got)
		}
		m := requireListed(t, h, held, "mtty-2")
		hd := startHolder(t, m.IOMMUGroup, held, holdAsQEMU)
		defer rec.guard(removePath(slot(0)))()
		defer rec.guard(removePath(held))()
		mark := rec.mark()

		res := vgpu.Apply(context.Background(), h, change, vgpu.ApplyOptions{})
		requireRefusedInUse(t, res.Err(), fmt.Sprintf("pid %d", hd.pid), held)
		again := planMtty(t, h, cfg, "one-single", o)
		if why := again.GPUs[0].Refused; !strings.HasPrefix(why, "in use:") || !strings.Contains(why, held) {
			t.Errorf("plan while %s is held: refused %q, steps %v; want refused in use naming it", held, why, again.GPUs[0].Steps)
		}
		requireRefusedInUse(t, vgpu.Apply(context.Background(), h, again, vgpu.ApplyOptions{}).Err(), fmt.Sprintf("pid %d", hd.pid), held)
		requireWrites(t, rec, mark)
		requireListed(t, h, slot(0), "mtty-2")
		requireListed(t, h, held, "mtty-2")
		hd.release(t)

		// The holder of only the device fd is in no process's open files: the group claim sees it.
		hd = startHolder(t, m.IOMMUGroup, held, holdDeviceOnly)
		res = vgpu.Apply(context.Background(), h, change, vgpu.ApplyOptions{})
		requireRefusedInUse(t, res.Err(), fmt.Sprintf("/dev/vfio/%d", m.IOMMUGroup), "")
		requireWrites(t, rec, mark)
		hd.release(t)
	})

	t.Run("released: the change is applied", func(t *testing.T) {
		mark := rec.mark()
		requireApplied(t, h, change, map[string]int{"MTTY-1Q": 1})
		requireWrites(t, rec, mark, write{removePath(slot(0)), "1"}, write{removePath(held), "1"}, write{createPath("mtty-1"), slot(0)})
		requireListed(t, h, slot(0), "mtty-1")
		requireNothingToDo(t, rec, h, cfg, "one-single", o)
	})

	t.Run("config none removes the rest", func(t *testing.T) {
		mark := rec.mark()
		requireApplied(t, h, planMtty(t, h, cfg, "none", o), map[string]int{})
		requireWrites(t, rec, mark, write{removePath(slot(0)), "1"})
		if mdevs, err := h.Mdevs(); err != nil || len(mdevs) != 0 {
			t.Errorf("mdevs after config none: %v (%v)", mdevs, err)
		}
		requireNothingToDo(t, rec, h, cfg, "none", o)
	})
}

// TestPlanSRIOV runs plan and apply on the NVMe controller taken as a GPU: with no VF enabled the
// plan enables them all (the plan's only way to VFs), and once they are there apply finds no
// vGPU type on them, as on a GPU without NVIDIA's vGPU host driver: it creates nothing and says
// so, and the next pass is refused as a config the GPU cannot host, with no write.
func TestPlanSRIOV(t *testing.T) {
	rec := &recordingWriter{}
	h := newHost(rec)
	pf := findPF(t, h)
	t.Cleanup(func() {
		if err := disableVFs(h, pf.Address); err != nil {
			t.Errorf("disable the VFs after the test: %v", err)
		}
	})
	cfg := parsePlanConfigs(t)
	o := vgpu.Options{NodeName: planNode, Parents: []vgpu.Parent{{Name: pf.Address}}}

	p, err := vgpu.PlanConfig(context.Background(), h, cfg, "vfs", o)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GPUs) != 1 || p.GPUs[0].GPU.Backend != vgpu.BackendSRIOV || !p.GPUs[0].Deferred {
		t.Fatalf("NVMe controller %s as a GPU: %+v, want one SR-IOV GPU whose types wait for its VFs", pf.Address, p.GPUs)
	}
	if got := stepOps(p.GPUs[0].Steps); got != "enable-vfs create create" {
		t.Fatalf("steps %q, want enable-vfs create create", got)
	}
	mark := rec.mark()
	res := vgpu.Apply(context.Background(), h, p, vgpu.ApplyOptions{})
	requireWrites(t, rec, mark, write{"/sys/bus/pci/devices/" + string(pf.Address) + "/sriov_numvfs", fmt.Sprint(pf.SRIOVTotalVFs)})
	requireVFs(t, h, pf, pf.SRIOVTotalVFs)
	if len(res.GPUs) != 1 || stepOps(res.GPUs[0].Done) != "enable-vfs" {
		t.Errorf("apply did %+v, want enable-vfs only", res.GPUs)
	}
	const noDriver = "vGPU host driver loaded"
	if err := res.Err(); err == nil || !strings.Contains(err.Error(), noDriver) || !strings.Contains(err.Error(), string(pf.Address)) {
		t.Errorf("apply on VFs with no vGPU types: %v, want a failure naming %s and asking %q", err, pf.Address, noDriver)
	}

	mark = rec.mark()
	_, err = vgpu.PlanConfig(context.Background(), h, cfg, "vfs", o)
	if !vgpuconfig.IsError(err) || !strings.Contains(err.Error(), string(pf.Address)) || !strings.Contains(err.Error(), noDriver) {
		t.Errorf("second pass: %v, want a config error naming %s and asking %q", err, pf.Address, noDriver)
	}
	requireWrites(t, rec, mark)
}

func parsePlanConfigs(t *testing.T) *vgpuconfig.Config {
	t.Helper()
	cfg, err := vgpuconfig.Parse("plan-configs.yaml", []byte(planConfigs))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// planMtty plans a config with mtty as the only GPU and returns the plan.
func planMtty(t *testing.T, h *host.Host, cfg *vgpuconfig.Config, config string, o vgpu.Options) *vgpu.Plan {
	t.Helper()
	p, err := vgpu.PlanConfig(context.Background(), h, cfg, config, o)
	if err != nil {
		t.Fatalf("plan config %s: %v", config, err)
	}
	if len(p.GPUs) != 1 || p.GPUs[0].GPU.Address != mttyParent || !p.GPUs[0].Managed {
		t.Fatalf("plan config %s: GPUs %+v, want mtty alone, managed", config, p.GPUs)
	}
	return p
}

// requireApplied applies p and checks that it succeeded and that the GPU now holds have.
func requireApplied(t *testing.T, h *host.Host, p *vgpu.Plan, have map[string]int) {
	t.Helper()
	res := vgpu.Apply(context.Background(), h, p, vgpu.ApplyOptions{})
	if err := res.Err(); err != nil {
		t.Fatalf("apply config %s: %v", p.Config, err)
	}
	if len(res.GPUs) != 1 || !maps.Equal(res.GPUs[0].Have, have) {
		t.Errorf("after config %s: %+v, want vGPUs %v", p.Config, res.GPUs, have)
	}
}

// requireNothingToDo plans config again, as a later pass or a restarted manager does, and
// requires a plan with no step whose apply succeeds with no write.
func requireNothingToDo(t *testing.T, rec *recordingWriter, h *host.Host, cfg *vgpuconfig.Config, config string, o vgpu.Options) {
	t.Helper()
	mark := rec.mark()
	p := planMtty(t, h, cfg, config, o)
	if p.Changes() {
		t.Errorf("second pass of config %s plans %+v, want nothing", config, p.GPUs[0].Steps)
	}
	if err := vgpu.Apply(context.Background(), h, p, vgpu.ApplyOptions{}).Err(); err != nil {
		t.Errorf("second pass of config %s: %v", config, err)
	}
	requireWrites(t, rec, mark)
}

// requireRefusedInUse checks that err refuses the GPU in use, naming what and who.
func requireRefusedInUse(t *testing.T, err error, who, what string) {
	t.Helper()
	var refused *vgpu.RefusedError
	if !errors.As(err, &refused) || len(refused.Refused) != 1 {
		t.Errorf("apply: %v, want the GPU refused", err)
		return
	}
	if r := refused.Refused[0].Reason; !strings.HasPrefix(r, "in use:") || !strings.Contains(r, who) || !strings.Contains(r, what) {
		t.Errorf("refused %q, want in use naming %s and %q", r, who, what)
	}
}

// stepOps lists the steps' kinds, space-separated.
func stepOps(steps []vgpu.Step) string {
	ops := make([]string, len(steps))
	for i, s := range steps {
		ops[i] = string(s.Op)
	}
	return strings.Join(ops, " ")
}
