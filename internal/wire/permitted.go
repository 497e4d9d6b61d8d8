package wire

import (
	"encoding/json"
	"fmt"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// The KubeVirt device plugin's permitted-host-devices file
// (names.PermittedFile) holds, as JSON, KubeVirt's PermittedHostDevices
// (kubevirt.io/api/core/v1: the KubeVirt CR's
// spec.configuration.permittedHostDevices) for what the plugin advertises;
// the validator publishes it on the Node for the operator to merge. The
// type is KubeVirt's own and stays a type parameter here, so that wire
// links no Kubernetes API and declares no copy of it.

// WritePermitted keeps the file at path equal to p (indented JSON),
// atomically; an unchanged value writes nothing.
func WritePermitted[T any](path string, p T) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("permittedHostDevices %s: %w", path, err)
	}
	_, err = atomicfile.Write(path, append(data, '\n'), 0o644)
	return err
}

// ReadPermitted reads the file at path through atomicfile.Read (a link, a
// FIFO or an oversized file is an error naming it); content that does not
// parse as T is an error naming path.
func ReadPermitted[T any](path string) (T, error) {
	var p T
	b, err := atomicfile.Read(path)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
