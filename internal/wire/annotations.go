package wire

// The Node annotation payloads: what a node daemon writes on its own Node
// and the operator (and the demo) reads, each a type with its writer
// (Encode, the annotation's value) and its reader (Parse...). The keys are
// in internal/names; the Node is written through internal/ownnode.

import (
	"encoding/json"
	"fmt"
)

// ReleaseReport is how a release daemon (vfio-manager daemon --release,
// vgpu-device-manager run --release) tells the operator how its release
// goes, in names.ReleaseReportAnnotation(<operand>) on its own Node,
// written only when it changes. The pod's readiness says whether the
// release is done; the report says why not, so the operator can put the
// reason in the node's SandboxGPUNode status.
//
//	done    every function (vGPU) the operand made is returned (removed)
//	reason  why not, in a sentence per device ("0000:3b:00.0: in use: ...")
//	left    what stays: functions on vfio, GPUs with vGPUs or VFs
type ReleaseReport struct {
	Done   bool     `json:"done"`
	Reason string   `json:"reason,omitempty"`
	Left   []string `json:"left,omitempty"`
}

// Encode is the annotation's value.
func (r ReleaseReport) Encode() string {
	b, _ := json.Marshal(r) // a struct of strings and a bool always encodes
	return string(b)
}

// ParseReleaseReport reads an annotation's value.
func ParseReleaseReport(s string) (ReleaseReport, error) {
	return parseAnnotation[ReleaseReport]("release report", s)
}

// SplitReport is the VFIO manager's report of a mixed node, in the Node's
// names.VMGPUsReportAnnotation (it follows the admin's declaration in
// names.VMGPUsAnnotation):
//
//	declared   the Node's sandbox-gpu.io/vm-gpus ("" when absent: all)
//	ready      every GPU is where the split wants it
//	vm         the VM GPUs (on vfio), by PCI address
//	container  the container GPUs (on their host driver)
//	left       GPUs not yet where the split wants them (in use, refused)
//	reason     why not ready, in a sentence per GPU; or why the value is bad
type SplitReport struct {
	Declared  string   `json:"declared"`
	Ready     bool     `json:"ready"`
	VM        []string `json:"vm"`
	Container []string `json:"container"`
	Left      []string `json:"left,omitempty"`
	Reason    string   `json:"reason,omitempty"`
}

// Encode is the annotation's value.
func (s SplitReport) Encode() string {
	if s.VM == nil {
		s.VM = []string{}
	}
	if s.Container == nil {
		s.Container = []string{}
	}
	b, _ := json.Marshal(s) // strings and a bool always encode
	return string(b)
}

// ParseSplitReport reads a split report.
func ParseSplitReport(s string) (SplitReport, error) {
	return parseAnnotation[SplitReport]("split report", s)
}

// The permitted host devices (names.PermittedAnnotation): the validator
// publishes, compact, what the KubeVirt plugin's permitted file holds
// (ReadPermitted) for the operator to merge into the KubeVirt CR. The
// payload is KubeVirt's own PermittedHostDevices, the type parameter, so
// that both ends share KubeVirt's one declaration and wire links no
// Kubernetes API.

// EncodePermitted is the annotation's value of p: compact JSON.
func EncodePermitted[T any](p T) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("permitted host devices: %w", err)
	}
	return string(b), nil
}

// ParsePermitted reads the annotation's value. The error names the payload
// but not the value, which may be large (up to the 32 KiB admission lets
// through) and lands in the operator's logs and events.
func ParsePermitted[T any](s string) (T, error) {
	var p T
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		var zero T
		return zero, fmt.Errorf("permitted host devices (%d bytes): %w", len(s), err)
	}
	return p, nil
}

// parseAnnotation reads an annotation's JSON value; the error names what
// it is and the value.
func parseAnnotation[T any](what, s string) (T, error) {
	var r T
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		var zero T
		return zero, fmt.Errorf("%s %q: %w", what, s, err)
	}
	return r, nil
}
