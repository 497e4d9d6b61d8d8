// Package jsonout writes the JSON reports that the command-line tools print
// (vfio-manager, vgpu-device-manager): indented, with empty lists as [] so
// that a reader never meets null where contracts.md promises a list.
package jsonout

import (
	"encoding/json"
	"io"
)

// Write writes v to w as JSON indented by two spaces, with a final newline.
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// List returns s, or an empty list where s is nil, so that it encodes as
// [] rather than null.
func List[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
