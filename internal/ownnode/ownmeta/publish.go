package ownmeta

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Publisher writes one annotation of a daemon's own Node (a report of
// internal/wire, encoded) with a merge patch of that key alone, only when
// the value differs from the last one written: steady state costs no
// write. A failed write is sent again next time. It needs only the patch
// verb on Nodes (a release daemon's RBAC), no watch.
type Publisher struct {
	Patch      PatchFunc
	Node       string
	Annotation string

	mu      sync.Mutex
	written bool
	last    string
}

// Publish writes value unless it was the last value written. A nil
// Publisher writes nothing.
func (p *Publisher) Publish(ctx context.Context, value string) error {
	if p == nil {
		return nil
	}
	if p.Patch == nil || p.Node == "" || p.Annotation == "" {
		return fmt.Errorf("node %q: annotation %q: no patch, node or annotation to publish with", p.Node, p.Annotation)
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
