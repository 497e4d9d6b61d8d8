package controllers

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// sample is one series of a metric: a gauge's or counter's value, a
// histogram's sample count.
type sample struct {
	value float64
	count uint64
}

// metricSeries gathers the series of one metric from the test operator's
// registry, keyed by their labels ("config=container,state=ready").
func metricSeries(t *testing.T, op *testOperator, name string) map[string]sample {
	t.Helper()
	families, err := op.metrics.Gather()
	require.NoError(t, err)
	out := map[string]sample{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			out[strings.Join(labels, ",")] = sample{value: m.GetGauge().GetValue() + m.GetCounter().GetValue(), count: m.GetHistogram().GetSampleCount()}
		}
	}
	return out
}

// gpuNodes is the GPU node gauge as label set → value.
func gpuNodes(t *testing.T, op *testOperator) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, s := range metricSeries(t, op, MetricGPUNodes) {
		out[k] = s.value
	}
	return out
}

func counterValue(t *testing.T, op *testOperator, name string, labels map[string]string) float64 {
	t.Helper()
	var keys []string
	for k, v := range labels {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return metricSeries(t, op, name)[strings.Join(keys, ",")].value
}

func transitions(t *testing.T, op *testOperator, from, to string) uint64 {
	t.Helper()
	return metricSeries(t, op, MetricTransitionSeconds)["from="+from+",to="+to].count
}

// The GPU node gauge follows nodes as they come, change and go; a node's
// switch is timed once it is ready; errors are counted per controller.
func TestOperatorMetrics(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	clearNodes(t, c)
	setPolicy(t, c, sandboxOn("container"))
	op := startOperatorWith(t, newClock(), operatorConfig{})
	newNode(t, c, "m-1", map[string]string{names.WorkloadConfigLabel: "container"})
	newNode(t, c, "m-2", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	want := map[string]float64{"config=container,state=configuring": 1, "config=vm-passthrough,state=configuring": 1}
	testutil.Eventually(t, wait, "both nodes configuring", func() bool { return assert.ObjectsAreEqual(want, gpuNodes(t, op)) })

	readyOperands(t, c, "m-1", containerOps...)
	want = map[string]float64{"config=container,state=ready": 1, "config=vm-passthrough,state=configuring": 1}
	testutil.Eventually(t, wait, "m-1 ready", func() bool { return assert.ObjectsAreEqual(want, gpuNodes(t, op)) })
	assert.EqualValues(t, 1, transitions(t, op, "none", "container"), "a new node's setup is timed")
	assert.Zero(t, transitions(t, op, "none", "vm-passthrough"), "not before it is ready")

	setNodeLabel(t, c, "m-1", names.WorkloadConfigLabel, "vm-vgpu")
	readyOperands(t, c, "m-1", names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager)
	waitState(t, c, "m-1", "vm-vgpu ready", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.AppliedConfig == "vm-vgpu" && s.Status.State == v1alpha1.StateReady
	})
	want = map[string]float64{"config=vm-vgpu,state=ready": 1, "config=vm-passthrough,state=configuring": 1}
	testutil.Eventually(t, wait, "m-1 counted under vm-vgpu", func() bool { return assert.ObjectsAreEqual(want, gpuNodes(t, op)) })
	testutil.Eventually(t, wait, "the switch timed", func() bool { return transitions(t, op, "container", "vm-vgpu") == 1 })
	st := nodeState(c, "m-1")
	require.NotNil(t, st.Status.Transition)
	assert.Equal(t, "container", st.Status.Transition.From)
	assert.NotNil(t, st.Status.Transition.Completed)

	// A node that goes leaves no series behind.
	require.NoError(t, c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m-2"}}))
	want = map[string]float64{"config=vm-vgpu,state=ready": 1}
	testutil.Eventually(t, wait, "m-2 gone from the gauge", func() bool { return assert.ObjectsAreEqual(want, gpuNodes(t, op)) })

	assert.Zero(t, counterValue(t, op, MetricReconcileErrors, map[string]string{"controller": policyControllerName}))
}

// Metrics live in a registry of their own; registering them twice fails
// with an error instead of a panic.
func TestMetricsRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	_, err = NewMetrics(reg)
	require.Error(t, err)

	m.setNode("a", "container", "")
	m.setNode("b", "container", "pending")
	m.setNode("a", "container", "ready")
	m.forgetNode("b")
	m.forgetNode("never-seen")
	families, err := reg.Gather()
	require.NoError(t, err)
	var lines []string
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if f.GetName() == MetricGPUNodes {
				lines = append(lines, s.GetLabel()[0].GetValue()+"/"+s.GetLabel()[1].GetValue())
				assert.Equal(t, 1.0, s.GetGauge().GetValue())
			}
		}
	}
	assert.Equal(t, []string{"container/ready"}, lines)

	var nilMetrics *Metrics // a reconciler without metrics
	nilMetrics.setNode("a", "container", "ready")
	nilMetrics.forgetNode("a")
}
