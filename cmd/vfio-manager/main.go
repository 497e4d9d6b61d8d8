// Command vfio-manager moves NVIDIA PCI functions between their host
// drivers and vfio-pci. See vfio/cli for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandbox-gpu/sandbox-gpu/vfio/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, cli.ErrRefused) {
		fmt.Fprintln(os.Stderr, "vfio-manager:", err)
	}
	os.Exit(cli.ExitCode(err))
}
