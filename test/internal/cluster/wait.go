package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// pollInterval is how often a condition is checked.
const pollInterval = 50 * time.Millisecond

// errNotYet is what a condition returns while it does not hold, when it has nothing better to say.
var errNotYet = errors.New("not yet")

// poll calls cond until it reports done, returns an error, ctx ends or within passes. A condition
// that is not done yet may return its reason as a *retry error (retryf): the last one is reported
// when the deadline passes (a retry error with done is success).
func poll(ctx context.Context, within time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		done, err := cond(ctx)
		var r *retry
		switch {
		case errors.As(err, &r) && !done:
			last = r.err
		case errors.As(err, &r), err == nil && done:
			return nil
		case err != nil:
			return err
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = errNotYet
			}
			return fmt.Errorf("not within %v: %w", within, last)
		case <-tick.C:
		}
	}
}

// retry marks a condition's error as a reason to keep polling.
type retry struct{ err error }

func (r *retry) Error() string { return r.err.Error() }
func (r *retry) Unwrap() error { return r.err }

// retryf is a reason to keep polling, reported when the deadline passes.
func retryf(format string, args ...any) error { return &retry{err: fmt.Errorf(format, args...)} }
