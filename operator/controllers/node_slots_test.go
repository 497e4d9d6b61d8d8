package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// changingWatch watches the node states of a set of nodes and records the
// most that were ever changing at once (draining, releasing, configuring),
// from every version the API server sent.
type changingWatch struct {
	mu    sync.Mutex
	state map[string]string
	most  int
	when  string // the states when most was reached
}

func watchChanging(t *testing.T, nodes ...string) *changingWatch {
	t.Helper()
	wc, err := client.NewWithWatch(testCfg, client.Options{Scheme: testScheme})
	require.NoError(t, err)
	w, err := wc.Watch(context.Background(), &v1alpha1.SandboxGPUNodeList{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	cw := &changingWatch{state: map[string]string{}}
	ours := map[string]bool{}
	for _, n := range nodes {
		ours[n] = true
	}
	go func() {
		for ev := range w.ResultChan() {
			st, ok := ev.Object.(*v1alpha1.SandboxGPUNode)
			if !ok || !ours[st.Name] {
				continue
			}
			cw.mu.Lock()
			cw.state[st.Name] = st.Status.State
			if ev.Type == watch.Deleted {
				delete(cw.state, st.Name)
			}
			n := 0
			var all []string
			for name, s := range cw.state {
				all = append(all, name+"="+s)
				if s == v1alpha1.StateDraining || s == v1alpha1.StateReleasing || s == v1alpha1.StateConfiguring {
					n++
				}
			}
			if n > cw.most {
				sort.Strings(all)
				cw.most, cw.when = n, strings.Join(all, " ")
			}
			cw.mu.Unlock()
		}
	}()
	return cw
}

func (cw *changingWatch) max() (int, string) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.most, cw.when
}

// TestTransitionSlots: four ready nodes relabelled at once, each with a GPU
// pod of the old config to drain. With maxUnavailable 1 one node changes
// at a time, in the order of their names, the others pending with the
// reason (and one TransitionQueued event each); with 50% two do. A watch
// on every state version shows the bound never overshot.
func TestTransitionSlots(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	for _, tc := range []struct {
		max     intstr.IntOrString
		prefix  string
		atOnce  int
		message string
	}{
		{intstr.FromInt32(1), "slot1-", 1, "Waiting for a transition slot: 1 of 1 node is changing (slot1-a)"},
		{intstr.FromString("50%"), "slot50-", 2, "Waiting for a transition slot: 2 of 2 nodes are changing (slot50-a and slot50-b)"},
	} {
		t.Run(tc.max.String(), func(t *testing.T) {
			setPolicy(t, c, sandboxOn("container"), func(s *v1alpha1.SandboxGPUPolicySpec) { s.Transition.MaxUnavailable = &tc.max })
			startOperator(t, newClock())
			var nodes []string
			for _, x := range []string{"d", "b", "c", "a"} { // created out of order: the order is by name
				n := tc.prefix + x
				nodes = append(nodes, n)
				readyNode(t, c, n, "container", nil, containerOps...)
			}
			sort.Strings(nodes)
			pods := map[string]func(){}
			for _, n := range nodes {
				p := gpuPod(t, c, n, "nvidia.com/gpu")
				pods[n] = func() { require.NoError(t, c.Delete(context.Background(), p, client.GracePeriodSeconds(0))) }
			}
			cw := watchChanging(t, nodes...)
			for _, n := range nodes {
				setNodeLabel(t, c, n, names.WorkloadConfigLabel, "vm-passthrough")
			}
			for i, n := range nodes {
				want := v1alpha1.StateDraining
				if i >= tc.atOnce {
					want = v1alpha1.StatePending
				}
				st := waitState(t, c, n, want, func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == want })
				if want == v1alpha1.StatePending {
					assert.Contains(t, st.Status.Message, tc.message, n)
					waitEvent(t, c, n, EventQueued, 1)
				}
			}
			// The nodes drain one slot after the other; each switches once
			// its pod is gone and its operands are ready.
			for _, n := range nodes {
				waitState(t, c, n, "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
				pods[n]()
				waitState(t, c, n, "configuring", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "vm-passthrough" })
				readyOperands(t, c, n, names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator)
				waitState(t, c, n, "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
			}
			most, when := cw.max()
			assert.Equal(t, tc.atOnce, most, "at most %d changing at once; the most seen: %s", tc.atOnce, when)
		})
	}
}

// TestMaxUnavailableValidation: a number of at least 1 or a percentage
// from 1% to 100%; the CRD refuses anything else with the rule's message.
func TestMaxUnavailableValidation(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, sandboxOn("container"))
	update := func(v intstr.IntOrString) error {
		p := getPolicy(c)
		p.Spec.Transition.MaxUnavailable = &v
		return c.Update(context.Background(), p, client.DryRunAll)
	}
	for i, v := range []intstr.IntOrString{intstr.FromInt32(1), intstr.FromInt32(7), intstr.FromString("1%"), intstr.FromString("50%"), intstr.FromString("100%")} {
		require.NoError(t, update(v), "%d: %s", i, v.String())
	}
	for _, v := range []intstr.IntOrString{intstr.FromInt32(0), intstr.FromInt32(-1), intstr.FromString("0%"), intstr.FromString("101%"), intstr.FromString("half"), intstr.FromString("5")} {
		err := update(v)
		require.Error(t, err, v.String())
		assert.Contains(t, err.Error(), "transition.maxUnavailable is a number of nodes (at least 1) or a percentage from 1% to 100%", v.String())
	}
	assert.Equal(t, 1, maxUnavailable(&v1alpha1.SandboxGPUPolicy{}, 10), "the default")
	for _, c := range []struct {
		v     intstr.IntOrString
		nodes int
		want  int
	}{{intstr.FromString("50%"), 4, 2}, {intstr.FromString("50%"), 3, 2}, {intstr.FromString("1%"), 3, 1}, {intstr.FromString("100%"), 0, 1}, {intstr.FromInt32(3), 2, 3}} {
		p := &v1alpha1.SandboxGPUPolicy{}
		p.Spec.Transition.MaxUnavailable = &c.v
		assert.Equal(t, c.want, maxUnavailable(p, c.nodes), fmt.Sprintf("%s of %d", c.v.String(), c.nodes))
	}
}
