package ownnode

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// LoopOptions says what wakes a daemon's Loop besides its Node.
type LoopOptions struct {
	// Resync wakes the loop this often whatever happened.
	Resync time.Duration
	// Dirs are folders whose every change (a file written, created,
	// renamed or removed in them) wakes the loop; they must exist.
	Dirs []string
	// Log gets a failed file watch, which wakes the loop as a change would.
	Log logr.Logger
}

// Loop calls pass at once and again on every wake until ctx ends, when it
// returns nil: a change of the Node that the Watcher's Wake lets through,
// every Resync, a change in one of Dirs, and the timer pass asks for by
// returning a duration above zero (zero: no timer). The discovery agent,
// the validator and the vGPU device manager run their passes through it.
func (w *Watcher) Loop(ctx context.Context, o LoopOptions, pass func() time.Duration) error {
	w.Poke()
	return loop(ctx, w.Kick(), o, pass)
}

// loop is Loop on any kick channel.
func loop(ctx context.Context, kick <-chan struct{}, o LoopOptions, pass func() time.Duration) error {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if len(o.Dirs) > 0 {
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("fsnotify: %w", err)
		}
		defer fw.Close()
		for _, dir := range o.Dirs {
			if err := fw.Add(dir); err != nil {
				return fmt.Errorf("watch %s: %w", dir, err)
			}
		}
		events, errs = fw.Events, fw.Errors
	}
	tick := time.NewTicker(o.Resync)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		case <-timer.C:
		case <-events:
		case err := <-errs:
			o.Log.Error(err, "File watch failed; going on anyway", "dirs", o.Dirs)
		}
		if d := pass(); d > 0 {
			timer.Reset(d)
		} else {
			timer.Stop()
		}
	}
}
