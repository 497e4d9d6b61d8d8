// Command kubevirt-device-plugin advertises passthrough GPUs and vGPUs to
// the kubelet for KubeVirt virtual machines (see packages kubevirt and
// kubevirt/cli).
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/kubevirt/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
