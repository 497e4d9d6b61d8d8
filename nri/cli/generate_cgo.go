//go:build cgo

package cli

import (
	"errors"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

// withCGO says whether NVML can be loaded.
const withCGO = true

func generate(o gpucdi.Options) (spec *cdispec.Spec, err error) {
	lib, shutdown, err := gpucdi.OpenNVML(o)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, shutdown()) }()
	return gpucdi.Generate(lib, o)
}
