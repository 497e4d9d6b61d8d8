package names

import (
	"net"
	"strconv"
)

// Health ports: the port of each program's --health-addr listener
// (/healthz, /readyz, /metrics), the default of its command where it has
// one, and what the operator's DaemonSets pass, probe and name. The
// operator runs in the pod network, the VFIO manager and its release in the
// host network on its loopback (LoopbackHost), so they may share 8081.
const (
	OperatorPort          = 8081
	VFIOManagerPort       = 8081
	ValidatorPort         = 8082
	NRIPluginPort         = 8083
	DevicePluginPort      = 8084 // the KubeVirt and the Kata device plugin (one per node)
	VGPUDeviceManagerPort = 8085 // and its release
	GPUDiscoveryPort      = 8086
	// VFIOReleasePort is the VFIO manager's release daemon's: it runs in
	// the host network beside a terminating VFIO manager while a node
	// leaves vm-passthrough, so it takes its own port.
	VFIOReleasePort = 8087
	// LoopbackHost is where host-network daemons listen: the node's
	// loopback only, never every interface of the host.
	LoopbackHost = "127.0.0.1"
)

// HealthAddr is a --health-addr value: port on host ("" for every address
// of the pod).
func HealthAddr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
