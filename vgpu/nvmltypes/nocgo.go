//go:build !cgo

package nvmltypes

import (
	"sync"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Available says whether this binary can load NVML (it was built with cgo).
const Available = false

// Namer names nothing: NVML needs cgo. It says so once, when first asked.
type Namer struct {
	log  logr.Logger
	once sync.Once
}

// New returns a Namer that says, once, that NVML is not available.
func New(o Options) *Namer { return &Namer{log: o.Log} }

// TypeNames names nothing; the first call logs that NVML is not available.
func (n *Namer) TypeNames(gpu host.Address) (map[int]string, error) {
	n.once.Do(func() {
		n.log.Info("NVML is not available (built without cgo): vGPU type ids no driver list and no memory name stay unnamed", "gpu", gpu)
	})
	return nil, nil
}

// Close does nothing.
func (n *Namer) Close() error { return nil }
