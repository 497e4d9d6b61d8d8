package cli

import (
	"context"
	"io"
)

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return &UsageError{Msg: "daemon: not built yet"}
}
