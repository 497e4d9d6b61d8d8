package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "sandbox_gpu_test_a_total", Help: "a"})
	b := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_test_b", Help: "b"})
	require.NoError(t, Register(reg, "test", a, b))
	got, err := reg.Gather()
	require.NoError(t, err)
	assert.Len(t, got, 2, "both collectors registered")

	again := prometheus.NewCounter(prometheus.CounterOpts{Name: "sandbox_gpu_test_a_total", Help: "a"})
	err = Register(reg, "discovery", again)
	var are prometheus.AlreadyRegisteredError
	assert.ErrorAs(t, err, &are, "the registry's error is wrapped")
	assert.ErrorContains(t, err, "discovery: register metrics")

	assert.NoError(t, Register(nil, "test", again), "a nil registry registers nothing")
}
