package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// seedCluster resets the policy (sandbox on, container default) and
// creates n GPU nodes named <prefix>NNNNN, cycling through no label and
// each workload config, 16 creates at a time.
func seedCluster(b *testing.B, c client.Client, prefix string, n int) {
	b.Helper()
	ctx := context.Background()
	_ = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-gpu"}})
	deletePolicyNow(b, c)
	p := &v1alpha1.SandboxGPUPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName}, Spec: v1alpha1.SandboxGPUPolicySpec{SandboxWorkloads: sandboxOn("container")}}
	if err := c.Create(ctx, p); err != nil {
		b.Fatal(err)
	}
	configs := []string{"", "container", "vm-passthrough", "vm-vgpu"}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			labels := map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}
			if cfg := configs[i%len(configs)]; cfg != "" {
				labels[names.WorkloadConfigLabel] = cfg
			}
			if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%05d", prefix, i), Labels: labels}}); err != nil {
				b.Error(err)
			}
		}(i)
	}
	wg.Wait()
}

// waitConverged polls until n nodes named with prefix have an applied
// config, failing with describe() after the deadline.
func waitConverged(b *testing.B, c client.Client, prefix string, n int, deadline time.Time, describe func() string) {
	b.Helper()
	for {
		var states v1alpha1.SandboxGPUNodeList
		if err := c.List(context.Background(), &states); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, st := range states.Items {
			if strings.HasPrefix(st.Name, prefix) && st.Status.AppliedConfig != "" {
				done++
			}
		}
		if done >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d nodes converged; %s", done, n, describe())
		}
		tick := time.NewTimer(200 * time.Millisecond)
		<-tick.C
	}
}
