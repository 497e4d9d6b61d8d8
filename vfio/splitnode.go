package vfio

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/nodereport"
)

// NodeSplit is a mixed node's split as its own Node declares it: the
// admin's names.VMGPUsAnnotation, followed by a watch, and the daemon's
// report published back in names.VMGPUsReportAnnotation.
type NodeSplit struct {
	watch *nodereport.AnnotationWatch
	pub   *nodereport.Publisher
	log   logr.Logger
}

// NewNodeSplit follows node's annotation through c; Run must run for the
// declaration to be known.
func NewNodeSplit(c *nodereport.Client, node string, log logr.Logger) *NodeSplit {
	return &NodeSplit{
		watch: &nodereport.AnnotationWatch{Client: c, Node: node, Annotation: names.VMGPUsAnnotation, Log: log},
		pub:   &nodereport.Publisher{Node: node, Annotation: names.VMGPUsReportAnnotation, Patch: c.PatchNode},
		log:   log,
	}
}

// Run watches the Node until ctx ends.
func (n *NodeSplit) Run(ctx context.Context) { n.watch.Run(ctx) }

// Declaration is the daemon's view of the annotation (absent is every GPU).
func (n *NodeSplit) Declaration() *Declaration {
	return &Declaration{
		Source:  fmt.Sprintf("node %s: annotation %s", n.watch.Node, n.watch.Annotation),
		Changed: n.watch.Changed(),
		Get: func() (string, error) {
			v, _, err := n.watch.Value()
			return v, err
		},
	}
}

// Publish writes the report of a reconcile on the Node when it changed (a
// failed write is logged and tried at the next reconcile). Before the Node
// was first read nothing is written: the API server could not be reached,
// and the reason is on /readyz and in the ready file.
func (n *NodeSplit) Publish(ctx context.Context, rep *ReadyReport) {
	declared, _, err := n.watch.Value()
	if err != nil {
		return
	}
	if err := n.pub.PublishValue(ctx, SplitReport(rep, declared).Encode()); err != nil && ctx.Err() == nil {
		n.log.Error(err, "Cannot publish the split report")
	}
}

// SplitReport is a daemon's report for its Node: the split and what is
// left, or why the declaration (declared, when the report has no split) is
// not followed.
func SplitReport(rep *ReadyReport, declared string) nodereport.Split {
	s := nodereport.Split{Declared: declared, Ready: rep.Ready, Reason: rep.Reason, VM: []string{}, Container: []string{}}
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
