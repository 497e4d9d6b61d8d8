package ownnode

import (
	"errors"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
)

func TestCountPatch(t *testing.T) {
	c := PatchCounter("test", "labels")
	CountPatch(c, true, nil)
	CountPatch(c, false, nil) // not sent again: no write
	CountPatch(c, false, errors.New("node n1: patch: forbidden"))
	assert.Equal(t, 1.0, promtest.ToFloat64(c.WithLabelValues("ok")))
	assert.Equal(t, 1.0, promtest.ToFloat64(c.WithLabelValues("failed")))
	assert.Equal(t, 2, promtest.CollectAndCount(c), "ok and failed, nothing else")
}
