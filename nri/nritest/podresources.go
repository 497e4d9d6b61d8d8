// Package nritest holds what the NRI plugin's tests share: the real NRI
// runtime side in process, CDI specs of simulated GPUs, and a stand-in
// kubelet PodResources API (internal/podresources/podresourcestest) that
// lives as long as the test.
package nritest

import (
	"path/filepath"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
)

// StartPodResources serves a stand-in kubelet's PodResources API on
// dir/kubelet.sock until the test ends.
func StartPodResources(tb testing.TB, dir string) *podresourcestest.Kubelet {
	tb.Helper()
	k := podresourcestest.New(filepath.Join(dir, "kubelet.sock"))
	if err := k.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := k.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return k
}
