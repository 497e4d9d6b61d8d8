package shell

import (
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// newHandler is the one log format of every binary: JSON lines on stderr
// ({"time","level","msg","logger",...}); verbosity N shows V(N) logs.
// klog (client-go) and, in a binary, grpc-go are routed into it so no
// plain-text line is mixed into the JSON.
func newHandler(stderr io.Writer, verbosity int) slog.Handler {
	return slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.Level(-verbosity), ReplaceAttr: debugLevels})
}

// logger is the command's logger on h, with klog routed into h.
func logger(h slog.Handler, name string) logr.Logger {
	klog.SetSlogLogger(slog.New(h).With("logger", "klog"))
	return logr.FromSlogHandler(h).WithValues("logger", name)
}

// debugLevels names every V(n) level DEBUG (slog would print DEBUG+3 for V(1)).
func debugLevels(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.LevelKey && len(groups) == 0 {
		if l, ok := a.Value.Any().(slog.Level); ok && l < slog.LevelInfo {
			return slog.String(slog.LevelKey, "DEBUG")
		}
	}
	return a
}
