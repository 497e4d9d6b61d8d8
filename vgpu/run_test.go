package vgpu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

const waitFor = 30 * time.Second

type runFixture struct {
	cs      kubernetes.Interface
	node    string
	k       *hostsim.Kernel
	h       *host.Host
	cfgFile string
	runDir  string

	retry time.Duration // RunOptions.Retry (setup may set it)

	mu           sync.Mutex
	reports      []wire.VGPUReady
	states       []string // the state label's values, in order, from a watch
	pausedWrites int      // sysfs writes made while the pause file existed
}

// startRun creates a Node and runs the loop for it on a simulated host.
func startRun(t *testing.T, node, fx string, labels map[string]string, resync time.Duration, setup ...func(*runFixture)) *runFixture {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)
	f := &runFixture{cs: cs, node: node}
	f.k, f.h = fixture(t, fx)
	dir := t.TempDir()
	f.cfgFile, f.runDir = filepath.Join(dir, "config", "config.yaml"), filepath.Join(dir, "run")
	require.NoError(t, os.MkdirAll(filepath.Dir(f.cfgFile), 0o755))
	f.writeConfig(t, testConfig)
	for _, fn := range setup {
		fn(f)
	}

	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	require.NoError(t, err)
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				s := n.Labels[names.VGPUConfigStateLabel]
				f.mu.Lock()
				if s != "" && (len(f.states) == 0 || f.states[len(f.states)-1] != s) {
					f.states = append(f.states, s)
				}
				f.mu.Unlock()
			}
		}
	}()
	o := RunOptions{Client: cs, NodeName: node, ConfigFile: f.cfgFile, Host: f.h, RunDir: f.runDir, Resync: resync, Retry: f.retry,
		Log: logr.Discard(), Observe: func(r wire.VGPUReady) {
			f.mu.Lock()
			f.reports = append(f.reports, r)
			f.mu.Unlock()
		}}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		require.NoError(t, <-done)
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	return f
}

// writeConfig replaces the config file the way a ConfigMap update does: a
// new file renamed over it.
func (f *runFixture) writeConfig(t *testing.T, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(f.cfgFile), "..config.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(text), 0o644))
	require.NoError(t, os.Rename(tmp, f.cfgFile))
}

func (f *runFixture) last() (wire.VGPUReady, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reports) == 0 {
		return wire.VGPUReady{}, 0
	}
	return f.reports[len(f.reports)-1], len(f.reports)
}

func (f *runFixture) stateHistory() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.states...)
}

func (f *runFixture) get(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), f.node, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

// waitState waits until the Node's state label and the last pass agree.
func (f *runFixture) waitState(t *testing.T, config, state string) wire.VGPUReady {
	t.Helper()
	var r wire.VGPUReady
	testutil.Eventually(t, waitFor, "config "+config+" "+state, func() bool {
		r, _ = f.last()
		return r.Config == config && r.State == state && f.get(t).Labels[names.VGPUConfigStateLabel] == state
	})
	return r
}

func (f *runFixture) label(t *testing.T, config string) {
	t.Helper()
	patch := `{"metadata":{"labels":{"` + names.VGPUConfigLabel + `":"` + config + `"}}}`
	_, err := f.cs.CoreV1().Nodes().Patch(context.Background(), f.node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func (f *runFixture) events(t *testing.T) []corev1.Event {
	t.Helper()
	l, err := f.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + f.node})
	require.NoError(t, err)
	return l.Items
}

