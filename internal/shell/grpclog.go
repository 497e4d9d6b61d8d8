package shell

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/grpclog"
)

// grpcLogger routes grpc-go's logs (the kubelet clients and servers of the
// device plugins, the NRI plugin and the vGPU device manager) into the one
// log format, as "logger":"grpc". As grpc's own default logger, it shows
// errors only unless asked: warnings (such as a closing transport at every
// shutdown) with -v, info (connection chatter) with -v=2, as DEBUG. Fatal
// logs an error; grpclog itself then exits.
type grpcLogger struct {
	log       *slog.Logger
	verbosity int
}

// installGRPCLogs makes grpclog write through h. grpclog's logger is one
// per process and not safe to change while gRPC runs: only Main, once, at
// the start of the process, sets it.
func installGRPCLogs(h slog.Handler, verbosity int) {
	grpclog.SetLoggerV2(grpcLogger{log: slog.New(h).With("logger", "grpc"), verbosity: verbosity})
}

func (g grpcLogger) at(level slog.Level, msg string) {
	if level == slog.LevelWarn && g.verbosity < 1 {
		return
	}
	g.log.Log(context.Background(), level, msg)
}

func (g grpcLogger) Info(args ...any)   { g.at(slog.Level(-2), fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.at(slog.Level(-2), sprintln(args...)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.at(slog.Level(-2), fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.at(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.at(slog.LevelWarn, sprintln(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.at(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.at(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.at(slog.LevelError, sprintln(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.at(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)                 { g.Error(args...) }
func (g grpcLogger) Fatalln(args ...any)               { g.Errorln(args...) }
func (g grpcLogger) Fatalf(format string, args ...any) { g.Errorf(format, args...) }

// V reports whether grpc's verbosity level l is shown: up to -v's level.
func (g grpcLogger) V(l int) bool { return l <= g.verbosity }

// sprintln is fmt.Sprintln without the trailing newline (one log line).
func sprintln(args ...any) string {
	s := fmt.Sprintln(args...)
	return s[:len(s)-1]
}
