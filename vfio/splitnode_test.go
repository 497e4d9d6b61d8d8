package vfio

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode/ownmeta"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// startAPIServer runs a real kube-apiserver and etcd for one test.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	testutil.EnvtestAssets(t)
	env := &envtest.Environment{}
	cfg, err := env.Start()
	require.NoError(t, err, "envtest")
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	})
	return cfg
}

func annotateNode(t *testing.T, cs kubernetes.Interface, node, value string) {
	t.Helper()
	v := `"` + value + `"`
	if value == "-" {
		v = "null"
	}
	_, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+names.VMGPUsAnnotation+`":`+v+`}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

func splitAnnotation(t *testing.T, cs kubernetes.Interface, node string) (wire.SplitReport, bool) {
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	v, ok := n.Annotations[names.VMGPUsReportAnnotation]
	if !ok {
		return wire.SplitReport{}, false
	}
	s, err := wire.ParseSplitReport(v)
	require.NoError(t, err)
	return s, true
}

// notRead runs ns until its declaration is an error containing want,
// and checks that it publishes nothing meanwhile.
func notRead(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns *NodeSplit, want string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go ns.Run(ctx)
	decl := ns.Declaration()
	var err error
	eventually(t, want, func() bool {
		_, err = decl.Get()
		return err != nil && strings.Contains(err.Error(), want)
	})
	ns.Publish(ctx, &ReadyReport{Ready: true})
	n, getErr := cs.CoreV1().Nodes().Get(ctx, ns.node, metav1.GetOptions{})
	if getErr == nil {
		assert.NotContains(t, n.Annotations, names.VMGPUsReportAnnotation, "nothing published before the Node is read")
	}
}

// TestDaemonFollowsItsNodesAnnotation: on a real API server, the VFIO
// manager follows its Node's sandbox-gpu.io/vm-gpus as the admin changes
// it with a patch (2, then 3, then a bad value, then none: every GPU),
// with no resync, and publishes each split in
// sandbox-gpu.io/vm-gpus-report; the bad value moves nothing and is
// reported naming node, annotation and value. Before its Node is read
// (none yet, or the list refused) the declaration is an error saying why,
// and nothing is published.
func TestDaemonFollowsItsNodesAnnotation(t *testing.T) {
	cfg := startAPIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	const node = "gpu-1"
	_, err = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Annotations: map[string]string{names.VMGPUsAnnotation: "2"}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	k, h := buildFixture(t, "hgx-h100")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The daemon's client: Node metadata only (kubeclient.Metadata).
	mc, err := metadata.NewForConfig(cfg)
	require.NoError(t, err)
	notRead(ctx, t, cs, NewNodeSplit(ownmeta.Metadata(mc), "gpu-absent", logr.Discard()), "node gpu-absent: annotation sandbox-gpu.io/vm-gpus: not read yet: no such Node")
	anonymous, err := metadata.NewForConfig(rest.AnonymousClientConfig(cfg))
	require.NoError(t, err)
	notRead(ctx, t, cs, NewNodeSplit(ownmeta.Metadata(anonymous), node, logr.Discard()), `node gpu-1: annotation sandbox-gpu.io/vm-gpus: not read yet: node gpu-1: watch: `+
		`failed to list *v1.PartialObjectMetadata: nodes "gpu-1" is forbidden`)

	ns := NewNodeSplit(ownmeta.Metadata(mc), node, logr.Discard())
	go ns.Run(ctx)
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, Resync: time.Hour, Log: logr.Discard(),
		VMGPUsFrom: ns.Declaration(), OnReport: ns.Publish})
	require.NoError(t, err)
	rd := &runningDaemon{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { rd.done <- d.Run(ctx) }()

	published := func(what string, cond func(wire.SplitReport) bool) wire.SplitReport {
		t.Helper()
		var s wire.SplitReport
		eventually(t, what, func() bool {
			var ok bool
			s, ok = splitAnnotation(t, cs, node)
			return ok && cond(s)
		})
		return s
	}
	s := published("two VM GPUs", func(s wire.SplitReport) bool { return s.Ready && s.Declared == "2" })
	assert.Equal(t, []string{"0000:9a:00.0", "0000:ab:00.0"}, s.VM)
	assert.Len(t, s.Container, 6)
	assert.True(t, onDrivers(k, "vfio-pci", hgx(4, 5)))

	annotateNode(t, cs, node, "3")
	s = published("three VM GPUs", func(s wire.SplitReport) bool { return s.Ready && s.Declared == "3" })
	assert.Equal(t, []string{"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0"}, s.VM)
	assert.True(t, onDrivers(k, "vfio-pci", hgx(4, 5, 6)))

	before := drivers(k)
	annotateNode(t, cs, node, "three")
	s = published("the bad value reported", func(s wire.SplitReport) bool { return !s.Ready && s.Declared == "three" })
	assert.Contains(t, s.Reason, `node gpu-1: annotation sandbox-gpu.io/vm-gpus: bad input: "three"`)
	ok, detail := d.Readiness()
	assert.False(t, ok)
	assert.Contains(t, detail.(*ReadyReport).Reason, `"three"`)
	assert.Equal(t, before, drivers(k), "a bad value moves nothing")

	annotateNode(t, cs, node, "-")
	s = published("every GPU", func(s wire.SplitReport) bool { return s.Ready && s.Declared == "" })
	assert.Len(t, s.VM, 8)
	assert.Empty(t, s.Container)
	assert.True(t, onDrivers(k, "vfio-pci", hgxGPUs))
	rd.stop(t)
	assert.Empty(t, k.Violations())
}
