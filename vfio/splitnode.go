package vfio

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode/ownmeta"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// NodeSplit is a mixed node's split as its own Node declares it: the
// admin's names.VMGPUsAnnotation, followed by a watch of that Node alone
// (internal/ownnode/ownmeta: annotations are all it reads), and the
// daemon's report published back in names.VMGPUsReportAnnotation.
type NodeSplit struct {
	client  ownmeta.NodeClient
	node    string
	pub     *ownmeta.Publisher
	log     logr.Logger
	changed chan struct{} // poked after the first read and on each change

	mu      sync.Mutex
	watch   *ownmeta.Watcher // nil before Run started it
	synced  bool
	value   string
	present bool
}

// NewNodeSplit follows node's annotation through c (the daemon's:
// ownmeta.Metadata); Run must run for the declaration to be known.
func NewNodeSplit(c ownmeta.NodeClient, node string, log logr.Logger) *NodeSplit {
	return &NodeSplit{client: c, node: node, log: log, changed: make(chan struct{}, 1),
		pub: &ownmeta.Publisher{Patch: c.Patch, Node: node, Annotation: names.VMGPUsReportAnnotation}}
}

// Run watches the Node until ctx ends. Until the Node is first read the
// declaration is unknown (Declaration's Get says why); after that, an API
// server that cannot be reached leaves the last value in force, as does
// the Node's deletion, while the watch is retried.
func (n *NodeSplit) Run(ctx context.Context) {
	w, err := ownmeta.Start(ctx, n.client, n.node, func(old, cur metav1.Object) bool {
		return cur != nil && (old == nil || old.GetAnnotations()[names.VMGPUsAnnotation] != cur.GetAnnotations()[names.VMGPUsAnnotation])
	})
	if err != nil {
		n.log.Error(err, "Cannot watch the Node", "node", n.node)
		return
	}
	n.mu.Lock()
	n.watch = w
	n.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Kick():
		}
		if obj, ok := w.Get(); ok {
			if node, ok := obj.(metav1.Object); ok {
				n.set(node)
			}
		}
	}
}

// set records a read of the Node, signalling a change of the value.
func (n *NodeSplit) set(node metav1.Object) {
	value, present := node.GetAnnotations()[names.VMGPUsAnnotation]
	n.mu.Lock()
	changed := !n.synced || value != n.value || present != n.present
	n.synced, n.value, n.present = true, value, present
	n.mu.Unlock()
	if changed {
		select {
		case n.changed <- struct{}{}:
		default:
		}
	}
}

// get is the annotation's value ("" when absent); an error naming node and
// annotation (and the watch's last error) before the Node was first read.
func (n *NodeSplit) get() (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.synced {
		why := "not read yet"
		switch {
		case n.watch == nil:
		case n.watch.Synced():
			why += ": no such Node"
		case n.watch.LastError() != nil:
			why += ": " + n.watch.LastError().Error()
		}
		return "", fmt.Errorf("node %s: annotation %s: %s", n.node, names.VMGPUsAnnotation, why)
	}
	return n.value, nil
}

// Declaration is the daemon's view of the annotation (absent is every GPU).
func (n *NodeSplit) Declaration() *Declaration {
	return &Declaration{
		Source:  fmt.Sprintf("node %s: annotation %s", n.node, names.VMGPUsAnnotation),
		Changed: n.changed,
		Get:     n.get,
	}
}

// Publish writes the report of a reconcile on the Node when it changed (a
// failed write is logged and tried at the next reconcile). Before the Node
// was first read nothing is written: the API server could not be reached,
// and the reason is on /readyz and in the ready file.
func (n *NodeSplit) Publish(ctx context.Context, rep *ReadyReport) {
	declared, err := n.get()
	if err != nil {
		return
	}
	if err := n.pub.Publish(ctx, SplitReport(rep, declared).Encode()); err != nil && ctx.Err() == nil {
		n.log.Error(err, "Cannot publish the split report")
	}
}

// SplitReport is a daemon's report for its Node: the split and what is
// left, or why the declaration (declared, when the report has no split) is
// not followed.
func SplitReport(rep *ReadyReport, declared string) wire.SplitReport {
	s := wire.SplitReport{Declared: declared, Ready: rep.Ready, Reason: rep.Reason, VM: []string{}, Container: []string{}}
	if sp := rep.Split; sp != nil {
		s.Declared, s.VM, s.Container, s.Left = sp.Declared, strs(sp.VM), strs(sp.Container), strs(sp.Left)
	}
	if !s.Ready && s.Reason == "" {
		s.Reason = "not ready"
		if rep.Error != "" {
			s.Reason = rep.Error
		}
	}
	return s
}

func strs(as []host.Address) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, string(a))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
