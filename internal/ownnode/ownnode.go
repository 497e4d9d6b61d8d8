// Package ownnode is a node daemon's one door to the Node it runs on,
// through client-go: it watches that Node alone (an informer with a field
// selector on its name: the daemon's RBAC and the API server's load stay
// those of one object), wakes the daemon on the changes it cares about,
// and writes the daemon's own keys (Patch, Publisher). The GPU discovery
// agent, the validator, the vGPU device manager and the VFIO manager use
// it; the clients come from internal/kubeclient.
package ownnode

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Wake says whether a change of the Node wakes the daemon: old is nil when
// the Node appears, cur is nil when it goes.
type Wake func(old, cur *corev1.Node) bool

// Always wakes on every change.
func Always(_, _ *corev1.Node) bool { return true }

// Watcher follows one Node.
type Watcher struct {
	name   string
	client kubernetes.Interface
	inf    cache.SharedIndexInformer
	kick   chan struct{}

	mu sync.Mutex
	// lastErr is the last error listing or watching the Node.
	lastErr error
	// staleRV is the resourceVersion of the Node as seen when the last
	// patch, sent, was sent: until the cache moves past it, it cannot show
	// that patch, which is not sent again meanwhile.
	staleRV, sent string
}

// Watch starts following the Node name until ctx ends and returns once
// its first list is in (nil, nil when ctx ended first).
func Watch(ctx context.Context, c kubernetes.Interface, name string, wake Wake) (*Watcher, error) {
	w, err := Start(ctx, c, name, wake)
	if err != nil {
		return nil, err
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		return nil, nil
	}
	return w, nil
}

// Start starts following the Node name until ctx ends and returns at once:
// Synced says when the first list is in, and LastError why not yet.
func Start(ctx context.Context, c kubernetes.Interface, name string, wake Wake) (*Watcher, error) {
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", name))
	w := &Watcher{name: name, client: c, inf: cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{}), kick: make(chan struct{}, 1)}
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); !ok || wake(nil, n) {
				w.Poke()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || wake(o, n) {
				w.Poke()
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); !ok || wake(n, nil) {
				w.Poke()
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("node %s: watch: %w", name, err)
	}
	if err := w.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, r, err) // logs it, through klog
	}); err != nil {
		return nil, fmt.Errorf("node %s: watch: %w", name, err)
	}
	go w.inf.Run(ctx.Done())
	return w, nil
}

// Synced says whether the first list of the Node is in.
func (w *Watcher) Synced() bool { return w.inf.HasSynced() }

// LastError is the last error listing or watching the Node, naming it (nil
// when there was none): why Synced is still false.
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastErr == nil {
		return nil
	}
	return fmt.Errorf("node %s: watch: %w", w.name, w.lastErr)
}

// Kick receives a signal after a change that wakes the daemon (several
// changes may fold into one).
func (w *Watcher) Kick() <-chan struct{} { return w.kick }

// Poke wakes the daemon as a change would.
func (w *Watcher) Poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Node returns the Node as last seen (false when there is none). It is
// the informer's copy: read only.
func (w *Watcher) Node() (*corev1.Node, bool) {
	obj, ok, err := w.inf.GetStore().GetByKey(w.name)
	if err != nil || !ok {
		return nil, false
	}
	n, ok := obj.(*corev1.Node)
	return n, ok
}

// Patch sends a merge patch of the Node, given the Node as last seen
// (Node()); it reports false without sending when the same patch went last
// against that same version (the watch has not caught up with it yet).
func (w *Watcher) Patch(ctx context.Context, seen *corev1.Node, patch []byte) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if seen.ResourceVersion == w.staleRV && w.sent == string(patch) {
		return false, nil
	}
	if _, err := w.client.CoreV1().Nodes().Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("node %s: patch %s: %w", w.name, patch, err)
	}
	w.staleRV, w.sent = seen.ResourceVersion, string(patch)
	return true, nil
}

// Check says what a daemon following its own Node lacks: the Node's name
// (--node-name, or NODE_NAME from the downward API) or a client. what names
// the daemon in the error.
func Check(what, node string, c kubernetes.Interface) error {
	if node == "" {
		return fmt.Errorf("%s: no node name (set --node-name or NODE_NAME)", what)
	}
	if c == nil {
		return fmt.Errorf("%s: no Kubernetes client", what)
	}
	return nil
}
