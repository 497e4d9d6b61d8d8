// Command kubevirt-device-plugin advertises passthrough GPUs and vGPUs to
// the kubelet for KubeVirt virtual machines (see package kubevirt).
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/kubevirt"
)

func main() { os.Exit(shell.Main(kubevirt.Program())) }
