package ownmeta

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// countPatches is a client of the test's API server (typed, and metadata
// as the daemon's) whose metadata client counts the PATCH requests it
// sends.
func countPatches(t *testing.T) (kubernetes.Interface, metadata.Interface, *atomic.Int32) {
	t.Helper()
	cfg := rest.CopyConfig(apiserver.Config(t))
	var n atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(apiserver.Config(t))
	require.NoError(t, err)
	mc, err := metadata.NewForConfig(cfg)
	require.NoError(t, err)
	return cs, mc, &n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestPublisherWritesOnlyChanges: on a real API server, a report is one
// merge patch of its own key (the Node's other annotations stay); the same
// value again sends nothing; a new value is written; a write that failed
// (no such Node yet) names the node and is sent again next time.
func TestPublisherWritesOnlyChanges(t *testing.T) {
	cs, mc, patches := countPatches(t)
	ctx := context.Background()
	nodes := cs.CoreV1().Nodes()
	annotations := func(name string) map[string]string {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return n.Annotations
	}
	createNode(t, cs, "pub-1", map[string]string{"admin": "kept"})
	p := &Publisher{Patch: Metadata(mc).Patch, Node: "pub-1", Annotation: "sandbox-gpu.io/release-report.vfio-manager"}
	require.NoError(t, p.Publish(ctx, `{"done":false,"reason":"r"}`))
	require.NoError(t, p.Publish(ctx, `{"done":false,"reason":"r"}`))
	assert.Equal(t, int32(1), patches.Load(), "the same value is not written again")
	assert.Equal(t, map[string]string{"admin": "kept", "sandbox-gpu.io/release-report.vfio-manager": `{"done":false,"reason":"r"}`}, annotations("pub-1"))
	require.NoError(t, p.Publish(ctx, `{"done":true}`))
	assert.Equal(t, int32(2), patches.Load())
	assert.Equal(t, `{"done":true}`, annotations("pub-1")["sandbox-gpu.io/release-report.vfio-manager"])

	late := &Publisher{Patch: Metadata(mc).Patch, Node: "pub-late", Annotation: "a"}
	err := late.Publish(ctx, "v")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node pub-late: publish a:")
	createNode(t, cs, "pub-late", nil)
	require.NoError(t, late.Publish(ctx, "v"), "a failed write is tried again")
	assert.Equal(t, "v", annotations("pub-late")["a"])

	var none *Publisher
	require.NoError(t, none.Publish(ctx, "v"), "no publisher, nothing to write")
	require.Error(t, (&Publisher{Node: "pub-1", Annotation: "a"}).Publish(ctx, "v"), "no patch")
}
