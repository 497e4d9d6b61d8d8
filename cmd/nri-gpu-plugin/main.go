// Command nri-gpu-plugin is a containerd NRI plugin that gives each
// ordinary container exactly the GPUs the kubelet allocated to it (see
// packages nri and nri/cli). `nri-gpu-plugin generate-cdi` writes a GPU CDI
// spec for nodes without nvidia-ctk's.
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/nri/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
