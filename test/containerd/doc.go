// Package containerd holds the end-to-end suite of the NRI GPU plugin (cmd/nri-gpu-plugin) against a
// real containerd 2.x with NRI, running real runc containers: a generated containerd config under a
// short temporary folder, a busybox image imported with ctr, CRI driven from Go (k8s.io/cri-api), a
// fake kubelet PodResources v1 server, and a CDI spec of stand-in GPUs whose device nodes are
// character devices made with the numbers of /dev/null, /dev/zero and /dev/full.
//
// containerd, its runc shim, ctr, runc and the image come from hack/fetch-containerd.sh; without them
// the suite fails (testutil.MissingPeer) with how to install them. It needs root.
package containerd
