package nri

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
)

// DefaultCheckpoint is where the kubelet's device manager keeps its
// allocations.
const DefaultCheckpoint = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

// Checkpoint reads the kubelet device manager's checkpoint. The
// PodResources API leaves out ordinary (non-sidecar) init containers, but
// the device manager allocates to them too and records it there; the
// plugin looks containers the API does not list up in it.
type Checkpoint struct{ Path string }

type checkpointFile struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID        string
			ContainerName string
			ResourceName  string
			// DeviceIDs is devices per NUMA node ({"0": ["id"]}); kubelets
			// before 1.20 wrote a plain list.
			DeviceIDs json.RawMessage
		}
	}
}

// Lookup returns a container's allocation by pod UID; none when the file or
// the entry does not exist.
func (c Checkpoint) Lookup(podUID, container string) (Allocation, error) {
	b, err := os.ReadFile(c.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet device checkpoint: %w", err)
	}
	return lookupCheckpoint(c.Path, b, podUID, container)
}

// PodResources returns the resource names of which the checkpoint records
// devices for any container of the pod (by UID); none when the file does
// not exist.
func (c Checkpoint) PodResources(podUID string) ([]string, error) {
	b, err := os.ReadFile(c.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet device checkpoint: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("kubelet device checkpoint %s: %w", c.Path, err)
	}
	var out []string
	for _, e := range f.Data.PodDeviceEntries {
		if e.PodUID != podUID {
			continue
		}
		ids, err := deviceIDs(e.DeviceIDs)
		if err != nil {
			return nil, fmt.Errorf("kubelet device checkpoint %s: pod %s container %s resource %s: %w", c.Path, podUID, e.ContainerName, e.ResourceName, err)
		}
		if len(ids) > 0 {
			out = append(out, e.ResourceName)
		}
	}
	sort.Strings(out)
	return out, nil
}

// lookupCheckpoint finds a container's allocation in checkpoint content
// (path names it in errors).
func lookupCheckpoint(path string, b []byte, podUID, container string) (Allocation, error) {
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("kubelet device checkpoint %s: %w", path, err)
	}
	out := Allocation{}
	for _, e := range f.Data.PodDeviceEntries {
		if e.PodUID != podUID || e.ContainerName != container {
			continue
		}
		ids, err := deviceIDs(e.DeviceIDs)
		if err != nil {
			return nil, fmt.Errorf("kubelet device checkpoint %s: pod %s container %s resource %s: %w", path, podUID, container, e.ResourceName, err)
		}
		out[e.ResourceName] = append(out[e.ResourceName], ids...)
	}
	return out, nil
}

func deviceIDs(raw json.RawMessage) ([]string, error) {
	var perNUMA map[string][]string
	if err := json.Unmarshal(raw, &perNUMA); err == nil {
		var out []string
		for _, ids := range perNUMA {
			out = append(out, ids...)
		}
		sort.Strings(out)
		return out, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("device IDs %s: neither per NUMA node nor a list", raw)
	}
	return list, nil
}
