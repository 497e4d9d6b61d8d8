// Package nri is a containerd NRI plugin that gives each ordinary container
// exactly the GPUs the kubelet allocated to it.
//
// On CreateContainer it asks the kubelet's PodResources API which device
// IDs of the configured resources (nvidia.com/gpu and MIG resources by
// default) the container holds, maps them to CDI device names of the GPU
// CDI spec (kind nvidia.com/gpu by default) and injects them: as CDI device
// requests where the runtime resolves CDI (containerd 2.1 and later), or as
// the resolved edits (device nodes, mounts, env) otherwise.
//
// Safety rules:
//   - a container without an allocation gets no GPU device node, whatever
//     its env or annotations say: NVIDIA_VISIBLE_DEVICES is set to "void"
//     and cdi.k8s.io/ and nvidia.cdi.k8s.io/ annotations naming the GPU
//     kind are removed, so neither NVIDIA's hooks nor its runtime inject
//     anything later;
//   - a container with an allocation gets only its devices;
//   - GPU device nodes the runtime itself already put into a container
//     (from a CDI request in its config) that the kubelet did not allocate
//     refuse the container: NRI up to v0.12.5, so containerd 2.4, drops a
//     plugin's removal of such a device (containerd/nri#216). Failing open,
//     they are removed where the runtime honours it and denied in the
//     device cgroup everywhere;
//   - annotation requests are honoured only in configured namespaces;
//   - sandboxed pods (Kata's runtime handlers as configured, else a
//     handler matching kata*) are left alone;
//   - every GPU CDI spec it injects is checked whole (hooks, mounts, device
//     nodes, env; Policy) before anything is adjusted: anything else
//     refuses the container, naming the spec file and the entry;
//   - pods in a user namespace (hostUsers: false) are refused with a clear
//     error when the devices' CDI edits carry OCI hooks, since such hooks
//     must read the bundle from inside the user namespace and fail
//     obscurely there. The spec from `nri-gpu-plugin generate-cdi` has no
//     hooks (it mounts the driver libraries by their SONAMEs instead).
//
// Failure policy: fail closed by default (creation of a container with an
// allocation fails with a message naming the pod, container and missing
// GPUs; while the kubelet cannot be asked, creation of a container that may
// need a GPU fails, see mayNeedGPU); fail open on request.
package nri
