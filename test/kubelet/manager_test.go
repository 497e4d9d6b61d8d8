package kubelet

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// kubelet is the kubelet's real device manager serving kubelet.sock in a folder, with the pods the
// test admitted as its active pods.
type kubelet struct {
	dir    string
	logger klog.Logger
	m      *devicemanager.ManagerImpl

	mu            sync.Mutex
	pods          []*v1.Pod
	once          sync.Once
	registrations registrations // Register calls received
}

// sourcesReady says every pod source has been seen, as the kubelet's own device manager tests do.
type sourcesReady struct{}

func (sourcesReady) AddSource(string) {}
func (sourcesReady) AllReady() bool   { return true }

// registrationMsg is what the v1.36 device manager logs for every Register call it receives. A k8s
// bump that rewords it makes every count 0, which fails the suite: update it then.
const registrationMsg = "Got registration request from device plugin with resource"

// startKubelet creates and starts a device manager on dir/kubelet.sock. Start wipes the sockets in
// dir, so plugins are started after it. owner logs it and stops it at its end; it may be a parent of
// the calling test, hence the error rather than a fatal failure.
func startKubelet(owner *testing.T, dir string) (*kubelet, error) {
	k := &kubelet{dir: dir}
	k.logger = countRegistrations(owner, ktesting.NewLogger(owner, ktesting.NewConfig(ktesting.Verbosity(4))), &k.registrations)
	// The device manager logs through klog's global logger too (klog.TODO, context.TODO, and the
	// Register handler): into the test's log as well, shown when it fails or with -v.
	klog.SetLogger(k.logger)
	owner.Cleanup(klog.ClearLogger)
	sock := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	m, err := newManagerImpl(k.logger, sock, nil, topologymanager.NewFakeManager())
	if err != nil {
		return nil, fmt.Errorf("device manager on %s: %w", sock, err)
	}
	k.m = m
	if err := m.Start(k.logger, k.activePods, sourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("start device manager on %s: %w", sock, err)
	}
	owner.Cleanup(func() { k.stop(owner) })
	return k, nil
}

// stop stops the manager's registration server and its plugin clients (a kubelet going down).
func (k *kubelet) stop(t *testing.T) {
	t.Helper()
	k.once.Do(func() {
		if err := k.m.Stop(k.logger); err != nil {
			t.Errorf("stop device manager in %s: %v", k.dir, err)
		}
	})
}

// registrations counts the Register calls a device manager received, per resource.
type registrations struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *registrations) add(res string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[res]++
}

func (r *registrations) of(res string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[res]
}

// countingSink counts the registrations a device manager logs (its only trace of them).
type countingSink struct {
	logr.LogSink
	tb testing.TB
	r  *registrations
}

func countRegistrations(tb testing.TB, l logr.Logger, r *registrations) logr.Logger {
	return logr.New(countingSink{LogSink: l.GetSink(), tb: tb, r: r})
}

func (s countingSink) Info(level int, msg string, kv ...any) {
	s.tb.Helper() // the test log shows the device manager's line, not this one
	if msg == registrationMsg {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "resourceName" {
				s.r.add(fmt.Sprint(kv[i+1]))
			}
		}
	}
	s.LogSink.Info(level, msg, kv...)
}

// GetCallStackHelper lets logr.Logger's own frames be skipped too.
func (s countingSink) GetCallStackHelper() func() { return s.tb.Helper }

func (s countingSink) Error(err error, msg string, kv ...any) {
	s.tb.Helper()
	s.LogSink.Error(err, msg, kv...)
}

func (s countingSink) WithValues(kv ...any) logr.LogSink {
	s.LogSink = s.LogSink.WithValues(kv...)
	return s
}

func (s countingSink) WithName(name string) logr.LogSink {
	s.LogSink = s.LogSink.WithName(name)
	return s
}

func (s countingSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		s.LogSink = cd.WithCallDepth(depth)
	}
	return s
}

func (k *kubelet) activePods() []*v1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.pods)
}

// counts is a resource's capacity and allocatable as the kubelet would put them in the node status.
type counts struct{ capacity, allocatable int64 }

