package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// VFIOReady is the content of the VFIO manager's readiness file
// (names.VFIOReadyFile) and of its /readyz. The daemon rewrites the file at
// every reconcile and every heartbeat, ready or not, so readers know why; a
// graceful stop removes it.
//
//	ready      every selected function is where the desired state wants it
//	reason     why not, in a sentence ("iommu: ...", "in use: ...")
//	vfio       the functions on a vfio driver
//	actions    what the last reconcile moved
//	refused    what it left alone, with the reason
//	pid        the daemon's pid (in its own PID namespace)
//	heartbeat  when the daemon last wrote the file
//	expires    after this, a reader takes the daemon for dead
//	split      the VM and container GPUs of a mixed node, and those left
type VFIOReady struct {
	Ready     bool          `json:"ready"`
	Reason    string        `json:"reason,omitempty"`
	Time      time.Time     `json:"time"`
	VFIO      []string      `json:"vfio"`
	Actions   []VFIOMove    `json:"actions"`
	Refused   []VFIORefusal `json:"refused"`
	Error     string        `json:"error,omitempty"`
	PID       int           `json:"pid,omitempty"`
	Heartbeat time.Time     `json:"heartbeat"`
	Expires   time.Time     `json:"expires"`
	// Split is how the node's GPUs split between VMs and containers, when
	// a split is declared (vmGPUs, --vm-gpus or the Node's annotation).
	Split *VFIOSplit `json:"split,omitempty"`
}

// VFIOMove is a PCI function the reconcile moved from one driver to
// another.
type VFIOMove struct {
	Address string `json:"address"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// VFIORefusal is a PCI function left as it was, with the reason.
type VFIORefusal struct {
	Address string `json:"address"`
	Reason  string `json:"reason"`
}

// VFIOSplit is how a declaration splits the node's GPUs (by PCI address).
//
//	declared   the declaration ("" when every GPU goes to VMs)
//	source     where it was read: --vm-gpus, or the Node's annotation
//	vm         the VM GPUs (on vfio)
//	container  the container GPUs (on their host driver)
//	left       GPUs not yet where the split wants them
type VFIOSplit struct {
	Declared  string   `json:"declared"`
	Source    string   `json:"source,omitempty"`
	VM        []string `json:"vm"`
	Container []string `json:"container"`
	Left      []string `json:"left,omitempty"`
}

// WriteVFIOReady replaces the readiness file at path with r (indented
// JSON), atomically; an unchanged report writes nothing.
func WriteVFIOReady(path string, r *VFIOReady) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err := atomicfile.Write(path, buf.Bytes(), 0o644)
	return err
}

// RemoveVFIOReady removes the readiness file (a link there itself, never
// its target); a missing file is no error.
func RemoveVFIOReady(path string) error { return atomicfile.Remove(path) }

// ReadVFIOReady reads a readiness file the daemon wrote (what device
// plugins, the validator and the demo wait for) through atomicfile.Read:
// a link, a FIFO or an oversized file there is an error naming it.
func ReadVFIOReady(path string) (*VFIOReady, error) {
	b, err := atomicfile.Read(path)
	if err != nil {
		return nil, err
	}
	return ParseVFIOReady(path, b)
}

// ParseVFIOReady parses a readiness file's content; errors name path.
func ParseVFIOReady(path string, b []byte) (*VFIOReady, error) {
	var r VFIOReady
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Judge says whether the report shows a live, ready VFIO manager at now,
// and why not: a report whose heartbeat expired is a dead daemon's (killed
// with -9, its file left behind), whatever it says.
func (r *VFIOReady) Judge(now time.Time) (bool, string) {
	switch {
	case r.Expires.IsZero() || !now.Before(r.Expires):
		return false, fmt.Sprintf("the VFIO manager (pid %d) has not written its readiness since %s: it is not running",
			r.PID, r.Heartbeat.Format(time.RFC3339))
	case r.Error != "":
		return false, "cannot reconcile: " + r.Error
	case !r.Ready:
		if r.Reason == "" {
			return false, "not ready"
		}
		return false, r.Reason
	}
	return true, ""
}

// VFIOIsReady reports whether the readiness file at path shows a live,
// ready VFIO manager.
func VFIOIsReady(path string) bool {
	r, err := ReadVFIOReady(path)
	if err != nil {
		return false
	}
	ok, _ := r.Judge(time.Now())
	return ok
}
