package vgpuconfig

import (
	"errors"
	"fmt"
	"strings"
)

// exitBadInput is the exit code of a config error (vgpu-device-manager's
// contract: 1, bad usage or a config error).
const exitBadInput = 1

// Error is a config file or selection the manager cannot apply: a syntax
// error, an unknown key, a wrong type, an unknown version or config name,
// a type a GPU cannot host, more instances than it holds. Nothing is
// changed when planning returns one. Its ExitCode is 1.
type Error struct {
	File   string // the config file
	Config string // the selected config, "" for file-level errors
	Key    string // where in the file: vgpu-configs.<name>[<i>].<key>..., "" when none applies
	GPU    string // "GPU 0 (0000:3b:00.0, 10de:2236)" for host validation, else ""
	Msg    string
}

func (e *Error) Error() string {
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

// ExitCode makes an Error exit 1 through the command shell.
func (e *Error) ExitCode() int { return exitBadInput }

// IsError reports whether err is (or wraps) an Error.
func IsError(err error) bool {
	var ce *Error
	return errors.As(err, &ce)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
