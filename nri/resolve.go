package nri

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/containerd/nri/pkg/api"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Resolver maps device IDs to CDI device names of one kind and resolves
// them with the CDI library.
type Resolver struct {
	kind  string
	cache *cdi.Cache
}

// NewResolver watches the CDI spec dirs (auto-refresh).
func NewResolver(kind string, dirs []string) (*Resolver, error) {
	vendor, class := parser.ParseQualifier(kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(true))
	if err != nil {
		// Spec errors are per spec; one broken file must not stop the plugin.
		if c == nil {
			return nil, fmt.Errorf("CDI cache over %s: %w", strings.Join(dirs, ", "), err)
		}
	}
	return &Resolver{kind: kind, cache: c}, nil
}

// Name is the CDI device name of a kubelet device ID. Device plugins that
// share a GPU between replicas (time-slicing) append "::<replica>"; the
// GPU is what is injected.
func (r *Resolver) Name(id string) (string, error) {
	base, _, _ := strings.Cut(id, "::")
	if err := parser.ValidateDeviceName(base); err != nil {
		return "", fmt.Errorf("device ID %q: not a CDI device name: %w", id, err)
	}
	return r.kind + "=" + base, nil
}

// Edits resolves CDI device names into the OCI edits they make. Names the
// cache does not know are returned; a refresh is tried once first, so a
// spec written a moment ago is found. With a policy, the edits of every
// spec and device involved are checked first, and nothing is resolved when
// one is refused (an error wrapping errSpecRefused that names each spec
// file and entry); the edits returned are made from exactly the spec
// content that was checked.
func (r *Resolver) Edits(names []string, pol *Policy) (*oci.Spec, []string, error) {
	devs, unresolved := r.devices(names)
	if len(unresolved) > 0 {
		r.rescan()
		devs, unresolved = r.devices(names)
	}
	if len(unresolved) > 0 {
		return nil, unresolved, fmt.Errorf("unresolvable CDI devices %s", strings.Join(unresolved, ", "))
	}
	if pol != nil {
		if refused := pol.check(devs); len(refused) > 0 {
			return nil, nil, fmt.Errorf("%w: %s", errSpecRefused, strings.Join(refused, "; "))
		}
	}
	edits := &cdi.ContainerEdits{ContainerEdits: &cdispec.ContainerEdits{}}
	seen := map[*cdi.Spec]bool{}
	for _, d := range devs {
		if s := d.GetSpec(); !seen[s] {
			seen[s] = true
			edits.Append(&cdi.ContainerEdits{ContainerEdits: &s.ContainerEdits})
		}
		edits.Append(&cdi.ContainerEdits{ContainerEdits: &d.ContainerEdits})
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if err := edits.Apply(spec); err != nil {
		return nil, nil, fmt.Errorf("inject CDI devices %s: %w", strings.Join(names, ", "), err)
	}
	return spec, nil, nil
}

// rescan makes the cache read the spec folders again now. In auto-refresh
// mode the CDI cache's Refresh rescans only when a missing folder has
// appeared; a spec written a moment ago waits for the watcher's goroutine.
// Configuring the cache again restarts its watch and then rescans, so
// nothing written before this call is missed. Errors of other specs are
// not ours to report here (the cache keeps them per spec).
func (r *Resolver) rescan() {
	_ = r.cache.Configure(cdi.WithAutoRefresh(true))
}

// devices looks the names up in the cache, once each.
func (r *Resolver) devices(names []string) ([]*cdi.Device, []string) {
	var devs []*cdi.Device
	var unresolved []string
	for _, n := range names {
		if d := r.cache.GetDevice(n); d != nil {
			devs = append(devs, d)
		} else {
			unresolved = append(unresolved, n)
		}
	}
	return devs, unresolved
}

// check returns the refused entries of the devices' specs and of the
// devices, "<spec file>: <entry>: <why>".
func (p *Policy) check(devs []*cdi.Device) []string {
	mj := &majors{p: p}
	var out []string
	seen := map[*cdi.Spec]bool{}
	for _, d := range devs {
		s := d.GetSpec()
		if !seen[s] {
			seen[s] = true
			for _, v := range p.checkEdits(&s.ContainerEdits, s.GetPath(), "containerEdits", mj) {
				out = append(out, v.String())
			}
		}
		for _, v := range p.checkEdits(&d.ContainerEdits, s.GetPath(), fmt.Sprintf("devices[%q].containerEdits", d.Name), mj) {
			out = append(out, v.String())
		}
	}
	return out
}

// DevicePaths are the container paths of every device node the kind's
// specs can inject: what counts as a GPU device node.
func (r *Resolver) DevicePaths() map[string]bool {
	out := map[string]bool{}
	prefix := r.kind + "="
	for _, name := range r.cache.ListDevices() {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		d := r.cache.GetDevice(name)
		if d == nil {
			continue
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			out[n.Path] = true
		}
		for _, n := range d.GetSpec().ContainerEdits.DeviceNodes {
			out[n.Path] = true
		}
	}
	return out
}

// isGPUNode reports whether a container device path is an NVIDIA GPU node
// (by name, or because a GPU CDI spec injects it).
func isGPUNode(p string, known map[string]bool) bool {
	return known[p] || strings.HasPrefix(p, "/dev/nvidia") || strings.HasPrefix(p, "/dev/dxg")
}

// errHooksInUserNS is returned for a pod in a user namespace whose devices
// bring OCI hooks.
var errHooksInUserNS = errors.New("the CDI edits carry OCI hooks, which fail inside a user namespace (hostUsers: false); " +
	"use a CDI spec without hooks (nri-gpu-plugin generate-cdi writes one)")

func hookPaths(h *oci.Hooks) []string {
	if h == nil {
		return nil
	}
	var out []string
	//lint:ignore SA1019 Prestart is deprecated but runtimes still run it
	for _, list := range [][]oci.Hook{h.Prestart, h.CreateRuntime, h.CreateContainer, h.StartContainer, h.Poststart, h.Poststop} {
		for _, x := range list {
			out = append(out, path.Base(x.Path)+" "+strings.Join(x.Args[min(1, len(x.Args)):], " "))
		}
	}
	sort.Strings(out)
	return out
}

// editsAdjustment turns resolved OCI edits into an NRI adjustment.
func editsAdjustment(adj *api.ContainerAdjustment, s *oci.Spec) {
	for _, d := range api.FromOCILinuxDevices(s.Linux.Devices) {
		adj.AddDevice(d)
	}
	for _, m := range s.Mounts {
		adj.AddMount(&api.Mount{Destination: m.Destination, Source: m.Source, Type: m.Type, Options: m.Options})
	}
	for _, kv := range s.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		adj.AddEnv(k, v)
	}
	if s.Hooks != nil {
		adj.AddHooks(api.FromOCIHooks(s.Hooks))
	}
}
