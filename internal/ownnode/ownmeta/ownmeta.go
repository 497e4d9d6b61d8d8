// Package ownmeta is the core of the own-Node door (internal/ownnode): a
// watch of the one Node a daemon runs on (an informer with a field
// selector on its name) and a publisher of one of its annotations, over a
// NodeClient. Metadata is the NodeClient of client-go's metadata client,
// which links no Kubernetes API types (k8s.io/api): the VFIO manager,
// which reads and writes only its Node's annotations, uses it and stays
// small (README, "Performance"). ownnode builds its typed watcher (the
// whole corev1.Node) on the same Watcher.
package ownmeta

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// PatchFunc sends a JSON merge patch of the named Node.
type PatchFunc func(ctx context.Context, node string, patch []byte) error

// NodeClient is how a daemon reaches Nodes: list and watch one by name
// (objects of Example's type), and patch one.
type NodeClient struct {
	ListWatch func(node string) cache.ListerWatcher
	Example   runtime.Object
	Patch     PatchFunc
}

var nodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Metadata is the NodeClient of a metadata client: Nodes as
// *metav1.PartialObjectMetadata (name, labels, annotations, versions).
func Metadata(c metadata.Interface) NodeClient {
	return NodeClient{
		Example: &metav1.PartialObjectMetadata{},
		ListWatch: func(node string) cache.ListerWatcher {
			sel := fields.OneTermEqualSelector("metadata.name", node).String()
			return &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					o.FieldSelector = sel
					return c.Resource(nodes).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					o.FieldSelector = sel
					return c.Resource(nodes).Watch(ctx, o)
				},
			}
		},
		Patch: func(ctx context.Context, node string, patch []byte) error {
			_, err := c.Resource(nodes).Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
}

// Wake says whether a change of the Node wakes the daemon: old is nil when
// the Node appears, cur is nil when it goes.
type Wake func(old, cur metav1.Object) bool

// Watcher follows one Node.
type Watcher struct {
	name string
	inf  cache.SharedIndexInformer
	kick chan struct{}

	mu sync.Mutex
	// lastErr is the last error listing or watching the Node.
	lastErr error
}

// Start starts following the Node name through c until ctx ends and
// returns at once: Synced says when the first list is in, and LastError
// why not yet.
func Start(ctx context.Context, c NodeClient, name string, wake Wake) (*Watcher, error) {
	w := &Watcher{name: name, inf: cache.NewSharedIndexInformer(c.ListWatch(name), c.Example, 0, cache.Indexers{}), kick: make(chan struct{}, 1)}
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(metav1.Object); !ok || wake(nil, n) {
				w.Poke()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(metav1.Object)
			n, ok2 := newObj.(metav1.Object)
			if !ok1 || !ok2 || wake(o, n) {
				w.Poke()
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := obj.(metav1.Object); !ok || wake(n, nil) {
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

// WaitSynced waits for the first list of the Node; false when ctx ended
// first.
func (w *Watcher) WaitSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced)
}

// Synced says whether the first list of the Node is in.
func (w *Watcher) Synced() bool { return w.inf.HasSynced() }

// LastError is the last error listing or watching the Node, naming it (nil
// when there was none): why Synced is still false. (A connection refused
// is retried inside client-go without one.)
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

// Get returns the Node as last seen, of the NodeClient's Example type
// (false when there is none). It is the informer's copy: read only.
func (w *Watcher) Get() (runtime.Object, bool) {
	obj, ok, err := w.inf.GetStore().GetByKey(w.name)
	if err != nil || !ok {
		return nil, false
	}
	o, ok := obj.(runtime.Object)
	return o, ok
}
