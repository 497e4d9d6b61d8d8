package agenttest

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/nodereport"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// splitWatch follows the Node's sandbox-gpu.io/vm-gpus as the agent's
// informer sees it: what vfio.NodeSplit does with its own watch in
// `vfio-manager daemon --vm-gpus-from-node`, here over the agent's
// Kubernetes client (the daemon's, plain HTTPS with the pod's token, is
// tested against a real API server in vfio/).
type splitWatch struct {
	changed chan struct{} // poked after the first read and on each change

	mu      sync.Mutex
	synced  bool
	value   string
	present bool
}

// seen records a read of the Node (each pass of the agent).
func (w *splitWatch) seen(n *corev1.Node) {
	v, ok := n.Annotations[names.VMGPUsAnnotation]
	w.mu.Lock()
	changed := !w.synced || v != w.value || ok != w.present
	w.synced, w.value, w.present = true, v, ok
	w.mu.Unlock()
	if changed {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

// get is the declaration now; an error before the Node was first read.
func (w *splitWatch) get(node string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced {
		return "", fmt.Errorf("node %s: annotation %s: not read yet", node, names.VMGPUsAnnotation)
	}
	return w.value, nil
}

// nodeSplit is the VFIO manager's declaration (its Node's annotation) and
// its report publisher (the split in sandbox-gpu.io/vm-gpus-report, written
// only when it changed), as vfio.NodeSplit builds them.
func (a *Agent) nodeSplit(log logr.Logger) (*vfio.Declaration, func(context.Context, *vfio.ReadyReport)) {
	node := a.o.Node
	get := func() (string, error) { return a.split.get(node) }
	decl := &vfio.Declaration{Source: fmt.Sprintf("node %s: annotation %s", node, names.VMGPUsAnnotation),
		Changed: a.split.changed, Get: get}
	pub := &nodereport.Publisher{Node: node, Annotation: names.VMGPUsReportAnnotation, Patch: a.patchNode}
	return decl, func(ctx context.Context, rep *vfio.ReadyReport) {
		declared, err := get()
		if err != nil {
			return
		}
		if err := pub.PublishValue(ctx, vfio.SplitReport(rep, declared).Encode()); err != nil && ctx.Err() == nil {
			log.Error(err, "Cannot publish the split report")
		}
	}
}

// standInPID is a new pid for a stand-in process on the simulated host
// (called under a.mu, as start is).
func (a *Agent) standInPID() int {
	a.pids++
	return 30000 + a.pids
}

// holdHostGPUs makes pid (NVIDIA's device plugin) hold the device node of
// every GPU on its host driver, as NVML does while it serves them: the
// VFIO manager then takes them as in use.
func (a *Agent) holdHostGPUs(pid int, log logr.Logger) {
	if a.k == nil {
		return
	}
	snap, err := a.h.Scan()
	if err != nil {
		log.Error(err, "Cannot scan the host")
		return
	}
	for _, f := range snap.Functions {
		if f.Vendor != host.VendorNVIDIA || f.Role != host.RoleGPU || f.PhysFn != "" || host.IsVFIODriver(f.Driver) {
			continue
		}
		if minor, ok := a.h.GPUMinor(f.Address); ok {
			if err := a.k.HoldOpen(pid, "nvidia-device-plugin", fmt.Sprintf("nvidia%d", minor)); err != nil {
				log.Error(err, "Cannot hold a GPU open", "gpu", f.Address)
			}
		}
	}
}
