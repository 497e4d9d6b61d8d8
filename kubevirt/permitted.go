package kubevirt

import (
	"encoding/json"
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// WritePermitted keeps a JSON file of KubeVirt permittedHostDevices (the
// KubeVirt CR's spec.configuration.permittedHostDevices) in step with what
// is advertised, for the operator to apply. It writes only on change,
// atomically.
func WritePermitted(path string, p v1.PermittedHostDevices) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("permittedHostDevices: %w", err)
	}
	_, err = atomicfile.Write(path, append(data, '\n'), 0o644)
	return err
}
