package shell

import (
	"errors"
	"flag"
	"fmt"
)

// ErrRefused means the command did what it could and refused the rest
// (exit 2): a function in use, a vGPU held by a VM.
var ErrRefused = errors.New("some changes were refused or failed")

// errHelp means usage was printed on request (exit 0).
var errHelp = flag.ErrHelp

// UsageError is bad usage or bad input (exit 1).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitCoder is an error that chooses the process exit code.
type ExitCoder interface{ ExitCode() int }

// ExitCode maps a command's error to the exit code of the contract: 0 for
// none (or help shown), 2 for ErrRefused, an ExitCoder's own code, and 1
// for everything else (bad usage, bad input, failures).
func ExitCode(err error) int {
	var ec ExitCoder
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, ErrRefused):
		return 2
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	return 1
}

// Quiet marks an error the command has already reported (a refusal shown in
// its output table): the shell then prints nothing more.
func Quiet(err error) error {
	if err == nil {
		return nil
	}
	return quiet{err}
}

type quiet struct{ error }

func (q quiet) Unwrap() error { return q.error }

func isQuiet(err error) bool {
	var q quiet
	return errors.As(err, &q)
}

// logged is an error a daemon command already logged as JSON.
type logged struct{ error }

func (l logged) Unwrap() error { return l.error }

func isLogged(err error) bool {
	var l logged
	return errors.As(err, &l)
}
