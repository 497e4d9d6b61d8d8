package workload

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

func node(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: labels}}
}

func policy(enabled bool, mode, def string) *v1alpha1.SandboxGPUPolicy {
	p := &v1alpha1.SandboxGPUPolicy{}
	p.Spec.SandboxWorkloads = v1alpha1.SandboxWorkloads{Enabled: enabled, Mode: mode, DefaultWorkload: def}
	return p
}

func TestIsGPUNode(t *testing.T) {
	assert.True(t, IsGPUNode(node(map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"})))
	assert.True(t, IsGPUNode(node(map[string]string{"feature.node.kubernetes.io/pci-0302_10de.present": "true"})))
	assert.True(t, IsGPUNode(node(map[string]string{names.GPUPresentLabel: "true"})))
	assert.False(t, IsGPUNode(node(map[string]string{"feature.node.kubernetes.io/pci-8086.present": "true"})))
	assert.False(t, IsGPUNode(node(nil)))
}

func TestConfig(t *testing.T) {
	on := policy(true, "kubevirt", "vm-passthrough")
	cases := []struct {
		label, want string
		invalid     bool
	}{
		{"container", "container", false},
		{"vm-passthrough", "vm-passthrough", false},
		{"vm-vgpu", "vm-vgpu", false},
		{"", "vm-passthrough", true},
		{"VM-PASSTHROUGH", "vm-passthrough", true},
		{"gpu", "vm-passthrough", true},
	}
	for _, c := range cases {
		got, invalid := Config(node(map[string]string{names.WorkloadConfigLabel: c.label}), on)
		assert.Equal(t, c.want, got, c.label)
		if c.invalid {
			assert.Contains(t, invalid, "gpu-1")
			assert.Contains(t, invalid, `"`+c.label+`"`)
		} else {
			assert.Empty(t, invalid)
		}
	}
	got, invalid := Config(node(nil), on)
	assert.Equal(t, "vm-passthrough", got, "no label: the default")
	assert.Empty(t, invalid, "a missing label is not an error")
	got, _ = Config(node(map[string]string{names.WorkloadConfigLabel: "vm-passthrough"}), policy(false, "", ""))
	assert.Equal(t, "container", got, "sandbox workloads off: containers")
	got, _ = Config(node(nil), policy(true, "", ""))
	assert.Equal(t, "container", got, "the default default is container")
}

func TestOperands(t *testing.T) {
	kv := policy(true, "kubevirt", "")
	kata := policy(true, "kata", "")
	assert.Equal(t, []string{names.NRIPlugin, names.NVIDIADevicePlugin}, Operands("container", kv))
	assert.Equal(t, []string{names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager}, Operands("vm-passthrough", kv))
	assert.Equal(t, []string{names.KataDevicePlugin, names.Validator, names.VFIOManager}, Operands("vm-passthrough", kata))
	assert.Equal(t, []string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager}, Operands("vm-vgpu", kv),
		"no vGPU host driver manager without its (private) image")
	on := true
	kv.Spec.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "registry.example/vgpu-manager:550"}
	assert.Contains(t, Operands("vm-vgpu", kv), names.VGPUManager)
	off := false
	kv.Spec.Validator.Enabled = &off
	assert.NotContains(t, Operands("vm-passthrough", kv), names.Validator)
}

// The operands table: which operand runs on which node, per config and
// policy knob. Without sandbox workloads no node runs one (the discovery
// agent runs by no deploy label); a mixed vm-passthrough node (vm-gpus
// declared, not all) runs the container operands too.
func TestOperandsTable(t *testing.T) {
	off := false
	noDP := policy(true, "kubevirt", "")
	noDP.Spec.DevicePlugin.Enabled = &off
	noNRI := policy(true, "kubevirt", "")
	noNRI.Spec.NRIPlugin.Enabled = &off
	mixed := func(v string) *corev1.Node {
		n := node(nil)
		n.Annotations = map[string]string{names.VMGPUsAnnotation: v}
		return n
	}
	vmOps := []string{names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager}
	for _, c := range []struct {
		what   string
		n      *corev1.Node
		config string
		p      *v1alpha1.SandboxGPUPolicy
		want   []string
	}{
		{"sandbox off: container", node(nil), "container", policy(false, "", ""), nil},
		{"sandbox off: a vm label", node(nil), "vm-passthrough", policy(false, "", ""), nil},
		{"sandbox off: a mixed node", mixed("2"), "vm-passthrough", policy(false, "", ""), nil},
		{"container", node(nil), "container", policy(true, "", ""), []string{names.NRIPlugin, names.NVIDIADevicePlugin}},
		{"container, device plugin off", node(nil), "container", noDP, []string{names.NRIPlugin}},
		{"container, NRI off", node(nil), "container", noNRI, []string{names.NVIDIADevicePlugin}},
		{"pure VM node", node(nil), "vm-passthrough", policy(true, "", ""), vmOps},
		{"vm-gpus=all is a pure VM node", mixed("all"), "vm-passthrough", policy(true, "", ""), vmOps},
		{"vm-gpus=ALL", mixed(" ALL "), "vm-passthrough", policy(true, "", ""), vmOps},
		{"vm-gpus empty", mixed(""), "vm-passthrough", policy(true, "", ""), vmOps},
		{"mixed: a count", mixed("4"), "vm-passthrough", policy(true, "", ""),
			[]string{names.KubeVirtDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager}},
		{"mixed: indices", mixed("index:0,2"), "vm-passthrough", policy(true, "", ""),
			[]string{names.KubeVirtDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager}},
		{"mixed, Kata", mixed("model:A10"), "vm-passthrough", policy(true, "kata", ""),
			[]string{names.KataDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager}},
		{"mixed, device plugin off", mixed("0"), "vm-passthrough", noDP,
			[]string{names.KubeVirtDevicePlugin, names.NRIPlugin, names.Validator, names.VFIOManager}},
		{"vm-gpus on a container node changes nothing", mixed("2"), "container", policy(true, "", ""), []string{names.NRIPlugin, names.NVIDIADevicePlugin}},
		{"vm-gpus on a vm-vgpu node changes nothing", mixed("2"), "vm-vgpu", policy(true, "", ""),
			[]string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager}},
	} {
		assert.Equal(t, c.want, NodeOperands(c.n, c.config, c.p), c.what)
	}
	assert.False(t, Mixed(node(nil)))
	assert.True(t, Mixed(mixed("1")))
}

