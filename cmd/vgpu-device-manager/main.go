// Command vgpu-device-manager creates and removes NVIDIA vGPUs (mdev and
// SR-IOV vendor-specific VFIO) as NVIDIA's vgpu-device-manager config
// format says, never one in use. See vgpu and vgpu/cli.
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
