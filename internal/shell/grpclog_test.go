package shell

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/grpclog"
)

// grpcChildEnv makes the test binary run grpcChild as a program's main.
const grpcChildEnv = "SHELL_TEST_GRPC_CHILD"

func TestMain(m *testing.M) {
	if args := os.Getenv(grpcChildEnv); args != "" {
		os.Args = append([]string{"tool"}, strings.Fields(args)...)
		os.Exit(Main(program(func(context.Context, *Env) error {
			grpclog.Info("info from grpc")
			grpclog.Component("core").Warningf("warning from %s", "grpc's core")
			grpclog.Errorln("error", "from", "grpc")
			return nil
		})))
	}
	os.Exit(m.Run())
}

// TestGRPCLogsInTheOneFormat: in a binary (Main: a process of its own,
// since grpclog's logger is the process's), grpc-go's log lines come out as
// JSON lines with "logger":"grpc", its warnings with -v, its info with
// -v=2; nothing of grpc's plain-text default logger.
func TestGRPCLogsInTheOneFormat(t *testing.T) {
	run := func(args string) []map[string]any {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), grpcChildEnv+"="+args, "GRPC_GO_LOG_SEVERITY_LEVEL=info")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Run(), stderr.String())
		var recs []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &rec), "every line is JSON: %q", l)
			recs = append(recs, rec)
		}
		return recs
	}
	got := func(recs []map[string]any) []string {
		var out []string
		for _, r := range recs {
			assert.Equal(t, "grpc", r["logger"], "%v", r)
			assert.NotEmpty(t, r["time"], "%v", r)
			out = append(out, r["level"].(string)+" "+r["msg"].(string))
		}
		return out
	}
	assert.Equal(t, []string{"DEBUG info from grpc", "WARN [core] warning from grpc's core", "ERROR error from grpc"}, got(run("daemon -v=2")))
	assert.Equal(t, []string{"WARN [core] warning from grpc's core", "ERROR error from grpc"}, got(run("daemon -v")), "grpc's info only with -v=2")
	assert.Equal(t, []string{"ERROR error from grpc"}, got(run("daemon")), "grpc's warnings only with -v")
}
