package helm

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

func monitoringKinds(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, k := range []string{"Service", "ServiceMonitor", "PodMonitor"} {
		if n := len(byKind(objs, k)); n > 0 {
			out[k] = n
		}
	}
	return out
}

// The monitoring objects are off by default and each comes with its value;
// they are dry-run against the Prometheus Operator's real CRDs
// (testdata/monitoring-crds), and they select what the operator and the
// operands really expose.
func TestMonitoringObjects(t *testing.T) {
	requireEnv(t)
	for sets, want := range map[string]map[string]int{
		"":                                    {},
		"metrics.service.enabled=true":        {"Service": 1},
		"metrics.serviceMonitor.enabled=true": {"Service": 1, "ServiceMonitor": 1},
		"metrics.podMonitor.enabled=true":     {"PodMonitor": 1},
	} {
		var objs []*unstructured.Unstructured
		if sets == "" {
			objs = mustRender(t)
		} else {
			objs = mustRender(t, sets)
		}
		if got := monitoringKinds(objs); !reflect.DeepEqual(got, want) {
			t.Errorf("%q renders %v, want %v", sets, got, want)
		}
	}

	objs := mustRender(t, "metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true",
		"metrics.serviceMonitor.additionalLabels.release=kube-prometheus-stack", "metrics.podMonitor.interval=15s")
	mustDryRunAll(t, objs)

	// Service -> the operator pod's port "metrics".
	svc := byKind(objs, "Service")[0]
	_, c := operatorContainer(t, objs)
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	dep := byKind(objs, "Deployment")[0]
	podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	if !subset(sel, podLabels) {
		t.Errorf("Service selector %v does not select the operator pod %v", sel, podLabels)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	target, _, _ := unstructured.NestedString(ports[0].(map[string]interface{}), "targetPort")
	if len(c.Ports) != 1 || c.Ports[0].Name != target || c.Ports[0].ContainerPort != names.OperatorPort {
		t.Errorf("Service targets port %q; the operator exposes %v (want metrics on %d, its --health-addr)", target, c.Ports, names.OperatorPort)
	}
	if c.ReadinessProbe.HTTPGet.Port.IntValue() != names.OperatorPort || c.LivenessProbe.HTTPGet.Port.IntValue() != names.OperatorPort {
		t.Errorf("probes not on the operator's listener: %v %v", c.ReadinessProbe, c.LivenessProbe)
	}

	// ServiceMonitor -> that Service, its port by name.
	sm := byKind(objs, "ServiceMonitor")[0]
	smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if !subset(smSel, svc.GetLabels()) {
		t.Errorf("ServiceMonitor selector %v does not select the Service %v", smSel, svc.GetLabels())
	}
	if sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack the additional label", sm.GetLabels())
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if port, _, _ := unstructured.NestedString(eps[0].(map[string]interface{}), "port"); port != "metrics" {
		t.Errorf("ServiceMonitor endpoint port %q", port)
	}

	// PodMonitor -> every operand pod the operator builds, port "metrics".
	pm := byKind(objs, "PodMonitor")[0]
	pmSel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	pmEps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	port, _, _ := unstructured.NestedString(pmEps[0].(map[string]interface{}), "port")
	interval, _, _ := unstructured.NestedString(pmEps[0].(map[string]interface{}), "interval")
	if port != operands.MetricsPortName || interval != "15s" {
		t.Errorf("PodMonitor endpoint port %q interval %q", port, interval)
	}
	if pm.GetNamespace() != releaseNamespace {
		t.Errorf("PodMonitor in %q, want the operand namespace %q", pm.GetNamespace(), releaseNamespace)
	}
	for _, op := range operands.Names() {
		if op == names.VGPUManager || op == names.VGPUDeviceManager || op == names.NVIDIADevicePlugin {
			// NVIDIA's images (the vGPU host driver, the device plugin)
			// have no metrics port of ours; the vGPU device manager has no
			// listener yet (no cmd/vgpu-device-manager).
			continue
		}
		ds, err := operands.Build(op, &v1alpha1.SandboxGPUPolicySpec{}, operands.Options{Namespace: releaseNamespace, Registry: "r", Version: "v"})
		if err != nil {
			t.Fatal(err)
		}
		if !subset(pmSel, ds.Spec.Template.Labels) {
			t.Errorf("PodMonitor selector %v misses %s's pods %v", pmSel, op, ds.Spec.Template.Labels)
		}
		named := false
		for _, p := range ds.Spec.Template.Spec.Containers[0].Ports {
			named = named || p.Name == port
		}
		// A host-network operand (the VFIO manager and its release) listens
		// on the node's loopback only: it names no port to scrape, so the
		// PodMonitor makes no target on the node's address.
		if hostNet := ds.Spec.Template.Spec.HostNetwork; named == hostNet {
			t.Errorf("%s (host network %v) has a port %q to scrape: %v, want %v", op, hostNet, port, named, !hostNet)
		}
	}
	if subset(pmSel, podLabels) {
		t.Errorf("PodMonitor selector %v also selects the operator pod (the ServiceMonitor scrapes it)", pmSel)
	}
}

// subset reports whether every key of sel is in labels with the same value
// (a label selector's matchLabels).
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
