package nri

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// Hook policies: which OCI hooks a GPU CDI spec may bring. A hook runs on
// the host, as root, before the container: a spec planted by a compromised
// node component (another CDI writer on the node) with a hook of its own
// must never run.
const (
	// HooksNVIDIA allows only NVIDIA's toolkit hooks at their installed
	// paths (nvidia-ctk's specs call nvidia-cdi-hook or nvidia-ctk), the
	// default.
	HooksNVIDIA = "nvidia"
	// HooksNone refuses every hook (generate-cdi writes specs without).
	HooksNone = "none"
	// HooksAny allows any hook (a policy that trusts every CDI writer).
	HooksAny = "any"
)

// NVIDIAHookPaths are where NVIDIA's container toolkit installs the hook
// binaries its CDI specs name: the Debian/RPM packages and the GPU
// Operator's toolkit container.
var NVIDIAHookPaths = []string{
	"/usr/bin/nvidia-cdi-hook", "/usr/bin/nvidia-ctk",
	"/usr/local/bin/nvidia-cdi-hook", "/usr/local/bin/nvidia-ctk",
	"/usr/local/nvidia/toolkit/nvidia-cdi-hook", "/usr/local/nvidia/toolkit/nvidia-ctk",
}

// errHookRefused refuses a container whose GPU spec brings a hook the
// policy does not allow.
var errHookRefused = errors.New("a GPU CDI spec brings an OCI hook the hook policy does not allow (a spec planted by another CDI writer? --cdi-hooks)")

// checkHooks returns the hooks of edits the policy refuses.
func checkHooks(policy string, h *oci.Hooks) []string {
	if h == nil || policy == HooksAny {
		return nil
	}
	var refused []string
	//lint:ignore SA1019 Prestart is deprecated but runtimes still run it
	for _, list := range [][]oci.Hook{h.Prestart, h.CreateRuntime, h.CreateContainer, h.StartContainer, h.Poststart, h.Poststop} {
		for _, x := range list {
			if policy == HooksNVIDIA && slices.Contains(NVIDIAHookPaths, x.Path) {
				continue
			}
			refused = append(refused, x.Path)
		}
	}
	sort.Strings(refused)
	return slices.Compact(refused)
}

func validHookPolicy(p string) error {
	switch p {
	case HooksNVIDIA, HooksNone, HooksAny:
		return nil
	}
	return fmt.Errorf("hook policy %q: want nvidia, none or any", p)
}
