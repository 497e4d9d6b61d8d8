// Package nodereport is how a release daemon (vfio-manager daemon
// --release, vgpu-device-manager run --release) tells the operator how its
// release goes: a small JSON report in an annotation on its own Node
// (names.ReleaseReportAnnotation), written only when it changes. The pod's
// readiness says whether the release is done; the report says why not, so
// the operator can put the reason in the node's SandboxGPUNode status.
//
// The VFIO manager links no Kubernetes client: InCluster patches the Node
// with one HTTPS request on the pod's service account.
package nodereport

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// PatchFunc sends a JSON merge patch of the named Node.
type PatchFunc func(ctx context.Context, node string, patch []byte) error

// Publisher writes one operand's report on its Node, only when it differs
// from the last one written (a failed write is tried again next time).
type Publisher struct {
	Node       string
	Annotation string
	Patch      PatchFunc

	mu   sync.Mutex
	last *Release
}

// Publish writes r unless it was the last report written.
func (p *Publisher) Publish(ctx context.Context, r Release) error {
	if p == nil || p.Patch == nil || p.Node == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last != nil && p.last.Done == r.Done && p.last.Reason == r.Reason && slices.Equal(p.last.Left, r.Left) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{p.Annotation: r.Encode()}}})
	if err != nil {
		return fmt.Errorf("node %s: release report: %w", p.Node, err)
	}
	if err := p.Patch(ctx, p.Node, patch); err != nil {
		return fmt.Errorf("node %s: publish %s: %w", p.Node, p.Annotation, err)
	}
	p.last = &r
	return nil
}
