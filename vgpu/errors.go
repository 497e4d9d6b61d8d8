package vgpu

import (
	"errors"
	"fmt"
	"strings"
)

// Exit codes of the vgpu-device-manager contract (as vfio-manager's).
const (
	ExitOK       = 0 // every GPU holds the selected config's vGPUs
	ExitBadInput = 1 // bad usage or a config error (the message names the key)
	ExitRefused  = 2 // at least one GPU's change was refused or failed, the rest done
)

// ConfigError is a config file or selection the manager cannot apply: a
// syntax error, an unknown key, a wrong type, an unknown version or config
// name, a type a GPU cannot host, more instances than it holds. Nothing is
// changed when planning returns one. Its ExitCode is 1.
type ConfigError struct {
	File   string // the config file
	Config string // the selected config, "" for file-level errors
	Key    string // where in the file: vgpu-configs.<name>[<i>].<key>..., "" when none applies
	GPU    string // "GPU 0 (0000:3b:00.0, 10de:2236)" for host validation, else ""
	Msg    string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "vGPU config %s", orDash(e.File))
	if e.Config != "" {
		fmt.Fprintf(&b, ": config %q", e.Config)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": key %s", e.Key)
	}
	if e.GPU != "" {
		fmt.Fprintf(&b, ": %s", e.GPU)
	}
	return b.String() + ": " + e.Msg
}

// ExitCode makes a ConfigError exit 1 through the command shell.
func (e *ConfigError) ExitCode() int { return ExitBadInput }

// IsConfigError reports whether err is (or wraps) a ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
