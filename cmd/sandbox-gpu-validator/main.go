// Command sandbox-gpu-validator checks a sandbox GPU node's operands (VFIO
// manager ready, device plugin resources advertised) and publishes the
// KubeVirt device plugin's permittedHostDevices on its own Node; its
// discover command is the GPU discovery agent that labels its own Node
// from sysfs (see package validator/cli).
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/validator/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
