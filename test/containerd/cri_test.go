package containerd

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podOpts is what a test chooses of a pod sandbox; empty fields get defaults.
type podOpts struct {
	namespace   string // default "gpu-test"
	name        string // default pod-<n>
	uid         string // default a unique one
	handler     string // the CRI runtime handler (runtime class); default runc
	annotations map[string]string
	privileged  bool // a privileged pod (its containers may be privileged)
}

// pod is a running pod sandbox (host network: no CNI is needed).
type pod struct {
	id  string
	cfg *runtimeapi.PodSandboxConfig
}

func (p *pod) namespace() string { return p.cfg.GetMetadata().GetNamespace() }
func (p *pod) name() string      { return p.cfg.GetMetadata().GetName() }

// nextPod fills the defaults of o: a unique name and UID.
func (d *daemon) nextPod(o podOpts) podOpts {
	d.pods++
	if o.namespace == "" {
		o.namespace = "gpu-test"
	}
	if o.name == "" {
		o.name = fmt.Sprintf("pod-%d", d.pods)
	}
	if o.uid == "" {
		o.uid = fmt.Sprintf("00000000-0000-4000-8000-%012d", d.pods)
	}
	return o
}

// runPod runs a pod sandbox with the busybox image as its pause image; it is stopped and removed at
// the end of the test (with its containers) while containerd runs.
func (d *daemon) runPod(t *testing.T, o podOpts) *pod {
	t.Helper()
	o = d.nextPod(o)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: o.name, Namespace: o.namespace, Uid: o.uid},
		LogDirectory: d.path("logs", o.uid),
		Labels: map[string]string{
			"io.kubernetes.pod.name": o.name, "io.kubernetes.pod.namespace": o.namespace, "io.kubernetes.pod.uid": o.uid,
		},
		Annotations: maps.Clone(o.annotations),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
				Privileged:       o.privileged,
			},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), callWithin)
	defer cancel()
	resp, err := d.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: o.handler})
	require.NoError(t, err, "RunPodSandbox %s/%s (handler %q)", o.namespace, o.name, o.handler)
	p := &pod{id: resp.GetPodSandboxId(), cfg: cfg}
	t.Cleanup(func() {
		if !d.running() {
			return // containerd's own cleanup deletes what is left
		}
		ctx, cancel := context.WithTimeout(context.Background(), callWithin)
		defer cancel()
		if _, err := d.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
			t.Errorf("StopPodSandbox %s: %v", o.name, err)
		}
		if _, err := d.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", o.name, err)
		}
	})
	return p
}

// ctrOpts is what a test chooses of a container.
type ctrOpts struct {
	name        string // default "main"
	env         map[string]string
	annotations map[string]string
	cdiDevices  []string // fully qualified CDI device names, for the CRI CDIDevices field
	privileged  bool     // a privileged container (in a privileged pod)
}

// startContainer creates and starts a container running the image's default command (sleep) in p.
// Errors are returned: an NRI plugin may refuse a container.
func (d *daemon) startContainer(t *testing.T, p *pod, o ctrOpts) (string, error) {
	t.Helper()
	if o.name == "" {
		o.name = "main"
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: o.name},
		Image:       &runtimeapi.ImageSpec{Image: imageName},
		LogPath:     o.name + ".log",
		Annotations: maps.Clone(o.annotations),
		Labels: map[string]string{
			"io.kubernetes.container.name": o.name, "io.kubernetes.pod.name": p.name(),
			"io.kubernetes.pod.namespace": p.namespace(), "io.kubernetes.pod.uid": p.cfg.GetMetadata().GetUid(),
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
				Privileged:       o.privileged,
			},
		},
	}
	for _, k := range slices.Sorted(maps.Keys(o.env)) {
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(o.env[k])})
	}
	for _, n := range o.cdiDevices {
		cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: n})
	}
	ctx, cancel := context.WithTimeout(t.Context(), callWithin)
	defer cancel()
	created, err := d.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg,
	})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s in %s/%s: %w", o.name, p.namespace(), p.name(), err)
	}
	id := created.GetContainerId()
	if _, err := d.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return id, fmt.Errorf("StartContainer %s in %s/%s: %w", o.name, p.namespace(), p.name(), err)
	}
	return id, nil
}

// exec runs cmd in a container and returns its standard output; it fails the test unless cmd exits 0.
func (d *daemon) exec(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callWithin)
	defer cancel()
	resp, err := d.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(callWithin.Seconds())})
	require.NoError(t, err, "ExecSync %q in %s", cmd, id)
	require.Zero(t, resp.GetExitCode(), "ExecSync %q in %s: stdout %q stderr %q", cmd, id, resp.GetStdout(), resp.GetStderr())
	return string(resp.GetStdout())
}

// charDevices lists the character devices in a container's /dev and one level below, as path ->
// "major:minor" (decimal).
func (d *daemon) charDevices(t *testing.T, id string) map[string]string {
	t.Helper()
	out := d.exec(t, id, "/bin/sh", "-c",
		`for f in /dev/* /dev/*/*; do if [ -c "$f" ]; then stat -c '%n %t %T' "$f"; fi; done`)
	devs := map[string]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		require.Len(t, f, 3, "stat output line %q", line)
		major, err := strconv.ParseUint(f[1], 16, 32)
		require.NoError(t, err, "major of %q", line)
		minor, err := strconv.ParseUint(f[2], 16, 32)
		require.NoError(t, err, "minor of %q", line)
		devs[f[0]] = fmt.Sprintf("%d:%d", major, minor)
	}
	return devs
}

// gpuNodes keeps the /dev/nvidia* entries of devs.
func gpuNodes(devs map[string]string) map[string]string {
	out := map[string]string{}
	for p, n := range devs {
		if strings.HasPrefix(p, "/dev/nvidia") {
			out[p] = n
		}
	}
	return out
}

// environ returns a container's environment (as its processes see it).
func (d *daemon) environ(t *testing.T, id string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for line := range strings.Lines(d.exec(t, id, "/bin/env")) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			env[k] = v
		}
	}
	return env
}
