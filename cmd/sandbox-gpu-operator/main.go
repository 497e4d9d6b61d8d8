// Command sandbox-gpu-operator runs the sandbox GPU operator: per-node
// workload configs, operand DaemonSets and safe transitions (see package
// operator/cli).
package main

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/operator/cli"
)

func main() { os.Exit(shell.Main(cli.Program())) }
