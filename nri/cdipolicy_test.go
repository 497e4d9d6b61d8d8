package nri

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

// nvidiaCTKSpec is a GPU spec shaped as nvidia-ctk cdi generate writes it
// (v1.18 and later): its four createContainer hooks with NVIDIA_CTK_DEBUG,
// read-only rbind mounts of the driver's files, the persistenced socket
// mounted without "ro" as NVIDIA's IPC mounts are, the firmware, and the
// DRI nodes of the GPU.
func nvidiaCTKSpec() *specs.Spec {
	s := nritest.GPUSpec(2, false)
	hook := func(args ...string) *specs.Hook {
		return &specs.Hook{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook",
			Args: append([]string{"nvidia-cdi-hook"}, args...), Env: []string{"NVIDIA_CTK_DEBUG=false"}}
	}
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	s.ContainerEdits.Hooks = []*specs.Hook{
		hook("create-symlinks", "--link", "libglxserver_nvidia.so.580.65.06::/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so"),
		hook("enable-cuda-compat", "--host-driver-version=580.65.06"),
		hook("update-ldcache", "--ldconfig-path", "/sbin/ldconfig.real", "--folder", "/usr/lib/x86_64-linux-gnu"),
		hook("disable-device-node-modification"),
	}
	s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts,
		&specs.Mount{HostPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06", ContainerPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06", Options: ro},
		&specs.Mount{HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: ro},
		&specs.Mount{HostPath: "/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin", ContainerPath: "/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin", Options: ro},
		&specs.Mount{HostPath: "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", ContainerPath: "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", Options: ro},
		&specs.Mount{HostPath: "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", Options: ro},
		&specs.Mount{HostPath: "/run/nvidia-persistenced/socket", ContainerPath: "/run/nvidia-persistenced/socket", Options: []string{"nosuid", "nodev", "rbind", "rprivate", "noexec"}},
	)
	s.Devices[0].ContainerEdits.DeviceNodes = append(s.Devices[0].ContainerEdits.DeviceNodes,
		&specs.DeviceNode{Path: "/dev/dri/card1", Type: "c", Major: 226, Minor: 1}, &specs.DeviceNode{Path: "/dev/dri/renderD128", Type: "c", Major: 226, Minor: 128})
	s.ContainerEdits.DeviceNodes = append(s.ContainerEdits.DeviceNodes,
		&specs.DeviceNode{Path: "/dev/nvidia-uvm", Type: "c", Major: 508, Minor: 0})
	return s
}

// hostMajors is a host's /proc/devices, as host.CharMajors reads it.
func hostMajors() (map[string]int64, error) {
	return map[string]int64{"mem": 1, "nvidia-frontend": 195, "nvidia-uvm": 508, "nvidia-caps": 511, "vfio": 239}, nil
}