// On a mixed node NVIDIA's device plugin runs only while the VFIO manager
// is ready (it lists the GPUs it finds at start: the container GPUs only,
// and holds them open); on a container node it has nothing to wait for.
func TestDevicePluginWaitsForTheSplit(t *testing.T) {
	mixed := []string{names.KubeVirtDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager}
	assert.NotContains(t, Staged(mixed, nil, nil), names.NVIDIADevicePlugin)
	assert.Contains(t, Staged(mixed, map[string]bool{names.VFIOManager: true}, nil), names.NVIDIADevicePlugin)
	assert.NotContains(t, Staged(mixed, nil, map[string]bool{names.NVIDIADevicePlugin: true}), names.NVIDIADevicePlugin,
		"a running one stops while the VFIO manager is not ready (NVML holds the GPUs it serves: none could move to a VM)")
	container := []string{names.NRIPlugin, names.NVIDIADevicePlugin}
	assert.Equal(t, container, Staged(container, nil, nil))
}

func TestDeployLabels(t *testing.T) {
	cur := map[string]string{"kubernetes.io/hostname": "gpu-1", names.DeployLabel(names.NRIPlugin): "true"}
	out, changed := DeployLabels(cur, []string{names.VFIOManager, names.KubeVirtDevicePlugin})
	assert.True(t, changed)
	assert.Equal(t, map[string]string{"kubernetes.io/hostname": "gpu-1", names.DeployLabel(names.VFIOManager): "true", names.DeployLabel(names.KubeVirtDevicePlugin): "true"}, out)
	assert.Equal(t, "true", cur[names.DeployLabel(names.NRIPlugin)], "input untouched")
	_, changed = DeployLabels(out, []string{names.KubeVirtDevicePlugin, names.VFIOManager})
	assert.False(t, changed, "same labels: no write")
}

