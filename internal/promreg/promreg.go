// Package promreg registers a component's Prometheus collectors: every
// daemon and the operator register theirs through it, on the registry that
// internal/shell serves on /metrics.
package promreg

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers each collector with reg; a nil reg (a library used
// without a metrics listener, a test) registers nothing. The error names
// what (the component) and wraps the registry's, such as a metric of the
// same name registered twice.
func Register(reg prometheus.Registerer, what string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%s: register metrics: %w", what, err)
		}
	}
	return nil
}