// TestPolicyRefusesHostileSpecs: each hostile variant of a GPU spec (in its
// spec-wide or its device's edits) refuses the whole request with an error
// naming the spec file and the entry, and nothing is resolved; the spec
// nvidia-ctk writes passes whole.
func TestPolicyRefusesHostileSpecs(t *testing.T) {
	pol := &Policy{CharMajors: hostMajors}
	dir := t.TempDir()
	nritest.WriteSpec(t, dir, "nvidia", nvidiaCTKSpec())
	res, err := NewResolver("nvidia.com/gpu", []string{dir})
	require.NoError(t, err)
	edits, _, err := res.Edits([]string{"nvidia.com/gpu=0"}, pol)
	require.NoError(t, err, "nvidia-ctk's own spec passes")
	assert.Len(t, edits.Hooks.CreateContainer, 4)

	allowedHook := func(env []string, args ...string) *specs.Hook {
		return &specs.Hook{HookName: "createContainer", Path: "/usr/bin/nvidia-ctk", Args: append([]string{"nvidia-ctk", "hook"}, args...), Env: env}
	}
	for _, tc := range []struct {
		name   string
		device bool // in the device's edits, not the spec's
		edit   func(e *specs.ContainerEdits)
		entry  string
		why    string
	}{
		{"LD_PRELOAD env on an allowed hook path", false, func(e *specs.ContainerEdits) {
			e.Hooks = append(e.Hooks, allowedHook([]string{"LD_PRELOAD=/tmp/evil.so"}, "update-ldcache"))
		}, "containerEdits.hooks[0]", `env "LD_PRELOAD=/tmp/evil.so": only NVIDIA_CTK_DEBUG`},
		{"arbitrary args on an allowed hook path", false, func(e *specs.ContainerEdits) {
			e.Hooks = append(e.Hooks, allowedHook(nil, "sh", "-c", "touch /pwned"))
		}, "containerEdits.hooks[0]", `"sh" is not one of NVIDIA's known hooks`},
		{"a known hook with a host program as ldconfig", true, func(e *specs.ContainerEdits) {
			e.Hooks = append(e.Hooks, allowedHook(nil, "update-ldcache", "--ldconfig-path=/tmp/evil"))
		}, `devices["0"].containerEdits.hooks[0]`, `ldconfig "/tmp/evil": not one of`},
		{"a known hook reading its spec from a file", false, func(e *specs.ContainerEdits) {
			e.Hooks = append(e.Hooks, allowedHook(nil, "create-symlinks", "--container-spec", "/tmp/spec.json"))
		}, "containerEdits.hooks[0]", "flag --container-spec is not allowed"},
		{"a symlink out of the container", false, func(e *specs.ContainerEdits) {
			e.Hooks = append(e.Hooks, allowedHook(nil, "create-symlinks", "--link", "/etc/shadow::/usr/lib/../../etc/x"))
		}, "containerEdits.hooks[0]", "want an absolute, clean path"},
		{"a setuid chmod", false, func(e *specs.ContainerEdits) {
			e.Hooks = append(e.Hooks, allowedHook(nil, "chmod", "--mode", "4755", "--path", "/usr/bin/nvidia-smi"))
		}, "containerEdits.hooks[0]", `mode "4755"`},
		{"an allowed hook at poststart", false, func(e *specs.ContainerEdits) {
			h := allowedHook(nil, "update-ldcache")
			h.HookName = "poststart"
			e.Hooks = append(e.Hooks, h)
		}, "containerEdits.hooks[0]", "NVIDIA's hooks run at createContainer"},
		{"rw mount of host /", false, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "/", ContainerPath: "/host", Options: []string{"rw", "rbind"}})
		}, "containerEdits.mounts[1]", `option "rw" not allowed`},
		{"ro mount of host /", false, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "/", ContainerPath: "/host", Options: []string{"ro", "rbind"}})
		}, "containerEdits.mounts[1]", "not under a driver root"},
		{"ro mount of a host secret", true, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "/etc/shadow", ContainerPath: "/usr/lib/libnvidia-x.so", Options: []string{"ro", "bind"}})
		}, `devices["0"].containerEdits.mounts[0]`, "not one of the driver's files (/etc/shadow under its driver root)"},
		{"ro mount of the runtime's socket", false, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "/run/containerd/containerd.sock", ContainerPath: "/run/nvidia-persistenced/socket", Options: []string{"ro", "bind"}})
		}, "containerEdits.mounts[1]", "not one of the driver's files"},
		{"rw mount of a driver library", false, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Options: []string{"nosuid", "bind"}})
		}, "containerEdits.mounts[1]", `read-write (options ["nosuid" "bind"] lack "ro")`},
		{"a path that climbs out of the driver root", false, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "/usr/lib/nvidia/../../../etc", ContainerPath: "/x", Options: []string{"ro", "bind"}})
		}, "containerEdits.mounts[1]", "not under a driver root"},
		{"a proc mount", false, func(e *specs.ContainerEdits) {
			e.Mounts = append(e.Mounts, &specs.Mount{HostPath: "proc", ContainerPath: "/host-proc", Type: "proc"})
		}, "containerEdits.mounts[1]", `type "proc": only bind mounts`},
		{"device node /dev/sda", true, func(e *specs.ContainerEdits) {
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: "/dev/sda", Type: "b", Major: 8})
		}, `devices["0"].containerEdits.deviceNodes[1]`, "device node /dev/sda: only /dev/nvidia*, /dev/dri/* and /dev/vfio/*"},
		{"host /dev/sda behind a GPU path", true, func(e *specs.ContainerEdits) {
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: "/dev/nvidia7", HostPath: "/dev/sda"})
		}, `devices["0"].containerEdits.deviceNodes[1]`, "host path is not a node of the same kind under /dev or"},
		{"a GPU node of another dev root", true, func(e *specs.ContainerEdits) {
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: "/dev/nvidia7", HostPath: "/tmp/dev/nvidia7"})
		}, `devices["0"].containerEdits.deviceNodes[1]`, "host path is not a node of the same kind under /dev or"},
		{"/dev/mem's numbers at a GPU path", false, func(e *specs.ContainerEdits) {
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: "/dev/nvidia7", Type: "c", Major: 1, Minor: 1})
		}, "containerEdits.deviceNodes[1]", "1:1 is not a device of NVIDIA's drivers, DRM or VFIO"},
		{"a block device at a GPU path", false, func(e *specs.ContainerEdits) {
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: "/dev/dri/card9", Type: "b", Major: 226})
		}, "containerEdits.deviceNodes[1]", `type "b": only character devices`},
		{"LD_PRELOAD in the container's env", false, func(e *specs.ContainerEdits) {
			e.Env = append(e.Env, "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libnvidia-evil.so")
		}, "containerEdits.env[1]", `"LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libnvidia-evil.so": only NVIDIA_VISIBLE_DEVICES=void`},
		{"every GPU asked for by env", true, func(e *specs.ContainerEdits) {
			e.Env = append(e.Env, "NVIDIA_VISIBLE_DEVICES=all")
		}, `devices["0"].containerEdits.env[0]`, `"NVIDIA_VISIBLE_DEVICES=all"`},
		{"the root group", false, func(e *specs.ContainerEdits) { e.AdditionalGIDs = []uint32{44, 0} },
			"containerEdits.additionalGids[1]", "group 0 (root)"},
		{"a host network interface", false, func(e *specs.ContainerEdits) {
			e.NetDevices = []*specs.LinuxNetDevice{{HostInterfaceName: "eth0", Name: "eth0"}}
		}, "containerEdits.netDevices", "moves no host interface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := nritest.GPUSpec(1, false)
			e := &s.ContainerEdits
			if tc.device {
				e = &s.Devices[0].ContainerEdits
			}
			tc.edit(e)
			v, err := specs.MinimumRequiredVersion(s)
			require.NoError(t, err)
			s.Version = v
			// Written before the cache reads the folder: an auto-refreshing
			// cache loads a later write in the background.
			file := nritest.WriteSpec(t, dir, "planted", s)
			res, err := NewResolver("nvidia.com/gpu", []string{dir})
			require.NoError(t, err)
			edits, _, err := res.Edits([]string{"nvidia.com/gpu=0"}, pol)
			require.ErrorIs(t, err, errSpecRefused)
			assert.Nil(t, edits, "nothing resolved")
			assert.ErrorContains(t, err, file+": "+tc.entry+": ")
			assert.ErrorContains(t, err, tc.why)

			_, _, err = res.Edits([]string{"nvidia.com/gpu=0"}, nil)
			assert.NotErrorIs(t, err, errSpecRefused, "without a policy, nothing is checked")
		})
	}

	// A spec written with another driver root passes only when that root is configured.
	s := nritest.GPUSpec(1, false)
	s.ContainerEdits.Mounts[0].HostPath = "/opt/driver" + s.ContainerEdits.Mounts[0].HostPath
	dir = t.TempDir()
	file := nritest.WriteSpec(t, dir, "nvidia", s)
	res, err = NewResolver("nvidia.com/gpu", []string{dir})
	require.NoError(t, err)
	_, _, err = res.Edits([]string{"nvidia.com/gpu=0"}, pol)
	assert.ErrorContains(t, err, file+": containerEdits.mounts[0]: ")
	assert.ErrorContains(t, err, "not one of the driver's files (/opt/driver/usr/lib/")
	_, _, err = res.Edits([]string{"nvidia.com/gpu=0"}, &Policy{DriverRoots: []string{"/opt/driver"}, CharMajors: hostMajors})
	assert.NoError(t, err)
}