func TestHoldsGPU(t *testing.T) {
	pod := func(res string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}}}}}, Status: corev1.PodStatus{Phase: phase}}
	}
	assert.True(t, HoldsGPU(pod("nvidia.com/gpu", corev1.PodRunning), "container"))
	assert.True(t, HoldsGPU(pod("nvidia.com/mig-1g.10gb", corev1.PodPending), "container"))
	assert.False(t, HoldsGPU(pod("nvidia.com/GA102GL_A10", corev1.PodRunning), "container"))
	assert.True(t, HoldsGPU(pod("nvidia.com/GA102GL_A10", corev1.PodRunning), "vm-passthrough"))
	assert.True(t, HoldsGPU(pod("nvidia.com/pgpu", corev1.PodRunning), "vm-passthrough"))
	assert.False(t, HoldsGPU(pod("nvidia.com/gpu", corev1.PodRunning), "vm-passthrough"))
	assert.False(t, HoldsGPU(pod("nvidia.com/gpu", corev1.PodSucceeded), "container"), "finished pods hold nothing")
	assert.False(t, HoldsGPU(pod("cpu", corev1.PodRunning), "container"))
}

// Kata takes no vGPU: a vm-vgpu node in Kata mode runs nothing (it must not
// become a passthrough node) and the reason is a sentence.
func TestKataTakesNoVGPU(t *testing.T) {
	kata := policy(true, "kata", "")
	on := true
	kata.Spec.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "registry.example/vgpu-manager:550"}
	assert.Empty(t, Operands("vm-vgpu", kata))
	why := Unsupported("vm-vgpu", kata)
	assert.Contains(t, why, "Kata")
	assert.Contains(t, why, "takes no vGPU")
	for _, config := range []string{"container", "vm-passthrough"} {
		assert.Empty(t, Unsupported(config, kata), config)
	}
	assert.Empty(t, Unsupported("vm-vgpu", policy(true, "kubevirt", "")))
	assert.Empty(t, Unsupported("vm-vgpu", policy(true, "", "")), "kubevirt is the default mode")
	assert.NotEmpty(t, Operands("vm-vgpu", policy(true, "", "")))
}

// The vGPU device manager starts once the vGPU host driver is ready, when
// that driver is deployed at all; a running one is never stopped for it.
func TestStaged(t *testing.T) {
	want := []string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager, names.VGPUManager}
	assert.Equal(t, []string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUManager}, Staged(want, nil, nil))
	assert.Equal(t, want, Staged(want, map[string]bool{names.VGPUManager: true}, nil))
	assert.Equal(t, want, Staged(want, nil, map[string]bool{names.VGPUDeviceManager: true}), "already running")
	noDriver := []string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager}
	assert.Equal(t, noDriver, Staged(noDriver, nil, nil), "a host-installed vGPU driver: nothing to wait for")
}

func TestIsVGPUResource(t *testing.T) {
	assert.True(t, IsVGPUResource("nvidia.com/NVIDIA_A10-4Q"), "mdev")
	assert.True(t, IsVGPUResource("nvidia.com/NVIDIA_L40S-24Q"), "SR-IOV VF")
	assert.False(t, IsVGPUResource("nvidia.com/GA102GL_A10"))
	assert.False(t, IsVGPUResource("nvidia.com/gpu"))
	assert.False(t, IsVGPUResource("example.com/NVIDIA_A10-4Q"))
}

