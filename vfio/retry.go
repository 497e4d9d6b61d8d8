package vfio

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// The one retry policy of driver moves: a sysfs write that fails with a
// transient error (isTransient) is tried again, up to transientAttempts
// times in all, transientBackoff apart, doubling. A probe that a driver
// fails for a moment (EIO from a device still coming out of reset) then
// still lands; an error that persists is final.
const (
	transientAttempts = 3
	transientBackoff  = 20 * time.Millisecond
)

// isTransient says whether a write's error may pass when tried again: EIO,
// EAGAIN, EINTR, ETIMEDOUT. Every other error (ENODEV: the function moved,
// EBUSY, ENOENT, a simulated crash) is final at once.
func isTransient(err error) bool {
	for _, e := range []error{syscall.EIO, syscall.EAGAIN, syscall.EINTR, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retried runs write under the retry policy. After a transient failure,
// landed (when not nil) is asked whether the write took effect after all
// (the kernel may have bound the function before its driver reported the
// error); then it counts as done. The final error says how many attempts
// were made.
func retried(write func() error, landed func() bool) error {
	wait := transientBackoff
	for attempt := 1; ; attempt++ {
		err := write()
		if err == nil || !isTransient(err) {
			return err
		}
		if landed != nil && landed() {
			return nil
		}
		if attempt == transientAttempts {
			return fmt.Errorf("%w (transient, %d attempts)", err, attempt)
		}
		time.Sleep(wait) // backoff before the next attempt, not synchronisation
		wait *= 2
	}
}

// mover makes one function's sysfs writes under the retry policy.
type mover struct {
	h HostView
	a host.Address
}

// read re-reads the function; nil when it cannot be read.
func (m mover) read() *host.Function {
	f, err := m.h.ReadFunction(m.a)
	if err != nil {
		return nil
	}
	return f
}

func (m mover) setOverride(driver string) error {
	return retried(func() error { return m.h.SetDriverOverride(m.a, driver) },
		func() bool { f := m.read(); return f != nil && f.DriverOverride == driver })
}

func (m mover) unbind(driver string) error {
	return retried(func() error { return m.h.Unbind(m.a, driver) },
		func() bool { f := m.read(); return f != nil && f.Driver != driver })
}

func (m mover) probe() error {
	return retried(func() error { return m.h.Probe(m.a) },
		func() bool { f := m.read(); return f != nil && f.Driver != "" })
}
