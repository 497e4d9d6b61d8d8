// Command vfio-manager moves NVIDIA PCI functions between their host
// drivers and vfio-pci. See vfio/cli for the commands.
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/vfio/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
