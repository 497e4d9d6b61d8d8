package names

import "testing"

// TestHealthPorts: the ports the manifests and the chart name (the
// operator's 8081 in its Deployment, the loopback listeners of the VFIO
// manager and its release) and the addresses built from them.
func TestHealthPorts(t *testing.T) {
	for name, c := range map[string]struct {
		got  string
		want string
	}{
		"operator":     {HealthAddr("", OperatorPort), ":8081"},
		"vfio-manager": {HealthAddr(LoopbackHost, VFIOManagerPort), "127.0.0.1:8081"},
		"vfio release": {HealthAddr(LoopbackHost, VFIOReleasePort), "127.0.0.1:8087"},
		"validator":    {HealthAddr("", ValidatorPort), ":8082"},
		"nri":          {HealthAddr("", NRIPluginPort), ":8083"},
		"plugins":      {HealthAddr("", DevicePluginPort), ":8084"},
		"vgpu":         {HealthAddr("", VGPUDeviceManagerPort), ":8085"},
		"discovery":    {HealthAddr("", GPUDiscoveryPort), ":8086"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, want %s", name, c.got, c.want)
		}
	}
}