// Time-sliced GPUs (nvidia.com/gpu.shared, NVIDIA's device plugin with
// renameByDefault) are container GPUs: their pods are drained when a node
// leaves the container config, and they never hold a VM config.
func TestSharedGPUIsAContainerResource(t *testing.T) {
	for res, want := range map[string]bool{
		"nvidia.com/gpu": true, "nvidia.com/gpu.shared": true, "nvidia.com/mig-1g.10gb": true,
		"nvidia.com/mig-1g.10gb.shared": true, "nvidia.com/pgpu": false, "nvidia.com/GA102GL_A10": false,
		"nvidia.com/NVIDIA_A10-4Q": false, "example.com/gpu.shared": false, "nvidia.com/gpu.shared.x": false,
	} {
		assert.Equal(t, want, IsContainerResource(res), res)
		assert.Equal(t, want, GPUResource("container", res), "container: %s", res)
		if strings.HasPrefix(res, "nvidia.com/") {
			assert.Equal(t, !want, GPUResource("vm-passthrough", res), "vm-passthrough: %s", res)
			assert.Equal(t, !want, GPUResource("vm-vgpu", res), "vm-vgpu: %s", res)
		}
	}
	shared := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"nvidia.com/gpu.shared": resource.MustParse("1")}}}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	assert.True(t, HoldsGPU(shared, "container"), "a time-sliced pod is drained")
	assert.False(t, HoldsGPU(shared, "vm-passthrough"))
}

// A config needs its NVIDIA driver: without the policy's vGPU host driver
// the other one is refused; with it the operands that need the new driver
// wait until the node reports it (a node nobody reports on is not held).
func TestDriverRefusalAndWait(t *testing.T) {
	plain := policy(true, "kubevirt", "")
	plain.Spec.VGPUDeviceManager.Enabled = nil
	changes := policy(true, "kubevirt", "")
	on := true
	changes.Spec.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "registry.example/vgpu-manager:550"}
	at := func(driver string) *corev1.Node { return node(map[string]string{names.GPUDriverLabel: driver}) }
	assert.Equal(t, "datacenter", DriverNeeded("container"))
	assert.Equal(t, "vgpu-host", DriverNeeded("vm-vgpu"))
	assert.Empty(t, DriverNeeded("vm-passthrough"))

	assert.Contains(t, DriverRefusal(at("vgpu-host"), "container", plain), "serves no CUDA container")
	assert.Contains(t, DriverRefusal(at("datacenter"), "vm-vgpu", plain), "offers no vGPU")
	for _, tc := range []struct {
		n      *corev1.Node
		config string
		p      *v1alpha1.SandboxGPUPolicy
	}{
		{at("datacenter"), "container", plain}, {at("vgpu-host"), "vm-vgpu", plain}, {at("vgpu-host"), "vm-passthrough", plain},
		{at("none"), "container", plain}, {node(nil), "vm-vgpu", plain}, {at("vgpu-host"), "container", changes},
		{at("datacenter"), "vm-vgpu", changes},
	} {
		assert.Empty(t, DriverRefusal(tc.n, tc.config, tc.p), "%v %s", tc.n.Labels, tc.config)
	}

	held, why := DriverHeld(at("vgpu-host"), "container", changes)
	assert.Equal(t, []string{names.NRIPlugin, names.NVIDIADevicePlugin}, held)
	assert.Equal(t, "the node's GPUs to be on NVIDIA's data-centre driver (the GPU discovery agent reports "+names.GPUDriverLabel+"=vgpu-host)", why)
	held, _ = DriverHeld(at("none"), "vm-vgpu", changes)
	assert.Equal(t, []string{names.VGPUDeviceManager}, held)
	for _, n := range []*corev1.Node{at("datacenter"), node(nil)} {
		held, _ = DriverHeld(n, "container", changes)
		assert.Empty(t, held)
	}
	held, _ = DriverHeld(at("vgpu-host"), "container", plain)
	assert.Empty(t, held, "the operator changes no driver without vgpuManager")
}
