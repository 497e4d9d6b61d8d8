package vfio

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// readAliases reads modules.alias. Without a kernel release (a proc root
// with no sys/kernel/osrelease, and no --modules-dir) there is no modules
// folder to read: no aliases, so every function takes plain vfio-pci and
// returns to the driver sysfs shows, with a warning saying so.
func readAliases(h HostView) ([]host.Alias, string, error) {
	aliases, err := h.Aliases()
	if errors.Is(err, host.ErrNoKernelRelease) {
		return nil, noModulesWarning(err), nil
	}
	return aliases, "", err
}

// vfioDriverState is whether vfio-pci is loaded and loadable; without a
// kernel release, loadable is unknown (false) and a warning says why.
func vfioDriverState(h HostView) (host.DriverState, string, error) {
	st, err := h.DriverStateOf("vfio-pci", "vfio_pci")
	if errors.Is(err, host.ErrNoKernelRelease) {
		return st, noModulesWarning(err), nil
	}
	return st, "", err
}

func noModulesWarning(err error) string {
	return fmt.Sprintf("%v: no modules.alias to find vfio variant drivers, using vfio-pci (give --modules-dir)", err)
}

// LogWarnings logs each warning at level WARN.
func LogWarnings(log logr.Logger, warnings []string) {
	if len(warnings) == 0 {
		return
	}
	l := slog.New(logr.ToSlogHandler(log))
	for _, w := range warnings {
		l.Warn(w)
	}
}

func appendWarning(ws []string, w string) []string {
	if w == "" {
		return ws
	}
	return append(ws, w)
}
