package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
)

// TestSkipTheDefaultRuntime: the pattern "" matches the default runtime's
// empty handler (where Kata is the default runtime), and only it.
func TestSkipTheDefaultRuntime(t *testing.T) {
	p := &core{o: Options{SkipRuntimeHandlers: []string{"kata*", ""}}}
	for handler, skip := range map[string]bool{"": true, "kata-qemu-nvidia-gpu": true, "runc": false, "nvidia": false} {
		assert.Equal(t, skip, p.skipped(&api.PodSandbox{RuntimeHandler: handler}), "handler %q", handler)
	}
	p = &core{o: Options{SkipRuntimeHandlers: []string{"kata*"}}}
	assert.False(t, p.skipped(&api.PodSandbox{}), "without \"\" the default runtime's pods are served")
}

// TestKataHandlersAsConfigured: the Kata handlers named (the handler of
// the policy's RuntimeClass) are skipped exactly; a kata-looking handler
// that is not one of them is served, and so is the default runtime unless
// "" is named.
func TestKataHandlersAsConfigured(t *testing.T) {
	p := &core{o: Options{KataRuntimeHandlers: []string{"kata-qemu-nvidia-gpu", "sandboxed"}}}
	for handler, skip := range map[string]bool{"kata-qemu-nvidia-gpu": true, "sandboxed": true, "kata-fc": false, "": false, "runc": false, "kata-qemu-nvidia-gpu-x": false} {
		assert.Equal(t, skip, p.skipped(&api.PodSandbox{RuntimeHandler: handler}), "handler %q", handler)
	}
	p = &core{o: Options{KataRuntimeHandlers: []string{""}}}
	assert.True(t, p.skipped(&api.PodSandbox{}), "Kata as the default runtime")
}
