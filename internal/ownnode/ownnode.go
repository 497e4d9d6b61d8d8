// Package ownnode is a node daemon's one door to the Node it runs on,
// through client-go: it watches that Node alone (an informer with a field
// selector on its name: the daemon's RBAC and the API server's load stay
// those of one object), wakes the daemon on the changes it cares about,
// and writes the daemon's own keys (Patch, ownmeta.Publisher). The GPU
// discovery agent, the validator and the vGPU device manager use it with
// the typed client (the whole corev1.Node); the VFIO manager, which needs
// only its Node's annotations, uses its core, ownmeta, with the metadata
// client. The client config comes from internal/kubeclient.
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

	"github.com/sandbox-gpu/sandbox-gpu/internal/kubeclient"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode/ownmeta"
)

// Wake says whether a change of the Node wakes the daemon: old is nil when
// the Node appears, cur is nil when it goes.
type Wake func(old, cur *corev1.Node) bool

// Always wakes on every change.
func Always(_, _ *corev1.Node) bool { return true }

// Clientset is a typed client from kubeclient.Config(path).
func Clientset(path string) (kubernetes.Interface, error) {
	cfg, err := kubeclient.Config(path)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cs, nil
}

// Typed is the ownmeta.NodeClient of a typed client: Nodes as *corev1.Node.
func Typed(c kubernetes.Interface) ownmeta.NodeClient {
	return ownmeta.NodeClient{
		Example: &corev1.Node{},
		ListWatch: func(node string) cache.ListerWatcher {
			return cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", node))
		},
		Patch: func(ctx context.Context, node string, patch []byte) error {
			_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
}

// Watcher follows one Node (Kick, Poke, Synced and LastError are its
// ownmeta.Watcher's).
type Watcher struct {
	*ownmeta.Watcher
	name   string
	client kubernetes.Interface

	mu sync.Mutex
	// staleRV is the resourceVersion of the Node as seen when the last
	// patch, sent, was sent: until the cache moves past it, it cannot show
	// that patch, which is not sent again meanwhile.
	staleRV, sent string
}

// Watch starts following the Node name until ctx ends and returns once
// its first list is in (nil, nil when ctx ended first).
func Watch(ctx context.Context, c kubernetes.Interface, name string, wake Wake) (*Watcher, error) {
	core, err := ownmeta.Start(ctx, Typed(c), name, func(old, cur metav1.Object) bool {
		o, _ := old.(*corev1.Node)
		n, _ := cur.(*corev1.Node)
		return wake(o, n)
	})
	if err != nil {
		return nil, err
	}
	if !core.WaitSynced(ctx) {
		return nil, nil
	}
	return &Watcher{Watcher: core, name: name, client: c}, nil
}

// Node returns the Node as last seen (false when there is none). It is
// the informer's copy: read only.
func (w *Watcher) Node() (*corev1.Node, bool) {
	obj, ok := w.Get()
	if !ok {
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
