package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// recountInterval spaces the cluster-wide recounts (the policy's node
// counts, KubeVirt's permitted devices) that events of thousands of nodes
// would otherwise start one per event: at most one more per interval while
// the events keep coming.
const recountInterval = time.Second

// pacer turns a burst of events into few reconciles of one key: the first
// event of a quiet spell is enqueued at once and opens a window of
// `every`; the events within it are enqueued for the window's end, where
// the workqueue folds them into one reconcile that sees them all.
type pacer struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	next time.Time // the end of the open window
}

func newPacer(every time.Duration) *pacer { return &pacer{every: every, now: time.Now} }

// delay is how long an event arriving now waits.
func (p *pacer) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if now.Before(p.next) {
		return p.next.Sub(now)
	}
	p.next = now.Add(p.every)
	return 0
}

// handler enqueues the requests of fn for every event, paced.
func (p *pacer) handler(fn handler.MapFunc) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		reqs := fn(ctx, o)
		if len(reqs) == 0 {
			return
		}
		d := p.delay()
		for _, req := range reqs {
			if d == 0 {
				q.Add(req)
			} else {
				q.AddAfter(req, d)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}

// policyChangedBesidesStatus passes every event of the policy but the
// updates of its status alone: the policy reconciler's own status writes,
// frequent while nodes change, do not start it again.
func policyChangedBesidesStatus() predicate.Funcs {
	return policyUpdates(func(o, n *v1alpha1.SandboxGPUPolicy) bool {
		om, nm := o.ObjectMeta.DeepCopy(), n.ObjectMeta.DeepCopy()
		om.ResourceVersion, nm.ResourceVersion = "", ""
		om.ManagedFields, nm.ManagedFields = nil, nil
		return o.Generation != n.Generation || !equality.Semantic.DeepEqual(om, nm) || !equality.Semantic.DeepEqual(o.Spec, n.Spec)
	})
}

// policyIntentChanged passes the policy's creation and deletion and the
// updates that change what the node and KubeVirt reconcilers read: its
// spec (a new generation) or its deletion. Status writes, the policy
// reconciler's own and frequent, pass not: each would reconcile every node.
func policyIntentChanged() predicate.Funcs {
	return policyUpdates(func(o, n *v1alpha1.SandboxGPUPolicy) bool {
		return o.Generation != n.Generation || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
	})
}

// policyUpdates passes every event of the policy but the updates that
// changed, given the policy before and after one, answers false for. An
// update whose old or new object is not a policy passes.
func policyUpdates(changed func(o, n *v1alpha1.SandboxGPUPolicy) bool) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.SandboxGPUPolicy)
			n, ok2 := e.ObjectNew.(*v1alpha1.SandboxGPUPolicy)
			if !ok1 || !ok2 {
				return true
			}
			return changed(o, n)
		},
	}
}
