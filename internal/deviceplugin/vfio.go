package deviceplugin

import (
	"path"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DefaultNodeDev is where device nodes are on the node as the container
// runtime sees them (not where this process may have the host's /dev
// mounted): the host paths handed to the kubelet are under it.
const DefaultNodeDev = "/dev"

// VFIOSpecs are the device nodes a container needs for one VFIO group: the
// legacy container /dev/vfio/vfio and group node, plus, with iommufd,
// /dev/iommu and the function's /dev/vfio/devices/vfioN cdevs. Their host
// paths are under nodeDev (DefaultNodeDev when empty); inside the
// container they are always under /dev.
func VFIOSpecs(nodeDev string, group int, cdevs []string, iommufd bool) []*pluginapi.DeviceSpec {
	if nodeDev == "" {
		nodeDev = DefaultNodeDev
	}
	specs := []*pluginapi.DeviceSpec{
		nodeSpec(nodeDev, "vfio/vfio"),
		nodeSpec(nodeDev, "vfio/"+strconv.Itoa(group)),
	}
	if iommufd {
		specs = append(specs, nodeSpec(nodeDev, "iommu"))
		for _, c := range cdevs {
			specs = append(specs, nodeSpec(nodeDev, "vfio/devices/"+c))
		}
	}
	return specs
}

func nodeSpec(nodeDev, rel string) *pluginapi.DeviceSpec {
	return &pluginapi.DeviceSpec{HostPath: path.Join(nodeDev, rel), ContainerPath: path.Join("/dev", rel), Permissions: "mrw"}
}
