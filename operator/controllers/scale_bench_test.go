package controllers

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// writeCounter counts the operator's API writes by kind, and its events.
type writeCounter struct {
	nodePatches, states, statuses, policy, other, events atomic.Int64
}

func (w *writeCounter) funcs() interceptor.Funcs {
	count := func(obj client.Object) {
		switch obj.(type) {
		case *corev1.Node:
			w.nodePatches.Add(1)
		case *v1alpha1.SandboxGPUNode:
			w.states.Add(1)
		case *v1alpha1.SandboxGPUPolicy:
			w.policy.Add(1)
		default:
			w.other.Add(1)
		}
	}
	status := func(obj client.Object) {
		if _, ok := obj.(*v1alpha1.SandboxGPUPolicy); ok {
			w.policy.Add(1)
			return
		}
		w.statuses.Add(1)
	}
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count(obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count(obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			count(obj)
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count(obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			status(obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			status(obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// writeCounts are counts of writes by kind.
type writeCounts struct{ NodePatches, States, Statuses, Policy, Other, Events int64 }

func (w *writeCounter) snapshot() writeCounts {
	return writeCounts{w.nodePatches.Load(), w.states.Load(), w.statuses.Load(), w.policy.Load(), w.other.Load(), w.events.Load()}
}

func (w writeCounts) total() int64 {
	return w.NodePatches + w.States + w.Statuses + w.Policy + w.Other + w.Events
}

func (w writeCounts) minus(o writeCounts) writeCounts {
	return writeCounts{w.NodePatches - o.NodePatches, w.States - o.States, w.Statuses - o.Statuses, w.Policy - o.Policy, w.Other - o.Other, w.Events - o.Events}
}

// countingRecorder counts the events the operator records (each one an
// API write of the event broadcaster).
type countingRecorder struct {
	events.EventRecorder
	n *atomic.Int64
}

func (r countingRecorder) Eventf(regarding, related kruntime.Object, eventtype, reason, action, note string, args ...any) {
	r.n.Add(1)
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// scaleNodes is the node count of the scale benchmark: 5,000, or
// SANDBOX_GPU_SCALE_NODES (to profile a smaller cluster first).
func scaleNodes(b *testing.B) int {
	v := os.Getenv("SANDBOX_GPU_SCALE_NODES")
	if v == "" {
		return 5000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("SANDBOX_GPU_SCALE_NODES=%q: want a positive number", v)
	}
	return n
}

// BenchmarkScale5000Nodes: 5,000 GPU nodes with mixed configs in envtest,
// under the operator's three reconcilers with its cache and client limits.
// Reports the time until every node has its deploy labels and state, the
// API writes per node (label patches, state creates, status writes,
// events) and of the policy, the CPU seconds of the operator's process
// (this one), the kube-apiserver and etcd until then, and the Go heap
// after convergence; then it touches the policy, which reconciles every
// node again, and fails unless that resync writes nothing.
// SANDBOX_GPU_SCALE_NODES sets another node count;
// SANDBOX_GPU_SCALE_APISERVER_PROFILE=FILE writes a CPU profile of the
// kube-apiserver during convergence (the first 30 s, or
// SANDBOX_GPU_SCALE_PROFILE_SECONDS).
func BenchmarkScale5000Nodes(b *testing.B) {
	if skipReason != "" {
		testutil.MissingPeer(b, "%s", skipReason)
	}
	nodes := scaleNodes(b)
	c, err := client.New(testCfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		prefix := fmt.Sprintf("scale-%d-", i)
		seedCluster(b, c, prefix, nodes)

		writes := &writeCounter{}
		mgr := scaleManager(b, writes)
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		b.ResetTimer()
		cpu, reqs := readCPU(b), apiRequests(b)
		profiled := profileAPIServer(b)
		start := time.Now()
		go func() { done <- mgr.Start(mctx) }()
		deadline := time.Now().Add(time.Duration(nodes) * 180 * time.Millisecond) // 15 minutes for 5,000
		waitConverged(b, prefix, nodes, deadline, func() string { return unconverged(c, prefix) })
		converge := time.Since(start)
		b.StopTimer()
		waitPolicyCounted(b, c, nodes, deadline)
		counted := time.Since(start)
		used := readCPU(b)
		for _, r := range slices.Sorted(maps.Keys(apiRequests(b))) {
			if d := apiRequests(b)[r] - reqs[r]; d >= float64(nodes)/10 {
				b.Logf("API requests %s: %.0f (%.2f per node)", r, d, d/float64(nodes))
			}
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(converge.Seconds(), "s-to-converge")
		b.ReportMetric(counted.Seconds(), "s-to-policy-status")
		perNode := func(v int64) float64 { return float64(v) / float64(nodes) }
		w := writes.snapshot()
		b.ReportMetric(perNode(w.NodePatches), "label-writes/node")
		b.ReportMetric(perNode(w.States+w.Statuses), "state-writes/node")
		b.ReportMetric(perNode(w.Events), "events/node")
		b.ReportMetric(perNode(w.total()), "writes/node")
		b.ReportMetric(float64(w.Policy), "policy-writes")
		b.Logf("%d nodes converged in %s, counted in the policy's status after %s; writes %+v", nodes,
			converge.Round(time.Millisecond), counted.Round(time.Millisecond), w)
		for _, p := range []string{"operator", "kube-apiserver", "etcd"} {
			b.ReportMetric(used[p]-cpu[p], p+"-cpu-s")
			b.Logf("%s: %.1f CPU seconds", p, used[p]-cpu[p])
		}
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		<-profiled

		// Steady state: an operator restarted on the converged cluster
		// reconciles every node again (as a resync does) and writes nothing.
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		before := writes.snapshot()
		recBefore := reconciles(b, nodeControllerName)
		polBefore := reconciles(b, policyControllerName)
		mgr = scaleManager(b, writes)
		mctx, cancel = context.WithCancel(ctx)
		go func() { done <- mgr.Start(mctx) }()
		for reconciles(b, nodeControllerName) < recBefore+float64(nodes) || reconciles(b, policyControllerName) == polBefore {
			if time.Now().After(deadline) {
				b.Fatal("the restarted operator did not reconcile every node")
			}
			tick := time.NewTimer(100 * time.Millisecond)
			<-tick.C
		}
		resync := writes.snapshot().minus(before)
		b.ReportMetric(float64(resync.total()), "resync-writes")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if resync.total() != 0 {
			b.Fatalf("a resync of converged nodes wrote %d times (%+v); want 0", resync.total(), resync)
		}
	}
}

// unconverged describes the nodes named with prefix that have no applied
// config yet.
func unconverged(c client.Client, prefix string) string {
	ctx := context.Background()
	var nodes corev1.NodeList
	var states v1alpha1.SandboxGPUNodeList
	if err := c.List(ctx, &nodes); err != nil {
		return err.Error()
	}
	if err := c.List(ctx, &states); err != nil {
		return err.Error()
	}
	byName := map[string]*v1alpha1.SandboxGPUNode{}
	for i := range states.Items {
		byName[states.Items[i].Name] = &states.Items[i]
	}
	var out []string
	missing := 0
	for _, n := range nodes.Items {
		st := byName[n.Name]
		switch {
		case !strings.HasPrefix(n.Name, prefix) || (st != nil && st.Status.AppliedConfig != ""):
			continue
		case st == nil:
			missing++
			if missing <= 5 {
				out = append(out, fmt.Sprintf("%s: no state (labels %v)", n.Name, n.Labels))
			}
		case len(out) < 10:
			out = append(out, fmt.Sprintf("%s: state rv %s status %+v (node rv %s, labels %v)", n.Name, st.ResourceVersion, st.Status, n.ResourceVersion, n.Labels))
		}
	}
	return fmt.Sprintf("%d nodes without a state; %s", missing, strings.Join(out, "; "))
}

// waitPolicyCounted waits until the policy's status counts n nodes (the
// operator has nothing left to do).
func waitPolicyCounted(b *testing.B, c client.Client, n int, deadline time.Time) {
	b.Helper()
	for {
		var p v1alpha1.SandboxGPUPolicy
		if err := c.Get(context.Background(), client.ObjectKey{Name: PolicyName}, &p); err != nil {
			b.Fatal(err)
		}
		if c := p.Status.Nodes; int(c.Container+c.VMPassthrough+c.VMVGPU) >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the policy's status counts %+v, not %d nodes", p.Status.Nodes, n)
		}
		tick := time.NewTimer(100 * time.Millisecond)
		<-tick.C
	}
}

// scaleManager is the operator as sandbox-gpu-operator runs it (its
// cache, its default client limits, its three reconcilers), counting its
// writes.
func scaleManager(b *testing.B, writes *writeCounter) ctrl.Manager {
	b.Helper()
	cfg := rest.CopyConfig(testCfg)
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
		Cache:      CacheOptions(operandNS),
		NewClient: func(cfg *rest.Config, o client.Options) (client.Client, error) {
			inner, err := client.NewWithWatch(cfg, o)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(inner, writes.funcs()), nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	rec := countingRecorder{EventRecorder: mgr.GetEventRecorder("bench"), n: &writes.events}
	nr := &NodeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec, Namespace: operandNS, Requeue: time.Hour, Metrics: m}
	if err := nr.SetupWithManager(mgr); err != nil {
		b.Fatal(err)
	}
	pr := &PolicyReconciler{Client: mgr.GetClient(), Operands: operands.Options{Namespace: operandNS, Registry: "example.com", Version: "test"}, Metrics: m}
	if err := pr.SetupWithManager(mgr); err != nil {
		b.Fatal(err)
	}
	kv := &KubeVirtReconciler{Client: mgr.GetClient(), Metrics: m}
	if err := kv.SetupWithManager(mgr); err != nil {
		b.Fatal(err)
	}
	return mgr
}

// apiRequests reads the kube-apiserver's request counts by verb and
// resource (apiserver_request_total, all clients).
func apiRequests(b *testing.B) map[string]float64 {
	b.Helper()
	data, err := rawClient(b).Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		labels, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(labels, '}')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(labels[i+1:]), 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels[:i], ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				l[k] = strings.Trim(val, `"`)
			}
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

// rawClient is a REST client of the API server's own paths.
func rawClient(b *testing.B) *rest.RESTClient {
	b.Helper()
	cfg := rest.CopyConfig(testCfg)
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return rc
}

// profileAPIServer writes a CPU profile of the kube-apiserver to
// $SANDBOX_GPU_SCALE_APISERVER_PROFILE, if set, in the background; the
// channel closes when it is written.
func profileAPIServer(b *testing.B) <-chan struct{} {
	done := make(chan struct{})
	path := os.Getenv("SANDBOX_GPU_SCALE_APISERVER_PROFILE")
	if path == "" {
		close(done)
		return done
	}
	seconds := os.Getenv("SANDBOX_GPU_SCALE_PROFILE_SECONDS")
	if seconds == "" {
		seconds = "30"
	}
	rc := rawClient(b)
	go func() {
		defer close(done)
		data, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).Timeout(10 * time.Minute).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			b.Errorf("kube-apiserver profile: %v", err)
		}
	}()
	return done
}