// TestDriverFile: the driver's files by folder and name, nothing else.
func TestDriverFile(t *testing.T) {
	for p, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1":                        true,
		"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.580.65.06": true,
		"/usr/lib64/libnvoptix.so.1":                                    true,
		"/lib/firmware/nvidia/580.65.06/gsp_tu10x.bin":                  true,
		"/usr/bin/nvidia-smi":                                           true,
		"/etc/vulkan/icd.d/nvidia_icd.json":                             true,
		"/usr/lib/x86_64-linux-gnu/libc.so.6":                           false,
		"/usr/bin/bash":                                                 false,
		"/etc/shadow":                                                   false,
		"/etc/nvidia":                                                   false, // a folder of its own is not under it
		"/root/nvidia/id_rsa":                                           false,
		"/var/lib/kubelet/nvidia":                                       false,
		"/usr/lib/nvidia/../../../etc/shadow":                           false,
		"usr/lib/libcuda.so":                                            false,
	} {
		assert.Equal(t, want, DriverFile(p), p)
	}
}

// FuzzHookArgs: any argument list of an allowed hook path is accepted or
// refused, never a panic; an accepted one names a known hook, and each of
// its flags is one that hook takes, so the same list with every
// "--flag=value" split into "--flag value" is accepted too.
func FuzzHookArgs(f *testing.F) {
	f.Add("nvidia-cdi-hook\x00update-ldcache\x00--folder\x00/usr/lib64\x00--ldconfig-path=/sbin/ldconfig")
	f.Add("nvidia-cdi-hook\x00create-symlinks\x00--link=libcuda.so.1::/usr/lib/libcuda.so")
	f.Add("nvidia-cdi-hook\x00chmod\x00--mode\x00755\x00--path\x00/dev/dri")
	f.Add("nvidia-cdi-hook\x00enable-cuda-compat\x00--host-driver-version=580.65.06")
	f.Add("nvidia-cdi-hook\x00disable-device-node-modification")
	f.Add("nvidia-cdi-hook\x00update-ldcache\x00--container-spec\x00/tmp/x")
	f.Add("nvidia-cdi-hook\x00--debug\x00update-ldcache")
	f.Add("")
	p := &Policy{}
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		err := p.checkHookArgs("/usr/bin/nvidia-cdi-hook", args)
		if err != nil {
			return
		}
		if len(args) < 2 || args[0] != "nvidia-cdi-hook" {
			t.Fatalf("%q accepted without the binary and a hook", args)
		}
		flags, ok := nvidiaHookFlags[args[1]]
		if !ok {
			t.Fatalf("%q accepted with unknown hook %q", args, args[1])
		}
		var split []string
		for i, a := range args {
			if i >= 2 && strings.HasPrefix(a, "--") {
				name, value, has := strings.Cut(a[2:], "=")
				if _, known := flags[name]; !known {
					t.Fatalf("%q accepted with flag %q that %s does not take", args, name, args[1])
				}
				if has {
					split = append(split, "--"+name, value)
					continue
				}
			}
			split = append(split, a)
		}
		if err := p.checkHookArgs("/usr/bin/nvidia-cdi-hook", split); err != nil {
			t.Fatalf("%q accepted, %q refused: %v", args, split, err)
		}
	})
}

