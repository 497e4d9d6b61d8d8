package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// step is one checked step of the story: do (when set) acts once, then
// cond must hold before the step's deadline; its last message explains.
type step struct {
	what string
	do   func(context.Context) error
	cond func(context.Context) (bool, string)
}

// steps are the whole story, in order.
func (s *story) steps() []step {
	out := s.setUpSteps()
	out = append(out, s.vgpuSteps()...)
	out = append(out, s.permittedStep(), s.readyStep())
	out = append(out, s.vgpuChangeSteps()...)
	return append(out, s.mixedSteps()...)
}

// node is the Node, nil when it cannot be read.
func (s *story) node(ctx context.Context, name string) *corev1.Node {
	var n corev1.Node
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return nil
	}
	return &n
}

// deployed lists the operands a Node's deploy labels select.
func deployed(n *corev1.Node) []string {
	var out []string
	for l, v := range n.Labels {
		if op, ok := strings.CutPrefix(l, names.DeployPrefix); ok && v == "true" {
			out = append(out, op)
		}
	}
	return slices.Sorted(slices.Values(out))
}

// passthrough are the story's vm-passthrough nodes.
var passthrough = []string{"gpu-a10", "gpu-hgx"}

func (s *story) setUpSteps() []step {
	vm := []string{names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager}
	vgpuOps := []string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager}
	wantOps := map[string][]string{"gpu-a10": vm, "gpu-hgx": vm, vgpuA10: vgpuOps, vgpuL40S: vgpuOps, "gpu-ctr": containerOps}
	return []step{
		{what: "the operator runs one DaemonSet per enabled operand", cond: func(ctx context.Context) (bool, string) {
			var list metav1.PartialObjectMetadataList
			list.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSetList"})
			if err := s.c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
				return false, err.Error()
			}
			var names []string
			for _, d := range list.Items {
				names = append(names, d.Name)
			}
			names = slices.Sorted(slices.Values(names))
			return len(names) >= 4, strings.Join(names, ", ")
		}},
		{what: "each GPU node gets the deploy labels of its workload config; the CPU node none", cond: func(ctx context.Context) (bool, string) {
			var got []string
			for _, n := range nodes {
				nd := s.node(ctx, n.name)
				if nd == nil {
					return false, "node " + n.name + " missing"
				}
				ops := deployed(nd)
				if strings.Join(ops, ",") != strings.Join(wantOps[n.name], ",") {
					return false, fmt.Sprintf("%s: %v, want %v", n.name, ops, wantOps[n.name])
				}
				got = append(got, fmt.Sprintf("%s=%d", n.name, len(ops)))
			}
			return true, strings.Join(got, " ")
		}},
		{what: "the typo in gpu-ctr's label falls back to the default, with a Warning event naming the value", cond: func(ctx context.Context) (bool, string) {
			e, err := s.event(ctx, "gpu-ctr", corev1.EventTypeWarning, "", "vm-passthru")
			if err != nil {
				return false, err.Error()
			}
			if e == nil {
				return false, "no Warning event yet"
			}
			return true, e.Message
		}},
		{what: "the VFIO manager binds every NVIDIA function of the simulated passthrough hosts to vfio-pci", cond: func(ctx context.Context) (bool, string) {
			var got []string
			for _, n := range passthrough {
				if !wire.VFIOIsReady(names.RunPathIn(s.o.WorkDir+"/"+n+"/run", names.VFIOReadyFile)) {
					return false, n + ": VFIO manager not ready"
				}
				got = append(got, n+" ready")
			}
			return true, strings.Join(got, ", ")
		}},
		{what: "the KubeVirt device plugin registers with the kubelet, and the Nodes advertise the GPUs by model", cond: func(ctx context.Context) (bool, string) {
			var got []string
			for _, n := range passthrough {
				nd := s.node(ctx, n)
				if nd == nil || len(agenttest.Allocatable(nd)) == 0 {
					return false, n + ": nothing advertised yet"
				}
				got = append(got, n+": "+strings.Join(agenttest.Allocatable(nd), " "))
			}
			return true, strings.Join(got, "; ")
		}},
	}
}

