package kata

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	sgnames "github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// CDIWriter keeps one CDI spec per resource in a folder: kind = resource,
// one device per device ID, the lowest cdiVersion the content needs (Kata's
// runtime reads specs with an old CDI library). Specs are rewritten
// atomically when they change; specs of resources that disappeared are
// removed.
type CDIWriter struct {
	Dir string
	// Kinds, when set, are the only kinds written (the plugin's own
	// resources): nothing else, such as the GPU kind nvidia.com/gpu, ever
	// lands in the folder through this writer.
	Kinds map[string]bool

	mu      sync.Mutex
	written map[string]*cdispec.Spec // file name -> content
}

// specPrefix marks the spec files this plugin owns in a shared CDI folder,
// so that specs left by an earlier run (a resource gone or renamed while
// the plugin was down) are removed too.
const specPrefix = "sandbox-gpu-kata-"

// SpecName is the file a resource's spec is written to.
func SpecName(resource string) string {
	vendor, class, _ := strings.Cut(resource, "/")
	return specPrefix + cdi.GenerateSpecName(vendor, class) + ".yaml"
}

// Spec builds the CDI spec of one resource.
func Spec(r deviceplugin.Resource) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: r.Name}
	common := map[string]string{} // container path -> host path
	for _, d := range r.Devices {
		dev := cdispec.Device{Name: d.ID}
		for _, s := range d.Specs {
			if shared(s.ContainerPath) {
				common[s.ContainerPath] = s.HostPath
				continue
			}
			dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, node(s.ContainerPath, s.HostPath))
		}
		spec.Devices = append(spec.Devices, dev)
	}
	for _, p := range []string{"/dev/vfio/vfio", "/dev/iommu"} {
		if hostPath, ok := common[p]; ok {
			spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, node(p, hostPath))
		}
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec of %s: %w", r.Name, err)
	}
	spec.Version = v
	return spec, nil
}

// shared reports the nodes every device of a resource needs (the VFIO
// container and iommufd), which go once into the spec's common edits.
func shared(containerPath string) bool {
	return containerPath == "/dev/vfio/vfio" || containerPath == "/dev/iommu"
}

// node is a CDI device node; the host path is given only where it differs
// (a node whose /dev is elsewhere, tests).
func node(containerPath, hostPath string) *cdispec.DeviceNode {
	n := &cdispec.DeviceNode{Path: containerPath}
	if hostPath != containerPath {
		n.HostPath = hostPath
	}
	return n
}

// RemoveAll removes every spec this plugin owns in the folder: on a
// graceful stop (the node leaves Kata passthrough, or the plugin is
// uninstalled) no spec of ours outlives it. A restart writes them again
// before it registers with the kubelet.
func (w *CDIWriter) RemoveAll() error {
	return w.Write(nil)
}

// Write brings the folder in line with the resources. It writes and
// removes only its own file names (SpecName), and of those only files it
// wrote (OwnerMarker; writeSpecFile): a symlink, a special file or another
// writer's spec at one of its names is reported and left as it is.
func (w *CDIWriter) Write(resources []deviceplugin.Resource) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[string]*cdispec.Spec{}
	}
	keep := map[string]bool{}
	var errs []error
	for _, r := range resources {
		if (w.Kinds != nil && !w.Kinds[r.Name]) || sgnames.ContainerGPUResource(r.Name) { // never ours to write, whatever a names config says
			errs = append(errs, fmt.Errorf("CDI spec of %s: not a kind of this plugin; not written", r.Name))
			continue
		}
		name := SpecName(r.Name)
		keep[name] = true
		spec, err := Spec(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if old, ok := w.written[name]; ok && reflect.DeepEqual(old, spec) {
			exists, err := checkOurs(filepath.Join(w.Dir, name))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if exists {
				continue
			}
		}
		if err := writeSpecFile(w.Dir, name, spec); err != nil {
			errs = append(errs, fmt.Errorf("write %w", err))
			continue
		}
		w.written[name] = spec
	}
	owned, _ := filepath.Glob(filepath.Join(w.Dir, specPrefix+"*.yaml"))
	for _, p := range owned {
		name := filepath.Base(p)
		if keep[name] {
			continue
		}
		if err := removeSpecFile(w.Dir, name); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(w.written, name)
	}
	return errors.Join(errs...)
}
