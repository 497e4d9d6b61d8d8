package simnode

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// OntoHost puts an operand pod, as the operator's DaemonSet made it for a real node, on the
// simulated host whose tree is under root: the one-node cluster's admission webhook calls it for
// every Pod created in the operand namespace (test/cluster), so that the product's DaemonSets stay
// exactly what a user's cluster gets and only their pods, in the test cluster, read the tree.
//
// A container that mounts the node's /sys reads the host: its hostPath mounts of /sys, /dev and
// /dev/vfio are replaced by the tree's sys, dev and proc folders, each mounted at its own path (the
// tree's symbolic links and the device paths the plugins report then resolve the same inside and
// outside the container), sys and dev writable only where the node's were, proc read-only, the
// folders required to exist (HostPathDirectory); it is handed --sysfs-root, --dev-root and
// --proc-root there. The device plugins are also handed --node-dev-root (the runtime finds the
// tree's device nodes there), the NRI plugin --dev-root alone (its CDI policy checks the specs'
// host paths there; it opens none, so nothing is mounted). Any other pod is left alone (changed
// false). A pod that names one of those flags itself, or has a volume of the names used here, is
// an error: the product changed, and this rewrite must be looked at again.
func OntoHost(root string, pod *corev1.Pod) (changed bool, err error) {
	if !path.IsAbs(root) || path.Clean(root) != root {
		return false, fmt.Errorf("simnode: host root %q is not a clean absolute path", root)
	}
	dev := path.Join(root, "dev")
	flags := map[string][]string{
		names.KubeVirtDevicePlugin: {"--node-dev-root=" + dev},
		names.KataDevicePlugin:     {"--node-dev-root=" + dev},
		names.NRIPlugin:            {"--dev-root=" + dev},
	}
	hostPaths := map[string]string{} // volume name -> the node's folder, for the folders replaced
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && slices.Contains([]string{"/sys", "/dev", "/dev/vfio"}, v.HostPath.Path) {
			hostPaths[v.Name] = v.HostPath.Path
		}
		if strings.HasPrefix(v.Name, treeVolumePrefix) {
			return false, fmt.Errorf("simnode: pod %s: volume %s: the name of a tree folder", podName(pod), v.Name)
		}
	}
	readers := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		var add []string
		if c.Name == pod.Labels[names.OperandLabel] {
			add = flags[c.Name]
		}
		mounts, writable, reads := withoutNodeFolders(c.VolumeMounts, hostPaths)
		if reads {
			readers++
			c.VolumeMounts = mounts
			for _, dir := range []string{"sys", "dev", "proc"} {
				p := path.Join(root, dir)
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: treeVolumePrefix + dir, MountPath: p,
					ReadOnly: dir == "proc" || !writable["/"+dir]})
			}
			add = append([]string{"--sysfs-root=" + path.Join(root, "sys"), "--dev-root=" + dev, "--proc-root=" + path.Join(root, "proc")}, add...)
		}
		for _, a := range add {
			flag, _, _ := strings.Cut(a, "=")
			if slices.ContainsFunc(c.Args, func(s string) bool { return s == flag || strings.HasPrefix(s, flag+"=") }) {
				return false, fmt.Errorf("simnode: pod %s container %s: already has %s (%v)", podName(pod), c.Name, flag, c.Args)
			}
		}
		c.Args = append(c.Args, add...)
		changed = changed || len(add) > 0
	}
	if readers == 0 {
		return changed, nil
	}
	used := map[string]bool{}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, m := range c.VolumeMounts {
			used[m.Name] = true
		}
	}
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return hostPaths[v.Name] != "" && !used[v.Name] })
	dir := corev1.HostPathDirectory
	for _, d := range []string{"sys", "dev", "proc"} {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: treeVolumePrefix + d,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path.Join(root, d), Type: &dir}}})
	}
	return true, nil
}

// treeVolumePrefix begins the names of the volumes of the tree's folders.
const treeVolumePrefix = "simulated-host-"

// withoutNodeFolders drops the mounts of the node's /sys, /dev and /dev/vfio (hostPaths: volume
// name -> folder) and says which of them were writable; reads is whether /sys was mounted.
func withoutNodeFolders(mounts []corev1.VolumeMount, hostPaths map[string]string) (kept []corev1.VolumeMount, writable map[string]bool, reads bool) {
	writable = map[string]bool{}
	for _, m := range mounts {
		folder, ok := hostPaths[m.Name]
		if !ok {
			kept = append(kept, m)
			continue
		}
		reads = reads || folder == "/sys"
		writable[folder] = !m.ReadOnly
	}
	if !reads {
		return mounts, nil, false
	}
	return kept, writable, true
}

// podName names a pod being created (the DaemonSet controller's have a generated name).
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Namespace + "/" + pod.Name
	}
	return pod.Namespace + "/" + pod.GenerateName + "*"
}
