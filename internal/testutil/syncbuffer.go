package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer collects what a process or goroutine writes while the test
// reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines holding every one of subs.
func (b *SyncBuffer) Lines(subs ...string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		ok := true
		for _, s := range subs {
			if !strings.Contains(line, s) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return out
}
