package ownnode

import "github.com/prometheus/client_golang/prometheus"

// PatchCounter is a node daemon's count of its writes to its own Node by
// result (ok, failed): sandbox_gpu_<daemon>_node_patches_total. what says
// what the daemon writes there.
func PatchCounter(daemon, what string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_" + daemon + "_node_patches_total",
		Help: "Writes to the own Node (" + what + ") by result (ok, failed)."}, []string{"result"})
}

// CountPatch counts what Patch answered: failed on an error, ok when the
// patch went out (nothing when it was not sent again).
func CountPatch(c *prometheus.CounterVec, sent bool, err error) {
	switch {
	case err != nil:
		c.WithLabelValues("failed").Inc()
	case sent:
		c.WithLabelValues("ok").Inc()
	}
}
