//go:build tools

// Package tools pins the programs that hack/envtest-assets.sh and hack/fetch-cluster.sh build from
// this module, so that go.mod and go.sum hold everything they need. The tools build tag keeps it
// out of every normal build, vet and test (a blank import of a main package only compiles
// nowhere).
//
// kube-apiserver comes from k8s.io/kubernetes (pinned in go.mod together with the staging
// replace block) and etcd from the etcd server module that k8s.io/kubernetes itself requires,
// so both match the Kubernetes version the suites are written against. The kubelet,
// kube-controller-manager and kube-scheduler of the one-node cluster (test/cluster) come from the
// same k8s.io/kubernetes.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
