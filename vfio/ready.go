package vfio

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// ReadyReport is the content of the readiness file and of /readyz. The
// daemon rewrites the file at every reconcile and every heartbeat, ready or
// not, so readers know why; a graceful stop removes it.
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
type ReadyReport struct {
	Ready     bool      `json:"ready"`
	Reason    string    `json:"reason,omitempty"`
	Time      time.Time `json:"time"`
	VFIO      []string  `json:"vfio"`
	Actions   []Action  `json:"actions"`
	Refused   []Refusal `json:"refused"`
	Error     string    `json:"error,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Heartbeat time.Time `json:"heartbeat"`
	Expires   time.Time `json:"expires"`
	// Split is how the node's GPUs split between VMs and containers, when
	// a split is declared (vmGPUs, --vm-gpus or the Node's annotation).
	Split *Split `json:"split,omitempty"`
}

// judgeRefusals says whether a reconcile with these refusals leaves the
// node ready: any refusal means a selected function is not where it should
// be (IOMMU off, a group shared with a busy device, a GPU in use), except a
// function the desired state names that this node does not have (a config
// shared by nodes of different shapes).
func judgeRefusals(refused []Refusal) (bool, string) {
	var reasons []string
	for _, r := range refused {
		if strings.HasPrefix(r.Reason, "not found:") {
			continue
		}
		reasons = append(reasons, fmt.Sprintf("%s: %s", r.Address, r.Reason))
	}
	if len(reasons) == 0 {
		return true, ""
	}
	return false, strings.Join(reasons, "; ")
}

// ReadReadyFile reads a readiness file the daemon wrote (what device
// plugins, the validator and the demo wait for) through atomicfile.Read:
// a link, a FIFO or an oversized file there is an error naming it.
func ReadReadyFile(path string) (*ReadyReport, error) {
	b, err := atomicfile.Read(path)
	if err != nil {
		return nil, err
	}
	return ParseReadyReport(path, b)
}

// ParseReadyReport parses a readiness file's content; errors name path.
func ParseReadyReport(path string, b []byte) (*ReadyReport, error) {
	var r ReadyReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Judge says whether the report shows a live, ready VFIO manager at now,
// and why not: a report whose heartbeat expired is a dead daemon's (killed
// with -9, its file left behind), whatever it says.
func (r *ReadyReport) Judge(now time.Time) (bool, string) {
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

// IsReady reports whether the readiness file at path shows a live, ready
// VFIO manager.
func IsReady(path string) bool {
	r, err := ReadReadyFile(path)
	if err != nil {
		return false
	}
	ok, _ := r.Judge(time.Now())
	return ok
}
