package ownmeta

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
)

var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }

// createNode creates a Node with annotations until the test ends.
func createNode(t *testing.T, cs kubernetes.Interface, name string, annotations map[string]string) {
	t.Helper()
	nodes := cs.CoreV1().Nodes()
	_, err := nodes.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// TestMetadataWatchFollowsOneNode: through the metadata client the
// watcher sees its own Node only (as metadata), wakes on what Wake lets
// through, and Get is the last state.
func TestMetadataWatchFollowsOneNode(t *testing.T) {
	cs, err := kubernetes.NewForConfig(apiserver.Config(t))
	require.NoError(t, err)
	mc, err := metadata.NewForConfig(apiserver.Config(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := cs.CoreV1().Nodes()
	createNode(t, cs, "meta-1", nil)
	createNode(t, cs, "meta-other", nil)
	w, err := Start(ctx, Metadata(mc), "meta-1", func(old, cur metav1.Object) bool {
		return old == nil || cur == nil || old.GetAnnotations()["a"] != cur.GetAnnotations()["a"]
	})
	require.NoError(t, err)
	require.True(t, w.WaitSynced(ctx))
	select {
	case <-w.Kick():
	case <-time.After(10 * time.Second):
		t.Fatal("the first list did not wake")
	}
	annotate := func(name, v string) {
		_, err := nodes.Patch(ctx, name, "application/merge-patch+json", []byte(`{"metadata":{"annotations":{"a":"`+v+`"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	annotate("meta-other", "x")
	annotate("meta-1", "1")
	select {
	case <-w.Kick():
	case <-time.After(10 * time.Second):
		t.Fatal("the annotation did not wake")
	}
	testutil.Eventually(t, 10*time.Second, "the annotation seen", func() bool {
		obj, ok := w.Get()
		m, isMeta := obj.(*metav1.PartialObjectMetadata)
		return ok && isMeta && m.Name == "meta-1" && m.Annotations["a"] == "1"
	})
}

// TestStartNamesWhyNotSynced: Start returns at once; while the API server
// refuses the list (here a client without credentials) the watcher is not
// synced and LastError names the Node and the server's answer.
func TestStartNamesWhyNotSynced(t *testing.T) {
	mc, err := metadata.NewForConfig(rest.AnonymousClientConfig(apiserver.Config(t)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := Start(ctx, Metadata(mc), "gpu-9", func(_, _ metav1.Object) bool { return true })
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, "the refused list recorded", func() bool { return w.LastError() != nil })
	assert.False(t, w.Synced())
	msg := w.LastError().Error()
	assert.True(t, strings.HasPrefix(msg, "node gpu-9: watch: "), msg)
	assert.Regexp(t, "forbidden|Unauthorized", msg)
}
