package agenttest

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// NVIDIA's drivers on a simulated node, played as real nodes change them
// (hostsim's hostdrivers.go models the kernel side):
//   - the vGPU Manager (the vgpu-manager operand, NVIDIA's image) at its
//     start takes the GPUs as the GPU Operator's does: its init container
//     (k8s-driver-manager) unloads the loaded data-centre driver, which the
//     kernel refuses while a CUDA process holds a GPU (it retries), then it
//     loads its own nvidia.ko and nvidia_vgpu_vfio; it is ready once they
//     are loaded. A vGPU host driver installed on the host is taken as it
//     is. When it leaves it unloads what it loaded;
//   - the node's own data-centre driver (its init system, or the GPU
//     Operator's driver DaemonSet) is loaded from the modules folder when no
//     NVIDIA driver is and no vGPU Manager runs (hostDriver);
//   - NVIDIA's device plugin (CUDA containers) is ready only while the
//     data-centre driver serves the GPUs: the vGPU host driver runs no CUDA.

// startVGPUManager runs the vGPU Manager's stand-in; the func says whether
// its driver serves the GPUs.
func (a *Agent) startVGPUManager(ctx context.Context, log logr.Logger, run func(func())) func() bool {
	var ready atomic.Bool
	run(func() {
		ours := false
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if !ready.Load() {
				loaded, err := a.loadVGPUDriver()
				switch {
				case err == nil:
					ours = loaded
					ready.Store(true)
				case errors.Is(err, syscall.EWOULDBLOCK): // a CUDA process still holds a GPU: again
				default:
					log.Error(err, "vGPU host driver not loaded")
				}
			}
			select {
			case <-ctx.Done():
				if ours {
					a.unloadVGPUDriver(log)
				}
				return
			case <-tick.C:
			}
		}
	})
	return ready.Load
}

// loadVGPUDriver swaps the data-centre driver for the vGPU host driver;
// loaded says whether it loaded it (not when the host had it already).
func (a *Agent) loadVGPUDriver() (loaded bool, err error) {
	d, err := a.h.NVIDIADriver()
	if err != nil {
		return false, err
	}
	switch d {
	case host.NVIDIADriverVGPUHost:
		return false, nil
	case host.NVIDIADriverDataCentre:
		if err := a.k.DeleteModule(hostsim.ModuleNVIDIA); err != nil {
			return false, err
		}
	}
	for _, m := range []string{hostsim.ModuleNVIDIA, hostsim.ModuleVGPUVFIO} {
		if err := a.k.InitModule(a.k.ModuleImage(m, hostsim.FlavourVGPU)); err != nil && !errors.Is(err, syscall.EEXIST) {
			return false, err
		}
	}
	return true, nil
}

// unloadVGPUDriver is the vGPU Manager's exit: its modules go (the
// kernel refuses while vGPUs or VFs are left; it tries for a while).
func (a *Agent) unloadVGPUDriver(log logr.Logger) {
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for _, m := range []string{hostsim.ModuleVGPUVFIO, hostsim.ModuleNVIDIA} {
		for {
			err := a.k.DeleteModule(m)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				log.Error(err, "vGPU host driver left loaded", "module", m)
				return
			}
			<-tick.C
		}
	}
}

// hostDriver loads the node's data-centre driver when no NVIDIA driver is
// loaded and no vGPU Manager runs (a.mu is held), through the product's
// module loader, as modprobe would.
func (a *Agent) hostDriver(ctx context.Context) {
	if a.k == nil || a.k.InstalledNVIDIADriver() != hostsim.FlavourDataCentre {
		return
	}
	if _, ok := a.ops[names.VGPUManager]; ok {
		return
	}
	if d, err := a.h.NVIDIADriver(); err != nil || d != host.NVIDIADriverNone {
		return
	}
	if err := a.h.EnsureDriver(ctx, "nvidia", hostsim.ModuleNVIDIA); err != nil {
		a.o.Log.Error(err, "Data-centre driver not loaded", "node", a.o.Node)
	}
}

// cudaReady says whether CUDA containers can use the node's GPUs: the
// data-centre driver serves them.
func (a *Agent) cudaReady() bool {
	if a.h == nil {
		return true
	}
	d, err := a.h.NVIDIADriver()
	return err == nil && d == host.NVIDIADriverDataCentre
}