func (c counts) String() string {
	return fmt.Sprintf("capacity %d, allocatable %d", c.capacity, c.allocatable)
}

// resources returns every resource the manager reports, with its counts.
func (k *kubelet) resources() map[string]counts {
	capacity, allocatable, _ := k.m.GetCapacity()
	out := map[string]counts{}
	for name, q := range capacity {
		a := allocatable[name]
		out[string(name)] = counts{capacity: q.Value(), allocatable: a.Value()}
	}
	return out
}

// waitCounts polls the manager until the resource has the counts, failing the test at the deadline.
func (k *kubelet) waitCounts(t *testing.T, res string, want counts, within time.Duration) {
	t.Helper()
	var last map[string]counts
	err := e2e.Poll(within, func() bool {
		last = k.resources()
		got, ok := last[res]
		return ok && got == want
	})
	if err != nil {
		t.Fatalf("resource %s: want %v: %v; the manager reports %v", res, want, err, last)
	}
}

// deviceIDs returns the sorted IDs of the resource's healthy devices.
func (k *kubelet) deviceIDs(res string) []string {
	var ids []string
	for id := range k.m.GetAllocatableDevices()[res] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// newPod is a pod whose one container requests n of a resource.
func newPod(name, res string, n int64) *v1.Pod {
	q := v1.ResourceList{v1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid")},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "ctr", Image: "virt-launcher", Resources: v1.ResourceRequirements{Limits: q, Requests: q},
		}}},
	}
}

// allocate admits the pod, allocates its container's devices through the manager (which calls the
// plugin's Allocate) and returns the options the kubelet would give the runtime.
func (k *kubelet) allocate(ctx context.Context, pod *v1.Pod) (*devicemanager.DeviceRunContainerOptions, error) {
	k.mu.Lock()
	k.pods = append(k.pods, pod)
	k.mu.Unlock()
	ctr := &pod.Spec.Containers[0]
	if err := k.m.Allocate(pod, ctr); err != nil {
		k.forget(pod)
		return nil, fmt.Errorf("allocate for pod %s: %w", pod.Name, err)
	}
	opts, err := k.m.GetDeviceRunContainerOptions(ctx, pod, ctr)
	if err != nil {
		return nil, fmt.Errorf("run options of pod %s: %w", pod.Name, err)
	}
	return opts, nil
}

// forget removes the pod from the active pods, so the manager frees its devices.
func (k *kubelet) forget(pod *v1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = slices.DeleteFunc(k.pods, func(p *v1.Pod) bool { return p.UID == pod.UID })
}

// runOptions summarises DeviceRunContainerOptions for comparisons.
type runOptions struct {
	env     map[string]string
	devices map[string]string // host path -> container path
	cdi     []string
}

func summarise(o *devicemanager.DeviceRunContainerOptions) runOptions {
	r := runOptions{env: map[string]string{}, devices: map[string]string{}}
	for _, e := range o.Envs {
		r.env[e.Name] = e.Value
	}
	for _, d := range o.Devices {
		r.devices[d.PathOnHost] = d.PathInContainer
	}
	for _, c := range o.CDIDevices {
		r.cdi = append(r.cdi, c.Name)
	}
	sort.Strings(r.cdi)
	return r
}

// vfioDevices is the device specs a set of IOMMU groups needs: the container node and each group's.
func vfioDevices(groups ...string) map[string]string {
	m := map[string]string{"/dev/vfio/vfio": "/dev/vfio/vfio"}
	for _, g := range groups {
		m["/dev/vfio/"+g] = "/dev/vfio/" + g
	}
	return m
}

// sockets lists the unix sockets in a folder other than the kubelet's.
func sockets(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return nil, fmt.Errorf("sockets in %s: %w", dir, err)
	}
	var out []string
	for _, m := range matches {
		if b := filepath.Base(m); b != filepath.Base(pluginapi.KubeletSocket) {
			out = append(out, b)
		}
	}
	return out, nil
}

// joined is a comma-separated list, for messages.
func joined(s []string) string { return strings.Join(s, ",") }
