package nri

import (
	"context"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// gpuIDs returns the device IDs of the configured resources the kubelet
// allocated to the container, or what an allowed annotation asks for.
func (p *core) gpuIDs(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]string, error) {
	allocs, err := p.pods.get(ctx, pod.GetId(), pod.GetNamespace(), pod.GetName())
	if err != nil {
		return nil, err
	}
	var ids []string
	alloc, listed := allocs[ctr.GetName()]
	if !listed && p.o.Checkpoint != nil && pod.GetUid() != "" {
		if alloc, err = p.o.Checkpoint.Lookup(pod.GetUid(), ctr.GetName()); err != nil {
			return nil, err
		}
	}
	for _, res := range slices.Sorted(maps.Keys(alloc)) {
		if p.gpuResource(res) {
			ids = append(ids, alloc[res]...)
		} else if strings.HasPrefix(res, "nvidia.com/") && len(alloc[res]) > 0 {
			p.o.Log.Info("Container holds devices of an NVIDIA resource that is not a GPU resource here; not injected",
				"pod", podKey(pod), "container", ctr.GetName(), "resource", res, "resources", p.o.Resources)
		}
	}
	if len(ids) == 0 && p.annotationsAllowed(pod.GetNamespace()) {
		ids = RequestedIDs(pod.GetAnnotations(), ctr.GetName())
	}
	return ids, nil
}

// RequestedIDs parses the request annotation of a container: the
// per-container key (names.RequestAnnotation + "." + container) wins over
// the pod-wide one; its value is device IDs separated by commas, white
// space around each ignored, empty ones dropped.
func RequestedIDs(ann map[string]string, container string) []string {
	v, ok := ann[names.RequestAnnotation+"."+container]
	if !ok {
		v = ann[names.RequestAnnotation]
	}
	var ids []string
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

func (p *core) gpuResource(name string) bool {
	for _, pat := range p.o.Resources {
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// mayNeedGPU says why a container may need a GPU, "" when nothing says
// so. It decides what a PodResources error refuses: a container with none
// of these signals starts (it would get no GPU anyway), one with any is
// refused, as it might hold an allocation the plugin cannot see:
//   - NVIDIA_VISIBLE_DEVICES in its env (other than void);
//   - a cdi.k8s.io/ or nvidia.cdi.k8s.io/ annotation naming the GPU kind,
//     on the container or its pod;
//   - the GPU request annotation where annotations are honoured;
//   - GPU device nodes already in its config (from the runtime);
//   - the kubelet's device checkpoint records devices of a GPU resource
//     (or any nvidia.com/ resource) for any container of its pod, or
//     cannot tell: no checkpoint configured, no pod UID, or the file
//     unreadable. NRI carries no extended resource requests; the
//     checkpoint, written when the kubelet allocates (before the
//     container is created), is where they show.
func (p *core) mayNeedGPU(pod *api.PodSandbox, ctr *api.Container) string {
	if hasEnv(ctr, VisibleDevicesEnv) {
		return "env " + VisibleDevicesEnv
	}
	prefix := p.res.kind + "="
	for _, ann := range []map[string]string{ctr.GetAnnotations(), pod.GetAnnotations()} {
		for _, k := range slices.Sorted(maps.Keys(ann)) {
			if (strings.HasPrefix(k, "cdi.k8s.io/") || strings.HasPrefix(k, "nvidia.cdi.k8s.io/")) && strings.Contains(ann[k], prefix) {
				return "annotation " + k
			}
		}
	}
	if p.annotationsAllowed(pod.GetNamespace()) && len(RequestedIDs(pod.GetAnnotations(), ctr.GetName())) > 0 {
		return "annotation " + names.RequestAnnotation
	}
	if nodes := p.foreignGPUNodes(ctr, nil); len(nodes) > 0 {
		return "GPU device nodes " + strings.Join(nodePaths(nodes), ", ")
	}
	if p.o.Checkpoint == nil || pod.GetUid() == "" {
		return "its pod's device resources are unknown (no kubelet checkpoint or pod UID)"
	}
	res, err := p.o.Checkpoint.PodResources(pod.GetUid())
	if err != nil {
		return err.Error()
	}
	for _, r := range res {
		if p.gpuResource(r) || strings.HasPrefix(r, "nvidia.com/") {
			return "its pod holds devices of " + r + " (kubelet checkpoint)"
		}
	}
	return ""
}

func (p *core) skipped(pod *api.PodSandbox) bool {
	if slices.Contains(p.o.KataRuntimeHandlers, pod.GetRuntimeHandler()) {
		return true
	}
	for _, pat := range p.o.SkipRuntimeHandlers {
		if ok, _ := path.Match(pat, pod.GetRuntimeHandler()); ok {
			return true
		}
	}
	return false
}

func (p *core) annotationsAllowed(ns string) bool {
	for _, n := range p.o.AnnotationNamespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// inUserNS reports whether the pod or container runs in its own user
// namespace (hostUsers: false).
func inUserNS(pod *api.PodSandbox, ctr *api.Container) bool {
	for _, ns := range append(pod.GetLinux().GetNamespaces(), ctr.GetLinux().GetNamespaces()...) {
		if ns.GetType() == "user" {
			return true
		}
	}
	return false
}

// isPrivileged tells a privileged container apart: NRI does not carry the
// flag, but the runtime mounts /sys read-write only into privileged
// containers (read-only into every other, containerd and CRI-O alike).
func isPrivileged(ctr *api.Container) bool {
	for _, m := range ctr.GetMounts() {
		if m.GetType() == "sysfs" {
			return !slices.Contains(m.GetOptions(), "ro")
		}
	}
	return false
}

func hasEnv(ctr *api.Container, key string) bool {
	for _, kv := range ctr.GetEnv() {
		if k, v, _ := strings.Cut(kv, "="); k == key && v != "void" {
			return true
		}
	}
	return false
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