// event finds an event on a Node of the type (and reason, when set) whose
// message contains text; nil when there is none.
func (s *story) event(ctx context.Context, node, typ, reason, text string) (*corev1.Event, error) {
	evs, err := s.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
	if err != nil {
		return nil, fmt.Errorf("events of node %s: %w", node, err)
	}
	for i := len(evs.Items) - 1; i >= 0; i-- {
		e := &evs.Items[i]
		if e.Type == typ && (reason == "" || e.Reason == reason) && strings.Contains(e.Message, text) {
			return e, nil
		}
	}
	return nil, nil
}

// permitted lists the KubeVirt CR's permittedHostDevices entries: PCI as
// resource(selector), mediated as resource(mdev type name).
func (s *story) permitted(ctx context.Context) (pci, mediated []string, err error) {
	kv := &unstructured.Unstructured{}
	kv.SetAPIVersion("kubevirt.io/v1")
	kv.SetKind("KubeVirt")
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: "kubevirt", Name: "kubevirt"}, kv); err != nil {
		return nil, nil, fmt.Errorf("KubeVirt CR kubevirt/kubevirt: %w", err)
	}
	list := func(field, selector string) []string {
		entries, _, _ := unstructured.NestedSlice(kv.Object, "spec", "configuration", "permittedHostDevices", field)
		var out []string
		for _, e := range entries {
			m, _ := e.(map[string]any)
			out = append(out, fmt.Sprintf("%v(%v)", m["resourceName"], m[selector]))
		}
		return out
	}
	return list("pciHostDevices", "pciVendorSelector"), list("mediatedDevices", "mdevNameSelector"), nil
}

func (s *story) permittedStep() step {
	return step{what: "the KubeVirt CR permits them (published by each node's validator): passthrough GPUs and vGPU VFs as PCI devices, " +
		"the A10's vGPU type as a mediated device, keeping its own entry", cond: func(ctx context.Context) (bool, string) {
		pci, mediated, err := s.permitted(ctx)
		if err != nil {
			return false, err.Error()
		}
		have := "pci: " + strings.Join(pci, " ") + "; mediated: " + strings.Join(mediated, " ")
		for _, n := range append(slices.Clone(passthrough), vgpuA10, vgpuL40S) {
			if nd := s.node(ctx, n); nd == nil || nd.Annotations[names.PermittedAnnotation] == "" {
				return false, n + ": the validator has not published yet; CR: " + have
			}
		}
		for _, want := range []string{"intel.com/xl710(", "nvidia.com/GA102GL_A10(", "nvidia.com/GH100", "nvidia.com/NVIDIA_L40S-24Q("} {
			if !slices.ContainsFunc(pci, func(e string) bool { return strings.HasPrefix(e, want) }) {
				return false, "no PCI entry " + strings.TrimSuffix(want, "(") + "; CR: " + have
			}
		}
		return slices.Contains(mediated, "nvidia.com/NVIDIA_A10-4Q(NVIDIA A10-4Q)"), have
	}}
}

func (s *story) readyStep() step {
	return step{what: "every GPU node is ready; the CPU node has no state object", cond: func(ctx context.Context) (bool, string) {
		var list v1alpha1.SandboxGPUNodeList
		if err := s.c.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, st := range list.Items {
			if st.Name == "cpu-only" {
				return false, "cpu-only has a state object"
			}
			got = append(got, st.Name+"="+st.Status.State)
			if st.Status.State != v1alpha1.StateReady {
				return false, strings.Join(got, " ") + " (" + st.Name + ": " + st.Status.Message + ")"
			}
		}
		return len(list.Items) == len(nodes)-1, strings.Join(got, " ")
	}}
}
