package nodereport

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// fakeNodes is an API server with one Node: GETs answer its current
// annotation; the first watch answers 410 Gone (an expired version), the
// next ones stream one MODIFIED event with the next value and end.
type fakeNodes struct {
	mu      sync.Mutex
	value   string
	rv      int
	gets    int
	watches int
	queries []string
	failGet bool
}

func (f *fakeNodes) node() string {
	return fmt.Sprintf(`{"metadata":{"name":"gpu-1","resourceVersion":"%d","annotations":{"sandbox-gpu.io/vm-gpus":%q}}}`, f.rv, f.value)
}

func (f *fakeNodes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/api/v1/nodes/gpu-1" && r.Method == http.MethodGet:
		f.gets++
		if f.failGet {
			http.Error(w, "etcd unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprint(w, f.node())
	case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true":
		f.watches++
		f.queries = append(f.queries, r.URL.RawQuery)
		if f.watches == 1 {
			_, _ = fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}`)
			return
		}
		f.rv++
		f.value = fmt.Sprint(f.watches)
		_, _ = fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"%d"}}}`+"\n", f.rv)
		_, _ = fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`+"\n", f.node())
	default:
		http.NotFound(w, r)
	}
}

func fakeClient(t *testing.T, f *fakeNodes) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	c, err := Server{URL: srv.URL, CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), TokenFile: token}.Client()
	require.NoError(t, err)
	return c
}

// TestAnnotationWatchFollowsTheNode: before the Node is read the value is
// an error naming node and annotation (and why); after, it follows the
// watch's events; an expired watch (410) reads the Node again; each change
// signals Changed; the watch asks only for its own Node.
func TestAnnotationWatchFollowsTheNode(t *testing.T) {
	f := &fakeNodes{value: "2", rv: 10, failGet: true}
	w := &AnnotationWatch{Client: fakeClient(t, f), Node: "gpu-1", Annotation: "sandbox-gpu.io/vm-gpus", Log: logr.Discard(),
		Retry: 10 * time.Millisecond, WatchTimeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()

	testutil.Eventually(t, 5*time.Second, "a failed read", func() bool {
		_, _, err := w.Value()
		return err != nil && strings.Contains(err.Error(), "etcd unavailable")
	})
	_, _, err := w.Value()
	assert.Contains(t, err.Error(), "node gpu-1: annotation sandbox-gpu.io/vm-gpus: not read yet")
	f.mu.Lock()
	f.failGet = false
	f.mu.Unlock()

	seen := map[string]bool{}
	testutil.Eventually(t, 5*time.Second, "values from the watch", func() bool {
		select {
		case <-w.Changed():
		case <-time.After(10 * time.Millisecond):
		}
		if v, ok, err := w.Value(); err == nil && ok {
			seen[v] = true
		}
		return seen["3"]
	})
	assert.True(t, seen["2"] || seen["3"])
	cancel()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.GreaterOrEqual(t, f.gets, 3, "failed reads retried, and a read again after the 410")
	require.NotEmpty(t, f.queries)
	assert.Contains(t, f.queries[0], "fieldSelector=metadata.name%3Dgpu-1")
	assert.Contains(t, f.queries[0], "resourceVersion=10")
}
