// Package demo tells the product's story end to end without a cluster or a
// GPU: a real kube-apiserver and etcd (envtest), the operator, and per GPU
// node the real VFIO manager, KubeVirt device plugin and validator running
// in process on simulated hosts, with a stand-in kubelet that takes the
// plugin's registration and reports its devices in the Node's status.
// Every step is checked; Run fails on the first that does not hold.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/operator"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// Options configure the demo.
type Options struct {
	// Assets holds kube-apiserver and etcd (hack/envtest-assets.sh).
	Assets string
	// CRDDirs hold the product's CRDs and a KubeVirt CRD.
	CRDDirs []string
	// PolicyFile is the SandboxGPUPolicy to apply (manifests/samples/policy.yaml).
	PolicyFile string
	// WorkDir holds the simulated hosts and the component log (demo.log).
	WorkDir string
	// StepTimeout bounds each step (default 60s).
	StepTimeout time.Duration
	Out         io.Writer
}

const namespace = "sandbox-gpu"

// nodes of the story: two passthrough hosts, one node whose label has a
// typo (it falls back to the policy default, container, with a warning),
// and a node without a GPU, which is never touched.
var nodes = []struct {
	name, fixture, config string
	gpu                   bool
}{
	{"gpu-a10", "a10", "vm-passthrough", true},
	{"gpu-hgx", "hgx-h100", "vm-passthrough", true},
	{"gpu-ctr", "", "vm-passthru", true},
	{"cpu-only", "", "", false},
}

