package helm

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// devicePlugin.* reaches the policy's spec.devicePlugin: on by default with
// NVIDIA's image (no image in the policy: the operator's default) and the
// host driver's root; enabled=false for clusters where the GPU Operator's
// container stack runs NVIDIA's device plugin; a whole image or GPU
// Operator style repository/image/version; a driver root that is not an
// absolute path is refused by the API server.
func TestDevicePluginValues(t *testing.T) {
	requireEnv(t)
	p := policy(t, mustRender(t))
	wantSpec(t, p, map[string]interface{}{"devicePlugin.enabled": true, "devicePlugin.driverRoot": "/"})
	if img, found, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "devicePlugin", "image"); found {
		t.Errorf("devicePlugin.image = %v by default, want none (NVIDIA's image, the operator's default)", img)
	}
	p = policy(t, mustRender(t, "devicePlugin.enabled=false", "devicePlugin.driverRoot=/run/nvidia/driver",
		"devicePlugin.repository=registry.example/nvidia", "devicePlugin.image=k8s-device-plugin", "devicePlugin.version=v0.17.4"))
	wantSpec(t, p, map[string]interface{}{"devicePlugin.enabled": false, "devicePlugin.driverRoot": "/run/nvidia/driver",
		"devicePlugin.image": "registry.example/nvidia/k8s-device-plugin:v0.17.4"})
	if err := dryRun(t.Context(), p); err != nil {
		t.Error(err)
	}
	err := dryRun(t.Context(), policy(t, mustRender(t, "devicePlugin.driverRoot=run/nvidia/driver")))
	if err == nil || !strings.Contains(err.Error(), "spec.devicePlugin.driverRoot") {
		t.Errorf("a relative driver root: %v, want a refusal naming spec.devicePlugin.driverRoot", err)
	}
}

// Every operand's image, NVIDIA's included, can be pinned by digest: digest
// wins over version (<repository>/<image>@<digest>); a digest alone pins the
// default image (NVIDIA's nvcr.io/nvidia/k8s-device-plugin, or ours under
// operator.repository); the vGPU host driver's digest reaches the policy's
// spec.vgpuManager.digest. Any other form of digest is refused at install,
// and the API server refuses a malformed spec.vgpuManager.digest too.
func TestImagesByDigest(t *testing.T) {
	requireEnv(t)
	d1, d2 := "sha256:"+strings.Repeat("0a", 32), "sha256:"+strings.Repeat("b1", 32)
	p := policy(t, mustRender(t, "devicePlugin.digest="+d1,
		"nriPlugin.repository=registry.example/mirror", "nriPlugin.image=nri-gpu-plugin", "nriPlugin.version=v9", "nriPlugin.digest="+d2,
		"validator.image=registry.example/validator:v1", "validator.digest="+d2,
		"vfioManager.digest="+d1,
		"sandboxWorkloads.enabled=true", "vgpuManager.enabled=true", "vgpuManager.repository=nvcr.io/example-org/vgpu",
		"vgpuManager.digest="+d2))
	wantSpec(t, p, map[string]interface{}{
		"devicePlugin.image":     "nvcr.io/nvidia/k8s-device-plugin@" + d1,
		"nriPlugin.image":        "registry.example/mirror/nri-gpu-plugin@" + d2, // not :v9
		"validator.image":        "registry.example/validator:v1@" + d2,
		"vfioManager.image":      "ghcr.io/sandbox-gpu/vfio-manager@" + d1,
		"vgpuManager.image":      "vgpu-manager",
		"vgpuManager.digest":     d2,
		"vgpuManager.enabled":    true,
		"vgpuManager.repository": "nvcr.io/example-org/vgpu",
	})
	if err := dryRun(t.Context(), p); err != nil {
		t.Errorf("a policy with digests and a vGPU host driver without version: %v", err)
	}
	for _, bad := range []string{"devicePlugin.digest=sha256:abc", "vfioManager.digest=" + strings.ToUpper(d1), "nriPlugin.digest=v0.18.2"} {
		if _, err := render(bad); err == nil || !strings.Contains(err.Error(), strings.Split(bad, "=")[0]+" ") {
			t.Errorf("%s: render error %v, want one naming the value", bad, err)
		}
	}
	bad := policy(t, mustRender(t))
	if err := unstructured.SetNestedField(bad.Object, "sha256:abc", "spec", "vgpuManager", "digest"); err != nil {
		t.Fatal(err)
	}
	if err := dryRun(t.Context(), bad); err == nil || !strings.Contains(err.Error(), "spec.vgpuManager.digest") {
		t.Errorf("a short spec.vgpuManager.digest: %v, want a refusal naming it", err)
	}
}
