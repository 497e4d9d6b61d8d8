package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// One real kube-apiserver and etcd for the package (envtest), built by
// hack/envtest-assets.sh. Without KUBEBUILDER_ASSETS the tests skip.
var (
	testCfg    *rest.Config
	testScheme = runtime.NewScheme()
	skipReason string
)

const operandNS = "sandbox-gpu"

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		skipReason = "KUBEBUILDER_ASSETS is unset: run `export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -1)` (make test does)"
		os.Exit(m.Run())
	}
	if err := clientgoscheme.AddToScheme(testScheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(testScheme); err != nil {
		panic(err)
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "manifests", "crds"), filepath.Join("testdata", "crds")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
		os.Exit(1)
	}
	testCfg = cfg
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "envtest stop:", err)
	}
	os.Exit(code)
}

func needEnv(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		testutil.MissingPeer(t, "%s", skipReason)
	}
}

// testClient is a direct (uncached) client for assertions.
func testClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(testCfg, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clock is a settable clock for drain timeouts.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testOperator is the operator of one test, running until stop.
type testOperator struct {
	stop func()
	// metrics is the registry of the operator's own metrics.
	metrics *prometheus.Registry
	// writes counts its status writes.
	writes *statusWrites
}

// operatorConfig changes how a test's operator runs.
type operatorConfig struct {
	// policyNamespace is where the policy reconciler puts the operand
	// DaemonSets (the operand namespace by default).
	policyNamespace string
	// beforeStatusPatch runs before each status patch the operator sends.
	beforeStatusPatch func(obj client.Object)
	// crash, when set, kills the operator's writes after its n-th
	// (crash_test.go).
	crash *writeCrash
}

// statusWrites counts the operator's status writes by verb and keeps the
// result of each patch.
type statusWrites struct {
	mu        sync.Mutex
	updates   int
	patches   int
	patchErrs []error
}

func (w *statusWrites) get() (updates, patches int, errs []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updates, w.patches, append([]error(nil), w.patchErrs...)
}

func (w *statusWrites) funcs(cfg *operatorConfig) interceptor.Funcs {
	return interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.mu.Lock()
			w.updates++
			w.mu.Unlock()
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if cfg.beforeStatusPatch != nil && sub == "status" {
				cfg.beforeStatusPatch(obj)
			}
			err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			w.mu.Lock()
			w.patches++
			w.patchErrs = append(w.patchErrs, err)
			w.mu.Unlock()
			return err
		},
	}
}

// startOperator runs the operator's reconcilers until the returned stop is
// called (an operator restart is a stop and a new start).
func startOperator(t *testing.T, clk *clock) (stop func()) {
	t.Helper()
	return startOperatorWith(t, clk, operatorConfig{}).stop
}

// startOperatorWith runs the operator with its own metrics registry and a
// client that counts status writes.
func startOperatorWith(t *testing.T, clk *clock, cfg operatorConfig) *testOperator {
	t.Helper()
	op := &testOperator{metrics: prometheus.NewRegistry(), writes: &statusWrites{}}
	skip := true // every test (and a restart) starts a new manager in this process
	// controller-runtime v0.24's priority queue can deadlock on shutdown
	// (kubernetes-sigs/controller-runtime#3538, fixed in v0.25 by #3540,
	// which needs the v0.37 Kubernetes libraries): a test's operator then
	// never stops. The tests stop and start operators all the time, so they
	// use the plain queue until the module moves on.
	noPQ := false
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: testScheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip, UsePriorityQueue: &noPQ},
		NewClient: func(rc *rest.Config, o client.Options) (client.Client, error) {
			inner, err := client.NewWithWatch(rc, o)
			if err != nil {
				return nil, err
			}
			if cfg.crash != nil {
				inner = interceptor.NewClient(inner, cfg.crash.funcs())
			}
			return interceptor.NewClient(inner, op.writes.funcs(&cfg)), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(op.metrics)
	if err != nil {
		t.Fatal(err)
	}
	r := &NodeReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("sandbox-gpu-operator"),
		Namespace: operandNS, Now: clk.now, Requeue: 100 * time.Millisecond, APIReader: mgr.GetAPIReader(), Metrics: m}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	kv := &KubeVirtReconciler{Client: mgr.GetClient(), Resync: time.Second, Metrics: m}
	if err := kv.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ns := cfg.policyNamespace
	if ns == "" {
		ns = operandNS
	}
	pr := &PolicyReconciler{Client: mgr.GetClient(), Operands: operands.Options{Namespace: ns, Registry: "example.com", Version: "test"}, Metrics: m}
	if err := pr.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	op.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			// A runnable that outlives the grace period is still running:
			// its stack names it.
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Errorf("operator: %v", err)
		}
	}
	t.Cleanup(op.stop)
	return op
}

func ensureNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil && client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}