// Run tells the story; it returns an error naming the first step that did
// not hold.
func Run(ctx context.Context, o Options) error {
	if o.StepTimeout <= 0 {
		o.StepTimeout = 60 * time.Second
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(o.WorkDir + "/demo.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := logr.FromSlogHandler(slog.NewJSONHandler(logFile, nil))
	ctrl.SetLogger(log)
	s := &story{o: o, log: log}

	s.say("Starting kube-apiserver and etcd (envtest, %s)", o.Assets)
	env := &envtest.Environment{BinaryAssetsDirectory: o.Assets, CRDDirectoryPaths: o.CRDDirs, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("envtest: %w", err)
	}
	defer func() { _ = env.Stop() }()
	scheme, err := operator.Scheme()
	if err != nil {
		return err
	}
	if s.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if s.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := s.setUp(ctx); err != nil {
		return err
	}
	mgr, err := operator.NewManager(cfg, operator.Options{Namespace: namespace, Registry: "ghcr.io/sandbox-gpu", Version: "v0.1.0",
		MetricsAddr: "0", HealthAddr: "0"})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	s.say("Operator started")
	for _, n := range nodes {
		if !n.gpu {
			continue
		}
		a, err := newAgent(n.name, n.fixture, o.WorkDir+"/"+n.name, namespace, s.cs, log)
		if err != nil {
			return err
		}
		go a.run(ctx)
	}
	for _, st := range s.steps() {
		if err := s.check(ctx, st.what, st.cond); err != nil {
			return err
		}
	}
	return s.table(ctx)
}

type story struct {
	o   Options
	log logr.Logger
	c   client.Client
	cs  kubernetes.Interface
}

func (s *story) say(format string, args ...any) { fmt.Fprintf(s.o.Out, "   "+format+"\n", args...) }

// check polls cond until it holds or the step times out; cond's last
// message explains a failure.
func (s *story) check(ctx context.Context, what string, cond func(context.Context) (bool, string)) error {
	deadline := time.Now().Add(s.o.StepTimeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := cond(ctx)
		if ok {
			fmt.Fprintf(s.o.Out, "ok %s%s\n", what, suffix(detail))
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(s.o.Out, "FAILED %s%s\n", what, suffix(detail))
			return fmt.Errorf("step %q did not hold within %s: %s (component log: %s/demo.log)", what, s.o.StepTimeout, detail, s.o.WorkDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return ": " + detail
}

// setUp creates the namespace, a KubeVirt CR with an entry of its own, the
// policy and the nodes.
func (s *story) setUp(ctx context.Context) error {
	for _, ns := range []string{namespace, "kubevirt"} {
		if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	kv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": "kubevirt"},
		"spec": map[string]any{"configuration": map[string]any{"permittedHostDevices": map[string]any{
			"pciHostDevices": []any{map[string]any{"pciVendorSelector": "8086:1572", "resourceName": "intel.com/xl710"}}}}},
	}}
	if err := s.c.Create(ctx, kv); err != nil {
		return fmt.Errorf("KubeVirt CR: %w", err)
	}
	b, err := os.ReadFile(s.o.PolicyFile)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	var p v1alpha1.SandboxGPUPolicy
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return fmt.Errorf("policy %s: %w", s.o.PolicyFile, err)
	}
	if err := s.c.Create(ctx, &p); err != nil {
		return fmt.Errorf("policy %s: %w", s.o.PolicyFile, err)
	}
	s.say("Applied %s: sandbox workloads %s, default %s", s.o.PolicyFile, p.Spec.SandboxWorkloads.Mode, p.Spec.SandboxWorkloads.DefaultWorkload)
	for _, n := range nodes {
		labels := map[string]string{}
		if n.gpu {
			labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
		}
		if n.config != "" {
			labels[names.WorkloadConfigLabel] = n.config
		}
		if err := s.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}); err != nil {
			return err
		}
		s.say("Node %-9s %s=%q, simulated host %q", n.name, names.WorkloadConfigLabel, n.config, n.fixture)
	}
	return nil
}

type step struct {
	what string
	cond func(context.Context) (bool, string)
}

func (s *story) steps() []step {
	node := func(ctx context.Context, name string) *corev1.Node {
		var n corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return nil
		}
		return &n
	}
	deployed := func(n *corev1.Node) []string {
		var out []string
		for l, v := range n.Labels {
			if op, ok := strings.CutPrefix(l, names.DeployPrefix); ok && v == "true" {
				out = append(out, op)
			}
		}
		return slices.Sorted(slices.Values(out))
	}
	wantOps := map[string][]string{
		"gpu-a10": {names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager},
		"gpu-hgx": {names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager},
		"gpu-ctr": {names.NRIPlugin},
	}
	return []step{
		{"the operator runs one DaemonSet per enabled operand", func(ctx context.Context) (bool, string) {
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
		{"each GPU node gets the deploy labels of its workload config; the CPU node none", func(ctx context.Context) (bool, string) {
			var got []string
			for _, n := range nodes {
				nd := node(ctx, n.name)
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
		{"the typo in gpu-ctr's label falls back to the default, with a Warning event naming the value", func(ctx context.Context) (bool, string) {
			evs, err := s.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=gpu-ctr"})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "vm-passthru") {
					return true, e.Message
				}
			}
			return false, "no Warning event yet"
		}},
		{"the VFIO manager binds every NVIDIA function of the simulated hosts to vfio-pci", func(ctx context.Context) (bool, string) {
			var got []string
			for _, n := range []string{"gpu-a10", "gpu-hgx"} {
				if !vfio.IsReady(s.o.WorkDir + "/" + n + "/run/vfio-manager.ready") {
					return false, n + ": VFIO manager not ready"
				}
				got = append(got, n+" ready")
			}
			return true, strings.Join(got, ", ")
		}},
		{"the KubeVirt device plugin registers with the kubelet, and the Nodes advertise the GPUs by model", func(ctx context.Context) (bool, string) {
			var got []string
			for _, n := range []string{"gpu-a10", "gpu-hgx"} {
				nd := node(ctx, n)
				if nd == nil || len(gpuResources(nd)) == 0 {
					return false, n + ": nothing advertised yet"
				}
				got = append(got, n+": "+strings.Join(gpuResources(nd), " "))
			}
			return true, strings.Join(got, "; ")
		}},
		{"the KubeVirt CR permits them (published by each node's validator), keeping its own entry", func(ctx context.Context) (bool, string) {
			kv := &unstructured.Unstructured{}
			kv.SetAPIVersion("kubevirt.io/v1")
			kv.SetKind("KubeVirt")
			if err := s.c.Get(ctx, client.ObjectKey{Namespace: "kubevirt", Name: "kubevirt"}, kv); err != nil {
				return false, err.Error()
			}
			entries, _, _ := unstructured.NestedSlice(kv.Object, "spec", "configuration", "permittedHostDevices", "pciHostDevices")
			var entryNames []string
			for _, e := range entries {
				m, _ := e.(map[string]any)
				entryNames = append(entryNames, fmt.Sprintf("%v(%v)", m["resourceName"], m["pciVendorSelector"]))
			}
			have := strings.Join(entryNames, " ")
			for _, n := range []string{"gpu-a10", "gpu-hgx"} {
				if nd := node(ctx, n); nd == nil || nd.Annotations[names.PermittedAnnotation] == "" {
					return false, n + ": the validator has not published yet; CR: " + have
				}
			}
			ok := strings.Contains(have, "intel.com/xl710") && strings.Contains(have, "nvidia.com/GA102GL_A10") && strings.Contains(have, "nvidia.com/GH100")
			return ok, have
		}},
		{"every GPU node is ready; the CPU node has no state object", func(ctx context.Context) (bool, string) {
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
			return len(list.Items) == 3, strings.Join(got, " ")
		}},
	}
}

// table ends the story with each node's workload config, state and
// allocatable GPU resources.
func (s *story) table(ctx context.Context) error {
	var list v1alpha1.SandboxGPUNodeList
	if err := s.c.List(ctx, &list); err != nil {
		return err
	}
	byName := map[string]v1alpha1.SandboxGPUNode{}
	for _, st := range list.Items {
		byName[st.Name] = st
	}
	fmt.Fprintln(s.o.Out)
	w := tabwriter.NewWriter(s.o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tWORKLOAD CONFIG\tSTATE\tGPUS\tVFIO\tALLOCATABLE GPU RESOURCES")
	for _, n := range nodes {
		var nd corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: n.name}, &nd); err != nil {
			return err
		}
		st, ok := byName[n.name]
		config, state, gpus, vfioN := "-", "-", "-", "-"
		if ok {
			config, state = st.Status.WorkloadConfig, st.Status.State
			gpus, vfioN = fmt.Sprint(st.Status.GPUs), fmt.Sprint(st.Status.BoundToVFIO)
		}
		res := strings.Join(gpuResources(&nd), " ")
		if res == "" {
			res = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.name, config, state, gpus, vfioN, res)
	}
	return errors.Join(w.Flush())
}
