// Command kata-device-plugin advertises passthrough GPUs (nvidia.com/pgpu)
// and NVSwitches to the kubelet for Kata Containers, with a CDI spec (see
// packages kata and kata/cli).
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/kata/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
