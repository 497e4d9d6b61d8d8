package controllers

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// writeCounter counts the operator's API writes by kind.
type writeCounter struct {
	nodePatches, states, statuses, other atomic.Int64
}

func (w *writeCounter) funcs() interceptor.Funcs {
	count := func(obj client.Object) {
		switch obj.(type) {
		case *corev1.Node:
			w.nodePatches.Add(1)
		case *v1alpha1.SandboxGPUNode:
			w.states.Add(1)
		default:
			w.other.Add(1)
		}
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
			w.statuses.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			w.statuses.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

func (w *writeCounter) total() int64 {
	return w.nodePatches.Load() + w.states.Load() + w.statuses.Load() + w.other.Load()
}

// BenchmarkScale5000Nodes: 5,000 GPU nodes with mixed configs in envtest.
// Reports the time until every node has its deploy labels and state, the
// API writes per node (label patches, state creates, status writes), the
// writes of a full resync (target 0) and the Go heap after convergence.
func BenchmarkScale5000Nodes(b *testing.B) {
	if skipReason != "" {
		testutil.MissingPeer(b, "%s", skipReason)
	}
	const nodes = 5000
	c, err := client.New(testCfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		prefix := fmt.Sprintf("scale-%d-", i)
		seedCluster(b, c, prefix, nodes)

		writes := &writeCounter{}
		skip := true
		mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
			Controller: config.Controller{SkipNameValidation: &skip},
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
		nr := &NodeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("bench"), Namespace: operandNS, Requeue: time.Hour}
		if err := nr.SetupWithManager(mgr); err != nil {
			b.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		b.ResetTimer()
		start := time.Now()
		go func() { done <- mgr.Start(mctx) }()
		deadline := time.Now().Add(15 * time.Minute)
		waitConverged(b, c, prefix, nodes, deadline, func() string { return "in process" })
		converge := time.Since(start)
		b.StopTimer()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(converge.Seconds(), "s-to-converge")
		b.ReportMetric(float64(writes.nodePatches.Load())/nodes, "label-writes/node")
		b.ReportMetric(float64(writes.states.Load()+writes.statuses.Load())/nodes, "state-writes/node")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")

		// Resync: every node reconciled again, nothing written.
		before := writes.total()
		recBefore := reconciles(b, "sandbox-gpu-node")
		pol := &v1alpha1.SandboxGPUPolicy{}
		if err := c.Get(ctx, client.ObjectKey{Name: PolicyName}, pol); err != nil {
			b.Fatal(err)
		}
		pol.Annotations = map[string]string{"resync": fmt.Sprint(time.Now().UnixNano())}
		if err := c.Update(ctx, pol); err != nil {
			b.Fatal(err)
		}
		for reconciles(b, "sandbox-gpu-node") < recBefore+nodes {
			if time.Now().After(deadline) {
				b.Fatal("resync did not reach every node")
			}
			tick := time.NewTimer(100 * time.Millisecond)
			<-tick.C
		}
		b.ReportMetric(float64(writes.total()-before), "resync-writes")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