func (f *runFixture) waitEvent(t *testing.T, reason, contains string) corev1.Event {
	t.Helper()
	var found corev1.Event
	testutil.Eventually(t, waitFor, "event "+reason+" "+contains, func() bool {
		for _, e := range f.events(t) {
			if e.Reason == reason && strings.Contains(e.Message, contains) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

func TestRunFollowsTheNodeLabel(t *testing.T) {
	f := startRun(t, "vgpu-follow", "a10-vgpu", nil, time.Hour)
	r := f.waitState(t, "default", StateSuccess)
	assert.Equal(t, map[string]int{"A10-12Q": 2}, r.GPUs[0].VGPUs, "no label: the default config")
	ready, err := wire.ReadVGPUReady(filepath.Join(f.runDir, names.VGPUReadyFile))
	require.NoError(t, err)
	assert.Equal(t, r.GPUs, ready.GPUs)
	assert.Equal(t, StateSuccess, ready.State)
	ev := f.waitEvent(t, EventApplied, `config "default" applied: GPU 0 (0000:3b:00.0) A10-12Q=2`)
	assert.Equal(t, corev1.EventTypeNormal, ev.Type)
	assert.Equal(t, "Node", ev.InvolvedObject.Kind)

	f.label(t, "small")
	r = f.waitState(t, "small", StateSuccess)
	assert.Equal(t, map[string]int{"A10-4Q": 6}, r.GPUs[0].VGPUs)
	assert.Equal(t, map[string]int{"NVIDIA A10-4Q": 6}, f.k.VGPUCounts("0000:3b:00.0"))
	testutil.Eventually(t, waitFor, "pending then success, twice", func() bool {
		return strings.Join(f.stateHistory(), ",") == "pending,success,pending,success"
	})

	// A ConfigMap update (a rename in the watched folder) applies again.
	f.writeConfig(t, strings.Replace(testConfig, `{"A10-4Q": 6}`, `{"A10-8Q": 3}`, 1))
	testutil.Eventually(t, waitFor, "A10-8Q from the new file", func() bool {
		r, _ := f.last()
		return r.State == StateSuccess && r.GPUs[0].VGPUs["A10-8Q"] == 3
	})
	assert.Empty(t, f.k.Violations())
}

func TestRunRefusesAVGPUInUse(t *testing.T) {
	f := startRun(t, "vgpu-in-use", "a10-vgpu", map[string]string{names.VGPUConfigLabel: "small"}, 200*time.Millisecond)
	f.waitState(t, "small", StateSuccess)
	m, ok, err := f.h.ReadMdev(StableUUID("vgpu-in-use", "0000:3b:00.0", 3))
	require.NoError(t, err)
	require.True(t, ok, "stable UUIDs from the node name")
	require.NoError(t, f.k.HoldOpen(6000, "qemu-kvm", "vfio/"+strconv.Itoa(m.IOMMUGroup)))

	f.label(t, "default")
	r := f.waitState(t, "default", StateFailed)
	require.Len(t, r.Refused, 1)
	assert.Contains(t, r.Refused[0].Reason, "in use: ")
	ev := f.waitEvent(t, EventRefused, "in use: ")
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	assert.Contains(t, ev.Message, `config "default"`)
	assert.Contains(t, ev.Message, "0000:3b:00.0")
	assert.Contains(t, ev.Message, "qemu-kvm")
	assert.Equal(t, map[string]int{"NVIDIA A10-4Q": 6}, f.k.VGPUCounts("0000:3b:00.0"), "the held vGPU's GPU is left as it was")
	_, n := f.last()
	testutil.Eventually(t, waitFor, "a few resyncs", func() bool { _, m := f.last(); return m >= n+3 })
	warnings := 0
	for _, e := range f.events(t) {
		// This run's: with -count>1 the shared apiserver keeps an earlier run's events of the node.
		if e.Reason == EventRefused && strings.Contains(e.Message, f.k.Options().DevRoot) {
			warnings++
		}
	}
	assert.Equal(t, 1, warnings, "the same refusal is reported once")

	require.NoError(t, f.k.Exit(6000)) // the VM stops; the next resync applies
	r = f.waitState(t, "default", StateSuccess)
	assert.Equal(t, map[string]int{"A10-12Q": 2}, r.GPUs[0].VGPUs)
	assert.Empty(t, f.k.Violations())
}

func TestRunReportsConfigErrors(t *testing.T) {
	f := startRun(t, "vgpu-config-error", "a10-vgpu", map[string]string{names.VGPUConfigLabel: "nope"}, time.Hour)
	r := f.waitState(t, "nope", StateFailed)
	assert.Contains(t, r.Error, `no config named "nope"`)
	assert.Equal(t, map[string]int{}, r.GPUs[0].VGPUs)
	f.waitEvent(t, EventConfigInvalid, `no config named "nope"`)

	f.writeConfig(t, testConfig+"mig-configs: {}\n")
	f.label(t, "default")
	f.waitEvent(t, EventConfigInvalid, "key mig-configs: unknown key")
	r = f.waitState(t, "default", StateFailed)
	assert.Contains(t, r.Error, f.cfgFile)
	assert.Empty(t, f.k.Writes(), "nothing applied")

	f.writeConfig(t, testConfig)
	f.waitState(t, "default", StateSuccess)
}

// TestRunSteadyStateAndPause: a pause file a crash left goes after the
// first pass; the pause file exists while vGPUs change; once applied, more
// passes (file events, resyncs) write nothing: no label, no event, no
// ready file, no sysfs write.
func TestRunSteadyStateAndPause(t *testing.T) {
	f := startRun(t, "vgpu-steady", "a10-vgpu", nil, 100*time.Millisecond, func(f *runFixture) {
		pause := filepath.Join(f.runDir, names.VGPUPauseFile)
		require.NoError(t, os.MkdirAll(f.runDir, 0o755))
		require.NoError(t, os.WriteFile(pause, nil, 0o644)) // left by a crash
		f.k.SetLatency(func(hostsim.Write) time.Duration {
			if _, err := os.Stat(pause); err == nil {
				f.mu.Lock()
				f.pausedWrites++
				f.mu.Unlock()
			}
			return 0
		})
	})
	f.waitState(t, "default", StateSuccess)
	assert.NoFileExists(t, filepath.Join(f.runDir, names.VGPUPauseFile), "the stale pause file is gone")
	f.mu.Lock()
	paused := f.pausedWrites
	f.mu.Unlock()
	assert.Equal(t, 3, paused, "the VF enable and both creates ran paused")

	rv := f.get(t).ResourceVersion
	events := len(f.events(t))
	readyPath := filepath.Join(f.runDir, names.VGPUReadyFile)
	before, err := os.Stat(readyPath)
	require.NoError(t, err)
	f.k.ResetWrites()
	_, n := f.last()
	for i := 0; i < 3; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(f.cfgFile), "unrelated"), []byte{byte(i)}, 0o644))
	}
	testutil.Eventually(t, waitFor, "more passes", func() bool { _, m := f.last(); return m >= n+5 })
	assert.Equal(t, rv, f.get(t).ResourceVersion, "no write to the Node")
	assert.Len(t, f.events(t), events, "no event")
	after, err := os.Stat(readyPath)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the ready file is not rewritten")
	assert.Empty(t, f.k.Writes(), "no sysfs write")
}

