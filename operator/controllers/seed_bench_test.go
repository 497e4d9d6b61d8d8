package controllers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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

// waitConverged watches the node states until n of those named with
// prefix have an applied config, failing with describe() after the
// deadline. A watch costs the API server one event per write, where
// polling lists of thousands of states would take much of its CPU from
// the operator under test.
func waitConverged(b *testing.B, prefix string, n int, deadline time.Time, describe func() string) {
	b.Helper()
	c, err := client.NewWithWatch(testCfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	applied := map[string]bool{}
	done, rv := 0, ""
	set := func(name string, ok bool) {
		if !strings.HasPrefix(name, prefix) || applied[name] == ok {
			return
		}
		applied[name] = ok
		if ok {
			done++
		} else {
			done--
		}
	}
	for {
		w, err := c.Watch(ctx, &v1alpha1.SandboxGPUNodeList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err == nil {
			for ev := range w.ResultChan() {
				st, ok := ev.Object.(*v1alpha1.SandboxGPUNode)
				switch {
				case ev.Type == watch.Error: // expired: start over from a fresh list
					rv, done = "", 0
					clear(applied)
				case !ok:
				case ev.Type == watch.Deleted:
					rv = st.ResourceVersion
					set(st.Name, false)
				default:
					rv = st.ResourceVersion
					set(st.Name, st.Status.AppliedConfig != "")
				}
				if done >= n {
					w.Stop()
					return
				}
			}
			w.Stop()
		}
		if ctx.Err() != nil {
			b.Fatalf("only %d of %d nodes converged; %s", done, n, describe())
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// readCPU returns the CPU seconds used so far by this process (the
// operator under test), and by its children kube-apiserver and etcd
// (envtest's), by name.
func readCPU(b *testing.B) map[string]float64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	out := map[string]float64{"operator": tv(ru.Utime) + tv(ru.Stime)}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range procs {
		data, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		i, j := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		if err != nil || i < 0 || j < i {
			continue
		}
		comm := string(data[i+1 : j])
		f := strings.Fields(string(data[j+1:])) // state ppid ... utime (12th) stime (13th)
		if len(f) < 13 || f[1] != strconv.Itoa(os.Getpid()) || (comm != "kube-apiserver" && comm != "etcd") {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[comm] += (utime + stime) / 100 // USER_HZ
	}
	return out
}
