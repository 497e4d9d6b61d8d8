package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatus writes obj's status as a JSON merge patch (RFC 7386) of the
// status subresource against before, a DeepCopy taken before the reconcile
// changed it: only what changed is sent, and no resourceVersion, so a write
// of another field in between never fails it (an Update would conflict).
// Callers skip the call when nothing changed.
func patchStatus(ctx context.Context, c client.Client, obj, before client.Object) error {
	return c.Status().Patch(ctx, obj, statusMergePatch{before: before})
}

// statusMergePatch is a merge patch of .status from before to the object
// it is applied with. A zero number or false in before may be absent on the
// server (fields without omitempty read back as zero), so before's zeros
// count as absent: the patch then carries such a field whole whenever it is
// sent at all, and a required field beside a changed one is never left out
// of an object the server had not stored yet.
type statusMergePatch struct{ before client.Object }

func (p statusMergePatch) Type() types.PatchType { return types.MergePatchType }

func (p statusMergePatch) Data(obj client.Object) ([]byte, error) {
	before, err := statusOf(p.before)
	if err != nil {
		return nil, err
	}
	after, err := statusOf(obj)
	if err != nil {
		return nil, err
	}
	pruneZeros(before)
	return json.Marshal(map[string]any{"status": mergePatch(before, after)})
}

// statusOf returns obj's .status as JSON values.
func statusOf(obj client.Object) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%s %s: encode: %w", reflect.TypeOf(obj).Elem().Name(), obj.GetName(), err)
	}
	var m struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s %s: decode: %w", reflect.TypeOf(obj).Elem().Name(), obj.GetName(), err)
	}
	if m.Status == nil {
		m.Status = map[string]any{}
	}
	return m.Status, nil
}

// mergePatch is the RFC 7386 merge patch that turns before into after:
// changed members (objects member by member), null for removed ones.
func mergePatch(before, after map[string]any) map[string]any {
	patch := map[string]any{}
	for k := range before {
		if _, ok := after[k]; !ok {
			patch[k] = nil
		}
	}
	for k, a := range after {
		b, ok := before[k]
		if ok && reflect.DeepEqual(a, b) {
			continue
		}
		am, aObj := a.(map[string]any)
		bm, bObj := b.(map[string]any)
		if ok && aObj && bObj {
			patch[k] = mergePatch(bm, am)
			continue
		}
		patch[k] = a
	}
	return patch
}

// pruneZeros removes zero numbers and false from objects, recursively
// (lists are compared whole and left alone).
func pruneZeros(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case float64:
			if v == 0 {
				delete(m, k)
			}
		case bool:
			if !v {
				delete(m, k)
			}
		case map[string]any:
			pruneZeros(v)
		}
	}
}

// cacheFence keeps a reconciler from acting on its own writes' past: after
// it writes an object, the cache may still hand out the version the write
// replaced, and a reconcile of that version would take the same step again
// (and report it twice). It remembers, per object name, the
// resourceVersion its last write replaced; only equality is compared (a
// resourceVersion is opaque).
type cacheFence struct {
	mu         sync.Mutex
	superseded map[string]string
}

// wrote records that a write replaced version rv of the object name.
func (f *cacheFence) wrote(name, rv string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.superseded == nil {
		f.superseded = map[string]string{}
	}
	f.superseded[name] = rv
}

// stale reports whether rv is the version the last write of name replaced:
// the cache has not caught up. A newer version clears the record.
func (f *cacheFence) stale(name, rv string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.superseded[name]
	if ok && old == rv {
		return true
	}
	delete(f.superseded, name)
	return false
}

// forget drops what is known of name (the object is gone).
func (f *cacheFence) forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.superseded, name)
}
