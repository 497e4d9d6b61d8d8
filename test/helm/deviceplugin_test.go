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
