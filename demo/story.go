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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	"github.com/sandbox-gpu/sandbox-gpu/operator"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
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

// nodes of the story: two passthrough hosts, two vGPU hosts (an A10,
// SR-IOV with a mediated device on each VF, two L40S with SR-IOV
// vendor-specific VFIO) each with
// a vGPU config selected, one node whose label has a typo (it falls back
// to the policy default, container, with a warning), and a node without a
// GPU, which is never touched.
var nodes = []struct {
	name, fixture, config, vgpuConfig string
	gpu                               bool
}{
	{"gpu-a10", "a10", "vm-passthrough", "", true},
	{"gpu-hgx", "hgx-h100", "vm-passthrough", "", true},
	{vgpuA10, "a10-vgpu", "vm-vgpu", "A10-4Q", true},
	{vgpuL40S, "l40s-vgpu", "vm-vgpu", "L40S-24Q", true},
	{"gpu-ctr", "", "vm-passthru", "", true},
	{"cpu-only", "", "", "", false},
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
	s := &story{o: o, log: log, agents: map[string]*agenttest.Agent{}}

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
		a, err := agenttest.New(agenttest.Options{Node: n.name, Fixture: n.fixture, Dir: o.WorkDir + "/" + n.name,
			Namespace: namespace, Client: s.cs, Log: log, Resync: vgpuResync})
		if err != nil {
			return err
		}
		s.agents[n.name] = a
		go a.Run(ctx)
	}
	for _, st := range s.steps() {
		if st.do != nil {
			if err := st.do(ctx); err != nil {
				fmt.Fprintf(s.o.Out, "FAILED %s: %v\n", st.what, err)
				return fmt.Errorf("step %q: %w", st.what, err)
			}
		}
		if err := s.check(ctx, st.what, st.cond); err != nil {
			return err
		}
	}
	return s.table(ctx)
}

type story struct {
	o      Options
	log    logr.Logger
	c      client.Client
	cs     kubernetes.Interface
	agents map[string]*agenttest.Agent // by node
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
		vgpuLabel := ""
		if n.vgpuConfig != "" {
			labels[names.VGPUConfigLabel] = n.vgpuConfig
			vgpuLabel = fmt.Sprintf(" %s=%q", names.VGPUConfigLabel, n.vgpuConfig)
		}
		if err := s.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels}}); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		s.say("Node %-9s %s=%q%s, simulated host %q", n.name, names.WorkloadConfigLabel, n.config, vgpuLabel, n.fixture)
	}
	return nil
}

// table ends the story with each node's workload config, state and
// allocatable GPU resources.
func (s *story) table(ctx context.Context) error {
	var list v1alpha1.SandboxGPUNodeList
	if err := s.c.List(ctx, &list); err != nil {
		return fmt.Errorf("SandboxGPUNodes: %w", err)
	}
	byName := map[string]v1alpha1.SandboxGPUNode{}
	for _, st := range list.Items {
		byName[st.Name] = st
	}
	fmt.Fprintln(s.o.Out)
	w := tabwriter.NewWriter(s.o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tWORKLOAD CONFIG\tSTATE\tGPUS\tVFIO\tVGPUS\tVGPU CONFIG\tALLOCATABLE GPU RESOURCES")
	for _, n := range nodes {
		var nd corev1.Node
		if err := s.c.Get(ctx, client.ObjectKey{Name: n.name}, &nd); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		st, ok := byName[n.name]
		config, state, gpus, vfioN, vgpus := "-", "-", "-", "-", "-"
		if ok {
			config, state = st.Status.WorkloadConfig, st.Status.State
			gpus, vfioN, vgpus = fmt.Sprint(st.Status.GPUs), fmt.Sprint(st.Status.BoundToVFIO), fmt.Sprint(st.Status.VGPUs)
		}
		vgpuConfig := "-" // the selected config and the manager's state
		if c, ok := nd.Labels[names.VGPUConfigLabel]; ok {
			vgpuConfig = c + "=" + nd.Labels[names.VGPUConfigStateLabel]
		}
		res := strings.Join(agenttest.Allocatable(&nd), " ")
		if res == "" {
			res = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.name, config, state, gpus, vfioN, vgpus, vgpuConfig, res)
	}
	return errors.Join(w.Flush())
}
