// Package sys is the stand-in for wazero's sys package.
package sys

import "fmt"

// ExitError is a module's exit with a code.
type ExitError struct{ code uint32 }

// ExitCode is the module's exit code.
func (e *ExitError) ExitCode() uint32 { return e.code }

func (e *ExitError) Error() string { return fmt.Sprintf("module exited with code %d", e.code) }
