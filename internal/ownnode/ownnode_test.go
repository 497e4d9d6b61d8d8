package ownnode

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
)

var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }

// kicked reports whether a kick arrives within the deadline.
func kicked(w *Watcher, within time.Duration) bool {
	select {
	case <-w.Kick():
		return true
	case <-time.After(within):
		return false
	}
}

// pending reports whether a kick is waiting now.
func pending(w *Watcher) bool {
	select {
	case <-w.Kick():
		return true
	default:
		return false
	}
}

// TestWatchFollowsOneNode: the watcher sees its own Node only, wakes on
// what Wake says (a label here, not an annotation), and on the Node's
// deletion; Node() is the last state.
func TestWatchFollowsOneNode(t *testing.T) {
	cs, err := kubernetes.NewForConfig(apiserver.Config(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := cs.CoreV1().Nodes()
	for _, name := range []string{"own-1", "other-1"} {
		_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	var asked atomic.Value // the last annotation a Wake call saw
	w, err := Watch(ctx, cs, "own-1", func(old, cur *corev1.Node) bool {
		if cur != nil {
			asked.Store(cur.Annotations["a"])
		}
		return old == nil || cur == nil || old.Labels["l"] != cur.Labels["l"]
	})
	require.NoError(t, err)
	require.NotNil(t, w)
	require.True(t, kicked(w, 10*time.Second), "the first list wakes")
	n, ok := w.Node()
	require.True(t, ok)
	assert.Equal(t, "own-1", n.Name)

	patch := func(name, body string) {
		_, err := nodes.Patch(ctx, name, "application/merge-patch+json", []byte(body), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	patch("other-1", `{"metadata":{"labels":{"l":"1"}}}`)
	patch("own-1", `{"metadata":{"annotations":{"a":"1"}}}`)
	testutil.Eventually(t, 10*time.Second, "the annotation's update handled", func() bool { return asked.Load() == "1" })
	assert.False(t, pending(w), "neither another Node nor an annotation wakes")

	patch("own-1", `{"metadata":{"labels":{"l":"1"}}}`)
	require.True(t, kicked(w, 10*time.Second), "the label wakes")
	n, _ = w.Node()
	assert.Equal(t, "1", n.Labels["l"])

	// A patch is not sent again before the watch shows it: the same patch
	// against the same version is held back, a new version sends it again.
	seen, _ := w.Node()
	body := []byte(`{"metadata":{"annotations":{"p":"1"}}}`)
	sent, err := w.Patch(ctx, seen, body)
	require.NoError(t, err)
	assert.True(t, sent)
	sent, err = w.Patch(ctx, seen, body)
	require.NoError(t, err)
	assert.False(t, sent, "the same patch against the same version")
	testutil.Eventually(t, 10*time.Second, "the patch seen", func() bool {
		n, ok := w.Node()
		return ok && n.Annotations["p"] == "1"
	})
	seen, _ = w.Node()
	sent, err = w.Patch(ctx, seen, body)
	require.NoError(t, err)
	assert.True(t, sent, "a newer version")
	_, err = w.Patch(ctx, seen, []byte(`{"metadata":`))
	require.ErrorContains(t, err, "node own-1: patch")

	require.NoError(t, nodes.Delete(ctx, "own-1", metav1.DeleteOptions{}))
	require.True(t, kicked(w, 10*time.Second), "the deletion wakes")
	_, ok = w.Node()
	assert.False(t, ok)

	cancel()
	w2, err := Watch(ctx, cs, "own-1", Always)
	assert.Nil(t, w2, "a watch whose context ended returns nothing")
	assert.NoError(t, err)
}
