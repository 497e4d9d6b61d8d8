package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/uninstall"
)

// TestUninstallReturnsEveryGPU: the uninstall hook (sandbox-gpu-operator
// uninstall) deletes the policy while the operator runs. The policy's
// finalizer holds it while every node is released, with the real node
// daemons: the vm-vgpu node's vGPUs and VFs go, the container node has
// nothing to return, and on the HGX node every GPU and NVSwitch goes back
// to nvidia but one a VM holds: that node stays releasing, named with the
// VM in the hook's output and in a ReleaseRefused event. At its timeout
// the hook reports what stays (output, an UninstallLeftGPUs event) and
// removes the finalizer; the held GPU is still on vfio-pci, untouched.
// The released nodes have no deploy, release or vGPU state label left.
func TestUninstallReturnsEveryGPU(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll)
	hgx := startSimNode(t, c, "un-hgx", "hgx-h100", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	l40s := startSimNode(t, c, "un-l40s", "l40s-vgpu", map[string]string{names.WorkloadConfigLabel: "vm-vgpu", names.VGPUConfigLabel: "L40S-24Q"})
	ctr := startSimNode(t, c, "un-ctr", "a10", map[string]string{names.WorkloadConfigLabel: "container"})
	hgx.waitReady(t, v1alpha1.WorkloadVMPassthrough)
	l40s.waitReady(t, v1alpha1.WorkloadVMVGPU)
	ctr.waitReady(t, v1alpha1.WorkloadContainer)
	require.Contains(t, getPolicy(c).Finalizers, v1alpha1.ReleaseFinalizer, "the operator holds the policy for the release")
	held := host.Address("0000:2a:00.0")
	hgx.holdGPU(t, 4321, held)
	t.Cleanup(func() { _ = hgx.a.Kernel().Exit(4321) })

	var out testutil.SyncBuffer
	type outcome struct {
		res *uninstall.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := uninstall.Run(context.Background(), c, uninstall.Options{Timeout: 20 * time.Second, Poll: 200 * time.Millisecond}, &out)
		done <- outcome{res, err}
	}()
	for _, n := range []*simNode{l40s, ctr} {
		n.waitFor(t, "released", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReleased })
	}
	st := hgx.waitFor(t, "the held GPU refused", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateReleasing && strings.Contains(s.Status.Message, "qemu-kvm")
	})
	assert.Contains(t, st.Status.Message, string(held))
	waitEvent(t, c, hgx.name, EventReleaseRefused, 1)
	p := getPolicy(c)
	require.NotNil(t, p.DeletionTimestamp, "the policy is being deleted")
	testutil.Eventually(t, agentWait, "the policy says what it waits for", func() bool {
		p := getPolicy(c)
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1alpha1.ConditionReady && cond.Reason == ReasonUninstalling && strings.Contains(cond.Message, "un-hgx (releasing") {
				return true
			}
		}
		return false
	})

	var o outcome
	select {
	case o = <-done:
	case <-time.After(agentWait):
		t.Fatalf("the uninstall did not end; its output:\n%s", out.String())
	}
	require.NoError(t, o.err)
	assert.True(t, o.res.TimedOut, "a GPU in use is never taken: the hook gives up on it")
	require.Len(t, o.res.Left, 1, out.String())
	assert.Equal(t, "un-hgx", o.res.Left[0].Name)
	assert.Contains(t, o.res.Left[0].Message, "qemu-kvm")
	assert.Contains(t, o.res.Released, "un-l40s")
	assert.Contains(t, o.res.Released, "un-ctr")
	text := out.String()
	assert.Contains(t, text, "Deleted SandboxGPUPolicy default")
	assert.Contains(t, text, "Node un-l40s: released")
	assert.Contains(t, text, "un-hgx (releasing)")
	assert.Contains(t, text, "held by pid 4321 (qemu-kvm)")
	testutil.Eventually(t, agentWait, "the policy gone", func() bool {
		return apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Name: PolicyName}, &v1alpha1.SandboxGPUPolicy{}))
	})
	var events corev1.EventList
	require.NoError(t, c.List(context.Background(), &events, client.InNamespace("default")))
	var left bool
	for _, e := range events.Items {
		if e.InvolvedObject.Name == "un-hgx" && e.Reason == uninstall.EventLeft && e.Type == corev1.EventTypeWarning {
			left = strings.Contains(e.Message, "qemu-kvm")
		}
	}
	assert.True(t, left, "a Warning event on the Node says what stays")

	// What the product moved is back, but the GPU in use.
	for a, d := range hgx.drivers(t) {
		if a == held {
			assert.Equal(t, "vfio-pci", d, "the held GPU stays")
		} else {
			assert.Equal(t, hgx.a.Kernel().NativeDriver(a), d, a)
		}
	}
	vgpus, vfs := l40s.vgpuCounts(t)
	assert.Zero(t, vgpus+vfs, "the vGPUs and VFs are gone")
	for _, n := range []*simNode{l40s, ctr} {
		node := getNode(t, c, n.name)
		assert.Empty(t, deployLabels(node), n.name)
		assert.Empty(t, releaseLabels(node), n.name)
		assert.NotContains(t, node.Labels, names.VGPUConfigStateLabel, n.name)
		assert.Empty(t, n.a.Kernel().Violations(), n.name)
	}
	assert.Empty(t, hgx.a.Kernel().Violations())
}

// TestUninstallWithNothingInUse: with no GPU in use the operator releases
// every node and removes its finalizer itself; the hook ends before its
// timeout with every node released and the GPUs back on nvidia.
func TestUninstallWithNothingInUse(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll)
	n := startSimNode(t, c, "un-free", "a10", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
	testutil.Eventually(t, agentWait, "the finalizer", func() bool {
		return len(getPolicy(c).Finalizers) > 0
	})
	var out testutil.SyncBuffer
	res, err := uninstall.Run(context.Background(), c, uninstall.Options{Timeout: agentWait, Poll: 200 * time.Millisecond}, &out)
	require.NoError(t, err, out.String())
	assert.False(t, res.TimedOut, out.String())
	assert.Contains(t, res.Released, "un-free")
	assert.Empty(t, res.Left)
	assert.Contains(t, out.String(), "The policy is gone")
	for a, d := range n.drivers(t) {
		assert.Equal(t, n.a.Kernel().NativeDriver(a), d, a)
	}
	node := getNode(t, c, n.name)
	assert.Empty(t, deployLabels(node))
	assert.Empty(t, releaseLabels(node))
	assert.Empty(t, n.a.Kernel().Violations())

	res, err = uninstall.Run(context.Background(), c, uninstall.Options{Timeout: time.Second}, &out)
	require.NoError(t, err)
	assert.Empty(t, res.Released, "no policy: nothing to do")
}
