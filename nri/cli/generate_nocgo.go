//go:build !cgo

package cli

import (
	"errors"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

// withCGO says whether NVML can be loaded.
const withCGO = false

func generate(gpucdi.Options) (*cdispec.Spec, error) {
	return nil, errors.New("generate-cdi: this binary was built without cgo, which NVML needs (make build builds it with cgo)")
}
