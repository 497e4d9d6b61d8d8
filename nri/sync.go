package nri

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// Missing is a running container that holds an allocation but lacks some
// of its GPU device nodes (created while the plugin was away, say).
type Missing struct {
	Pod, Container string
	Devices        []string // container paths
	Reason         string   // set when the devices could not be resolved
}

// Synchronize answers at once (the runtime allows it 2 s and the kubelet
// may be slower); in the background it fills the pod cache from the
// kubelet and reports containers that hold an allocation but lack their
// devices. It changes nothing: a running container's devices cannot be
// added safely.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.metrics.connections.Inc()
	if !p.syncing.CompareAndSwap(false, true) {
		return nil, nil // a check is still running; the next connection checks again
	}
	c := p.core()
	go func() {
		defer p.syncing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		missing, err := c.check(ctx, pods, ctrs)
		if err != nil {
			c.o.Log.Error(err, "Could not check existing containers")
			return
		}
		p.metrics.missing.Set(float64(len(missing)))
		for _, m := range missing {
			c.o.Log.Info("Container lacks allocated GPU devices", "pod", m.Pod, "container", m.Container, "devices", m.Devices, "reason", m.Reason)
		}
	}()
	return nil, nil
}

func (p *core) check(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]Missing, error) {
	all, err := p.pods.src.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*api.PodSandbox{}
	sandboxes := map[string]string{}
	for _, pod := range pods {
		byID[pod.GetId()] = pod
		sandboxes[podKey(pod)] = pod.GetId()
	}
	p.pods.fill(all, sandboxes)
	var out []Missing
	for _, c := range ctrs {
		pod := byID[c.GetPodSandboxId()]
		if pod == nil || p.skipped(pod) {
			continue
		}
		if c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		ids, err := p.gpuIDs(ctx, pod, c)
		if err != nil || len(ids) == 0 {
			continue
		}
		m := Missing{Pod: podKey(pod), Container: c.GetName()}
		var names []string
		for _, id := range ids {
			n, err := p.res.Name(id)
			if err != nil {
				m.Reason = err.Error()
				break
			}
			names = append(names, n)
		}
		if m.Reason == "" {
			edits, _, err := p.res.Edits(dedupe(names), nil)
			if err != nil {
				m.Reason = err.Error()
			} else {
				have := map[string]bool{}
				for _, d := range c.GetLinux().GetDevices() {
					have[d.GetPath()] = true
				}
				for _, d := range edits.Linux.Devices {
					if !have[d.Path] {
						m.Devices = append(m.Devices, d.Path)
					}
				}
			}
		}
		if m.Reason != "" || len(m.Devices) > 0 {
			sort.Strings(m.Devices)
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return strings.Compare(out[i].Pod+"/"+out[i].Container, out[j].Pod+"/"+out[j].Container) < 0
	})
	return out, nil
}
