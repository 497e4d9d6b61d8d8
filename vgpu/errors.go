package vgpu

import (
	"errors"
	"fmt"
	"strings"
)

// Exit codes of the vgpu-device-manager contract (as vfio-manager's).
const (
	ExitOK       = 0 // every GPU holds the selected config's vGPUs
	ExitBadInput = 1 // bad usage or a config error (vgpuconfig.Error: the message names the key)
	ExitRefused  = 2 // at least one GPU's change was refused or failed, the rest done
)

// RefusedError says that some GPUs were refused or failed (exit 2); the
// result's report lists them.
type RefusedError struct{ Refused []Refusal }

func (e *RefusedError) Error() string {
	parts := make([]string, 0, len(e.Refused))
	for _, r := range e.Refused {
		parts = append(parts, fmt.Sprintf("GPU %d (%s): %s", r.GPU, r.Address, r.Reason))
	}
	return "vGPU changes refused or failed: " + strings.Join(parts, "; ")
}

// ExitCode makes a RefusedError exit 2 through the command shell.
func (e *RefusedError) ExitCode() int { return ExitRefused }

// ExitCode maps what plan or apply returned to the contract's exit code:
// 1 for a config error or any other error before anything was done, 2 when
// the result holds refusals or failures, 0 otherwise.
func ExitCode(err error, refused []Refusal) int {
	switch {
	case err != nil:
		var re *RefusedError
		if errors.As(err, &re) {
			return ExitRefused
		}
		return ExitBadInput
	case len(refused) > 0:
		return ExitRefused
	}
	return ExitOK
}
