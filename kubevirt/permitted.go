package kubevirt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	v1 "kubevirt.io/api/core/v1"
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
	data = append(data, '\n')
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