// TestDevRootOfHostPaths: a node's host path is checked under the dev root
// the plugin is given (--dev-root), as the spec's writer saw it.
func TestDevRootOfHostPaths(t *testing.T) {
	n := &specs.DeviceNode{Path: "/dev/nvidia0", HostPath: "/tmp/node/dev/nvidia0"}
	assert.ErrorContains(t, (&Policy{}).checkNode(n, &majors{}), "host path is not a node of the same kind under /dev")
	assert.NoError(t, (&Policy{DevRoot: "/tmp/node/dev"}).checkNode(n, &majors{}))
	n.HostPath = "/tmp/node/dev/sda"
	assert.ErrorContains(t, (&Policy{DevRoot: "/tmp/node/dev"}).checkNode(n, &majors{}), "under /tmp/node/dev")
	n.HostPath = "/tmp/node/dev/../dev/nvidia0"
	assert.Error(t, (&Policy{DevRoot: "/tmp/node/dev"}).checkNode(n, &majors{}), "not clean")
	// A containerized driver's nodes, under its driver root's dev folder.
	n.HostPath = "/run/nvidia/driver/dev/nvidia0"
	assert.NoError(t, (&Policy{}).checkNode(n, &majors{}))
	n.HostPath = "/run/nvidia/driver/dev/sda"
	assert.ErrorContains(t, (&Policy{}).checkNode(n, &majors{}), "not a node of the same kind under /dev or /run/nvidia/driver/dev")
}
