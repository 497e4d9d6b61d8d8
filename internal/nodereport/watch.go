package nodereport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// AnnotationWatch follows one annotation of one Node: it reads the Node,
// then watches it (one GET per watch, a watch every WatchTimeout), and
// keeps the annotation's last value. Until the first read it has no value
// (Value says why); after that, an API server that cannot be reached
// leaves the last value in force while the watch is retried.
type AnnotationWatch struct {
	Client     *Client
	Node       string
	Annotation string
	Log        logr.Logger
	// Retry is the wait after a failed read or watch (default 5s).
	Retry time.Duration
	// WatchTimeout is how long one watch lasts before the Node is read
	// again (default 5m).
	WatchTimeout time.Duration

	once    sync.Once
	changed chan struct{}

	mu      sync.Mutex
	synced  bool
	value   string
	present bool
	lastErr error
}

func (w *AnnotationWatch) init() {
	w.once.Do(func() { w.changed = make(chan struct{}, 1) })
}

// Changed receives after the first read and after each change of the
// annotation's value.
func (w *AnnotationWatch) Changed() <-chan struct{} {
	w.init()
	return w.changed
}

// Value is the annotation's value and whether the Node has it; an error
// naming node and annotation before the Node was first read.
func (w *AnnotationWatch) Value() (string, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.synced {
		why := "not read yet"
		if w.lastErr != nil {
			why += ": " + w.lastErr.Error()
		}
		return "", false, fmt.Errorf("node %s: annotation %s: %s", w.Node, w.Annotation, why)
	}
	return w.value, w.present, nil
}

// set records a read of the Node, signalling a change of the value.
func (w *AnnotationWatch) set(m NodeMeta) {
	value, present := m.Annotations[w.Annotation]
	w.mu.Lock()
	changed := !w.synced || value != w.value || present != w.present
	w.synced, w.value, w.present, w.lastErr = true, value, present, nil
	w.mu.Unlock()
	if changed {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

func (w *AnnotationWatch) failed(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

// Run reads and watches the Node until ctx ends.
func (w *AnnotationWatch) Run(ctx context.Context) {
	w.init()
	retry, timeout := w.Retry, w.WatchTimeout
	if retry <= 0 {
		retry = 5 * time.Second
	}
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	wait := func() bool {
		t := time.NewTimer(retry)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		m, err := w.Client.GetNode(ctx, w.Node)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.failed(err)
			w.Log.Error(err, "Cannot read the Node", "node", w.Node, "annotation", w.Annotation)
			if !wait() {
				return
			}
			continue
		}
		w.set(m)
		rv := m.ResourceVersion
		for ctx.Err() == nil {
			start := time.Now()
			rv, err = w.Client.WatchNode(ctx, w.Node, rv, timeout, w.set)
			if err != nil || ctx.Err() != nil {
				break
			}
			if time.Since(start) < time.Second && !wait() {
				return // a server that ends watches at once is not asked in a loop
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, ErrExpired) {
			w.Log.Error(err, "Watching the Node", "node", w.Node, "annotation", w.Annotation)
			if !wait() {
				return
			}
		}
	}
}
