package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
)

// hostileSpec is a GPU spec a compromised CDI writer plants: its one device ("hostile<n>") is a
// stand-in GPU node plus one hostile entry, in the device's edits or the spec's.
type hostileSpec struct {
	name   string
	device bool // the entry goes into the device's edits (else the spec-wide ones)
	edit   func(e *cdispec.ContainerEdits)
	entry  string // the entry the refusal names
}

// hostileSpecs are the variants the plugin's CDI policy refuses whatever --cdi-hooks allows of
// hook paths: an allowed hook path with LD_PRELOAD or arbitrary arguments, a read-write mount of
// the host's /, a device node /dev/sda.
func hostileSpecs() []hostileSpec {
	hook := func(env []string, args ...string) *cdispec.Hook {
		return &cdispec.Hook{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook",
			Args: append([]string{"nvidia-cdi-hook"}, args...), Env: env}
	}
	return []hostileSpec{
		{"ld-preload-on-an-allowed-hook", false, func(e *cdispec.ContainerEdits) {
			e.Hooks = []*cdispec.Hook{hook([]string{"LD_PRELOAD=/tmp/evil.so"}, "update-ldcache", "--folder", "/usr/lib64")}
		}, "containerEdits.hooks[0]"},
		{"arbitrary-args-on-an-allowed-hook", true, func(e *cdispec.ContainerEdits) {
			e.Hooks = []*cdispec.Hook{hook(nil, "update-ldcache", "--ldconfig-path", "/bin/sh")}
		}, `devices["hostile1"].containerEdits.hooks[0]`},
		{"rw-mount-of-host-root", false, func(e *cdispec.ContainerEdits) {
			e.Mounts = []*cdispec.Mount{{HostPath: "/", ContainerPath: "/host", Options: []string{"rw", "rbind"}}}
		}, "containerEdits.mounts[0]"},
		{"device-node-sda", true, func(e *cdispec.ContainerEdits) {
			e.DeviceNodes = append(e.DeviceNodes, &cdispec.DeviceNode{Path: "/dev/sda", Type: "b", Major: 8, Minor: 0})
		}, `devices["hostile3"].containerEdits.deviceNodes[1]`},
	}
}

// testHostileSpecs plants each hostile variant as the only spec of a device the kubelet allocated:
// the container is refused, the refusal names the spec file and the entry, and nothing of it
// reaches an OCI spec (containerd holds no container of the pod). Each variant has its own file and
// device name (a cache that has not yet seen a rewrite could answer with the last one); the spec is
// removed afterwards.
func testHostileSpecs(t *testing.T, d *daemon, kl *podresourcestest.Kubelet, ns string, g standIn) {
	for i, h := range hostileSpecs() {
		t.Run(h.name, func(t *testing.T) {
			device := fmt.Sprintf("hostile%d", i)
			spec := cdispec.Spec{Kind: cdiKind, Devices: []cdispec.Device{{Name: device, ContainerEdits: cdispec.ContainerEdits{
				DeviceNodes: []*cdispec.DeviceNode{{Path: g.path, HostPath: g.hostPath}},
			}}}}
			e := &spec.ContainerEdits
			if h.device {
				e = &spec.Devices[0].ContainerEdits
			}
			h.edit(e)
			v, err := cdispec.MinimumRequiredVersion(&spec)
			require.NoError(t, err)
			spec.Version = v
			b, err := json.MarshalIndent(spec, "", "  ")
			require.NoError(t, err)
			file := filepath.Join(d.cdiDir(), device+".json")
			require.NoError(t, os.WriteFile(file+".tmp", b, 0o644))
			require.NoError(t, os.Rename(file+".tmp", file))
			t.Cleanup(func() { assert.NoError(t, os.Remove(file)) })

			name := "hostile-" + h.name
			kl.Allocate(ns, name, "cuda", cdiKind, device)
			pd := d.runPod(t, podOpts{namespace: ns, name: name})
			_, err = d.startContainer(t, pd, ctrOpts{name: "cuda"})
			require.Error(t, err, "a container whose GPU spec brings %s must not be created", h.name)
			assert.Contains(t, err.Error(), "a GPU CDI spec brings what the CDI policy does not allow")
			assert.Contains(t, err.Error(), file+": "+h.entry+": ", "the refusal names the spec file and the entry")
			t.Logf("report: %v", err)

			ctx, cancel := context.WithTimeout(t.Context(), callWithin)
			defer cancel()
			list, err := d.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pd.id}})
			require.NoError(t, err)
			assert.Empty(t, list.GetContainers(), fmt.Sprintf("no container (no OCI spec) in pod %s", name))
		})
	}
}
