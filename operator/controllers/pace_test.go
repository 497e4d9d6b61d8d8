package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A burst of events waits for the end of the window its first event
// opened; after a quiet spell the next event goes at once.
func TestPacerFoldsBursts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	p := newPacer(time.Second)
	p.now = func() time.Time { return now }
	assert.Equal(t, time.Duration(0), p.delay(), "the first event goes at once")
	now = t0.Add(300 * time.Millisecond)
	assert.Equal(t, 700*time.Millisecond, p.delay(), "the next waits for the window's end")
	now = t0.Add(999 * time.Millisecond)
	assert.Equal(t, time.Millisecond, p.delay(), "and so does the last of the burst")
	now = t0.Add(time.Second)
	assert.Equal(t, time.Duration(0), p.delay(), "a new window")
	now = t0.Add(1500 * time.Millisecond)
	assert.Equal(t, 500*time.Millisecond, p.delay())
	now = t0.Add(10 * time.Second)
	assert.Equal(t, time.Duration(0), p.delay(), "after a quiet spell: at once")
}
