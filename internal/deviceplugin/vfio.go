package deviceplugin

import (
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// HostDev is where device nodes are on the node, as the container runtime
// sees them (not where this process may have the host's /dev mounted).
const HostDev = "/dev"

// VFIOSpecs are the device nodes a container needs for one VFIO group: the
// legacy container /dev/vfio/vfio and group node, plus, with iommufd,
// /dev/iommu and the function's /dev/vfio/devices/vfioN cdevs.
func VFIOSpecs(group int, cdevs []string, iommufd bool) []*pluginapi.DeviceSpec {
	specs := []*pluginapi.DeviceSpec{
		nodeSpec(HostDev + "/vfio/vfio"),
		nodeSpec(HostDev + "/vfio/" + strconv.Itoa(group)),
	}
	if iommufd {
		specs = append(specs, nodeSpec(HostDev+"/iommu"))
		for _, c := range cdevs {
			specs = append(specs, nodeSpec(HostDev+"/vfio/devices/"+c))
		}
	}
	return specs
}

func nodeSpec(path string) *pluginapi.DeviceSpec {
	return &pluginapi.DeviceSpec{HostPath: path, ContainerPath: path, Permissions: "mrw"}
}
