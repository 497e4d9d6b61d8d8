package nodereport

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tlsServer serves handler over TLS until the test ends; it returns the
// Server, which trusts the test server's certificate and reads its token
// from a file first holding token, and the Server's NodePatcher.
func tlsServer(t *testing.T, handler http.HandlerFunc, token string) (Server, PatchFunc) {
	t.Helper()
	srv := httptest.NewTLSServer(handler)
	t.Cleanup(srv.Close)
	s := Server{URL: srv.URL, CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), TokenFile: filepath.Join(t.TempDir(), "token")}
	require.NoError(t, os.WriteFile(s.TokenFile, []byte(token), 0o600))
	patch, err := s.NodePatcher()
	require.NoError(t, err)
	return s, patch
}

// TestNodePatcherSendsAMergePatch: one PATCH of /api/v1/nodes/<node> with
// the merge-patch content type and the token read from its file at each
// request (the kubelet rotates it), over TLS checked against the CA.
func TestNodePatcherSendsAMergePatch(t *testing.T) {
	type request struct{ method, path, ctype, auth, body string }
	var mu sync.Mutex
	var got []request
	status := http.StatusOK
	server, patch := tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, request{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), string(b)})
		code := status
		mu.Unlock()
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"kind":"Status","message":"nodes \"gpu-1\" is forbidden"}`))
	}, "first\n")

	p := &Publisher{Node: "gpu-1", Annotation: "sandbox-gpu.io/release-report.vfio-manager", Patch: patch}
	ctx := context.Background()
	refused := Release{Reason: "0000:3b:00.0: in use: held by pid 42 (qemu-kvm)", Left: []string{"0000:3b:00.0"}}
	require.NoError(t, p.Publish(ctx, refused))
	require.NoError(t, p.Publish(ctx, refused), "the same report again")
	require.NoError(t, os.WriteFile(server.TokenFile, []byte("second"), 0o600))
	require.NoError(t, p.Publish(ctx, Release{Done: true}))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2, "an unchanged report is not written again")
	assert.Equal(t, http.MethodPatch, got[0].method)
	assert.Equal(t, "/api/v1/nodes/gpu-1", got[0].path)
	assert.Equal(t, "application/merge-patch+json", got[0].ctype)
	assert.Equal(t, "Bearer first", got[0].auth)
	assert.Equal(t, "Bearer second", got[1].auth, "the token is read at each request")
	var body struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal([]byte(got[0].body), &body))
	r, err := Parse(body.Metadata.Annotations["sandbox-gpu.io/release-report.vfio-manager"])
	require.NoError(t, err)
	assert.Equal(t, refused, r)
	require.NoError(t, json.Unmarshal([]byte(got[1].body), &body))
	assert.JSONEq(t, `{"done":true}`, body.Metadata.Annotations["sandbox-gpu.io/release-report.vfio-manager"])
}

// TestNodePatcherErrors: a refused patch is an error naming the node and
// the server's answer, and is sent again next time; a URL without TLS, a
// CA without a certificate and a node name with a path in it are refused.
func TestNodePatcherErrors(t *testing.T) {
	calls := 0
	server, patch := tlsServer(t, func(w http.ResponseWriter, _ *http.Request) {
		calls++
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("forbidden by the admission policy"))
	}, "t")
	p := &Publisher{Node: "gpu-1", Annotation: "a", Patch: patch}
	err := p.Publish(context.Background(), Release{Done: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node gpu-1")
	assert.Contains(t, err.Error(), "403")
	assert.Contains(t, err.Error(), "forbidden by the admission policy")
	require.Error(t, p.Publish(context.Background(), Release{Done: true}))
	assert.Equal(t, 2, calls, "a failed write is tried again")
	require.Error(t, patch(context.Background(), "../namespaces", []byte("{}")))

	insecure := server
	insecure.URL = "http://example.com"
	_, err = insecure.NodePatcher()
	require.Error(t, err)
	badCA := server
	badCA.CA = []byte("not a certificate")
	_, err = badCA.NodePatcher()
	require.Error(t, err)
	_, err = Parse("{")
	require.Error(t, err)
}

// TestInClusterServerOutsideACluster: without the service's environment
// there is no in-cluster server.
func TestInClusterServerOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := InClusterServer()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not in a cluster")
}
