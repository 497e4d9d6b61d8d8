// Package nodereport is how a release daemon (vfio-manager daemon
// --release, vgpu-device-manager run --release) tells the operator how its
// release goes: a small JSON report in an annotation on its own Node
// (names.ReleaseReportAnnotation), written only when it changes. The pod's
// readiness says whether the release is done; the report says why not, so
// the operator can put the reason in the node's SandboxGPUNode status.
//
// The VFIO manager on a mixed node reports the same way how its GPUs split
// (Split, in names.VMGPUsReportAnnotation), and follows the admin's
// declaration in the Node's names.VMGPUsAnnotation with an AnnotationWatch.
//
// The VFIO manager links no Kubernetes client: Client patches, reads and
// watches its Node with plain HTTPS requests on the pod's service account.
package nodereport

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Release is a release daemon's report.
//
//	done    every function (vGPU) the operand made is returned (removed)
//	reason  why not, in a sentence per device ("0000:3b:00.0: in use: ...")
//	left    what stays: functions on vfio, GPUs with vGPUs or VFs
type Release struct {
	Done   bool     `json:"done"`
	Reason string   `json:"reason,omitempty"`
	Left   []string `json:"left,omitempty"`
}

// Encode is the annotation's value.
func (r Release) Encode() string {
	b, _ := json.Marshal(r) // a struct of strings and a bool always encodes
	return string(b)
}

// Parse reads an annotation's value.
func Parse(s string) (Release, error) {
	var r Release
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Release{}, fmt.Errorf("release report %q: %w", s, err)
	}
	return r, nil
}

// Split is the VFIO manager's report of a mixed node, in the Node's
// names.VMGPUsReportAnnotation:
//
//	declared   the Node's sandbox-gpu.io/vm-gpus ("" when absent: all)
//	ready      every GPU is where the split wants it
//	vm         the VM GPUs (on vfio), by PCI address
//	container  the container GPUs (on their host driver)
//	left       GPUs not yet where the split wants them (in use, refused)
//	reason     why not ready, in a sentence per GPU; or why the value is bad
type Split struct {
	Declared  string   `json:"declared"`
	Ready     bool     `json:"ready"`
	VM        []string `json:"vm"`
	Container []string `json:"container"`
	Left      []string `json:"left,omitempty"`
	Reason    string   `json:"reason,omitempty"`
}

// Encode is the annotation's value.
func (s Split) Encode() string {
	if s.VM == nil {
		s.VM = []string{}
	}
	if s.Container == nil {
		s.Container = []string{}
	}
	b, _ := json.Marshal(s) // strings and a bool always encode
	return string(b)
}

// ParseSplit reads a split report.
func ParseSplit(s string) (Split, error) {
	var r Split
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Split{}, fmt.Errorf("split report %q: %w", s, err)
	}
	return r, nil
}

// PatchFunc sends a JSON merge patch of the named Node.
type PatchFunc func(ctx context.Context, node string, patch []byte) error

// Publisher writes one operand's report on its Node, only when it differs
// from the last one written (a failed write is tried again next time).
type Publisher struct {
	Node       string
	Annotation string
	Patch      PatchFunc

	mu      sync.Mutex
	written bool
	last    string
}

// Publish writes r unless it was the last report written.
func (p *Publisher) Publish(ctx context.Context, r Release) error {
	return p.PublishValue(ctx, r.Encode())
}

// PublishValue writes value (an encoded report: Release, Split) unless it
// was the last value written.
func (p *Publisher) PublishValue(ctx context.Context, value string) error {
	if p == nil || p.Patch == nil || p.Node == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.written && p.last == value {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{p.Annotation: value}}})
	if err != nil {
		return fmt.Errorf("node %s: %s: %w", p.Node, p.Annotation, err)
	}
	if err := p.Patch(ctx, p.Node, patch); err != nil {
		return fmt.Errorf("node %s: publish %s: %w", p.Node, p.Annotation, err)
	}
	p.written, p.last = true, value
	return nil
}