// TestRunRemovesAStalePause: a pause file left by a crash goes after the
// first pass even when there is nothing to change.
func TestRunRemovesAStalePause(t *testing.T) {
	const node = "vgpu-stale-pause"
	f := startRun(t, node, "a10-vgpu", nil, time.Hour, func(f *runFixture) {
		res := apply(t, f.h, parse(t, testConfig), "default", Options{NodeName: node}, ApplyOptions{})
		require.True(t, res.OK())
		require.NoError(t, os.MkdirAll(f.runDir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(f.runDir, names.VGPUPauseFile), nil, 0o644))
		f.k.ResetWrites()
	})
	f.waitState(t, "default", StateSuccess)
	assert.NoFileExists(t, filepath.Join(f.runDir, names.VGPUPauseFile))
	assert.Empty(t, f.k.Writes())
	assert.Equal(t, []string{StateSuccess}, f.stateHistory(), "nothing to change: straight to success")
}

// TestRunRetriesARefusalSoon: a change refused because a VM holds a vGPU is
// tried again within the retry period, not only at the next resync: the
// VM exits and the node follows in seconds.
func TestRunRetriesARefusalSoon(t *testing.T) {
	f := startRun(t, "vgpu-retry", "a10-vgpu", map[string]string{names.VGPUConfigLabel: "small"}, time.Hour,
		func(f *runFixture) { f.retry = 100 * time.Millisecond })
	f.waitState(t, "small", StateSuccess)
	m, ok, err := f.h.ReadMdev(StableUUID("vgpu-retry", "0000:3b:00.0", 0))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, f.k.HoldOpen(6001, "qemu-kvm", "vfio/"+strconv.Itoa(m.IOMMUGroup)))
	f.label(t, "default")
	f.waitState(t, "default", StateFailed)
	require.NoError(t, f.k.Exit(6001))
	r := f.waitState(t, "default", StateSuccess) // an hour's resync would never get here in time
	assert.Equal(t, map[string]int{"A10-12Q": 2}, r.GPUs[0].VGPUs)
}
