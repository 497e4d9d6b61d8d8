package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

func program(run func(context.Context, *Env) error) *Program {
	var name string
	return &Program{Name: "tool", Summary: "does things.", Notes: "Exit codes: 0, 1, 2.", Commands: []*Command{
		{Name: "status", Synopsis: "[--name N]", Roots: true, Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&name, "name", "x", "a name")
		}, Run: run},
		{Name: "daemon", Daemon: true, Run: run},
	}}
}

func runTool(t *testing.T, p *Program, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), p, args, IO{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func TestHelpAndUsage(t *testing.T) {
	p := program(func(context.Context, *Env) error { return nil })
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"status", "--help"}, {"daemon", "-h"}} {
		code, out, errOut := runTool(t, p, args...)
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, out, "tool", "%v", args)
		assert.Empty(t, errOut, "%v: help goes to stdout", args)
	}
	_, out, _ := runTool(t, p, "status", "--help")
	for _, f := range []string{"-sysfs-root", "-dev-root", "-proc-root", "-name", "-v"} {
		assert.Contains(t, out, f)
	}
	_, out, _ = runTool(t, p, "--help")
	assert.Contains(t, out, "tool status [--name N]")
	assert.Contains(t, out, "Exit codes")

	for _, args := range [][]string{{}, {"frobnicate"}, {"status", "--nope"}, {"status", "extra"}, {"status", "-v=eleven"}} {
		code, _, errOut := runTool(t, p, args...)
		assert.Equal(t, 1, code, "%v", args)
		assert.True(t, strings.HasPrefix(errOut, "tool: "), "%v: %q", args, errOut)
	}
}

func TestExitCodes(t *testing.T) {
	cases := map[string]struct {
		err  error
		code int
		out  string
	}{
		"done":    {nil, 0, ""},
		"usage":   {Usagef("--device %q: bad", "x"), 1, `tool: --device "x": bad`},
		"failure": {errors.New("boom"), 1, "tool: boom"},
		"refused": {ErrRefused, 2, "tool: some changes were refused"},
		"quiet":   {Quiet(ErrRefused), 2, ""},
		"wrapped": {Quiet(errors.Join(errors.New("x"), ErrRefused)), 2, ""},
	}
	for name, c := range cases {
		p := program(func(context.Context, *Env) error { return c.err })
		code, _, errOut := runTool(t, p, "status")
		assert.Equal(t, c.code, code, name)
		if c.out == "" {
			assert.Empty(t, errOut, name)
		} else {
			assert.Contains(t, errOut, c.out, name)
		}
	}
}

// TestOneLogFormat: the logger and klog both write JSON lines; -v shows V(1).
func TestOneLogFormat(t *testing.T) {
	p := program(func(_ context.Context, env *Env) error {
		env.Log.Info("hello", "node", "gpu-1")
		env.Log.V(1).Info("detail")
		env.Log.V(2).Info("too deep")
		klog.InfoS("from klog", "pod", "p")
		return errors.New("daemon failed")
	})
	code, _, errOut := runTool(t, p, "daemon", "-v")
	assert.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	var msgs []string
	for _, l := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "every line is JSON: %q", l)
		msgs = append(msgs, rec["msg"].(string))
	}
	assert.Equal(t, []string{"hello", "detail", "from klog", "Stopped"}, msgs, "the daemon's final error is logged once, as JSON")
	assert.Contains(t, errOut, `"node":"gpu-1"`)
	assert.Contains(t, errOut, `"level":"DEBUG","msg":"detail"`)
	assert.Contains(t, errOut, `"err":"daemon failed"`)
}

// TestRoots: the root flags reach the command as given; unset they are
// empty, the host model's defaults (internal/hostroots fills them in).
func TestRoots(t *testing.T) {
	var got Roots
	p := program(func(_ context.Context, env *Env) error {
		got = env.Roots
		return nil
	})
	_, _, _ = runTool(t, p, "status", "--sysfs-root", "/a/sys", "--dev-root=/a/dev", "--proc-root", "/a/proc")
	assert.Equal(t, Roots{Sysfs: "/a/sys", Dev: "/a/dev", Proc: "/a/proc"}, got)
	_, _, _ = runTool(t, p, "status")
	assert.Equal(t, Roots{}, got)
}

// TestHealthDetailsStayOnTheHost: the network sees a bare status; callers
// on this host see the report (which may name host processes).
func TestHealthDetailsStayOnTheHost(t *testing.T) {
	env := &Env{health: &health{}, Metrics: newRegistry()}
	ready := false
	env.AddReady("vfio", func() (bool, any) { return ready, map[string]any{"heldBy": "qemu-kvm (pid 4242)"} })
	h := env.Handler()
	get := func(path, remote string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	code, body := get("/readyz", "203.0.113.7:40000")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "not ready\n", body)
	code, body = get("/readyz", "127.0.0.1:40000")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "qemu-kvm (pid 4242)")
	ready = true
	code, body = get("/readyz", "203.0.113.7:40000")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
	code, _ = get("/healthz", "203.0.113.7:40000")
	assert.Equal(t, http.StatusOK, code, "no liveness check: alive")
	code, body = get("/metrics", "203.0.113.7:40000")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "go_goroutines")
	assert.Contains(t, body, "process_resident_memory_bytes")
	assert.NotContains(t, body, "qemu-kvm")
}

func TestListener(t *testing.T) {
	var body string
	p := &Program{Name: "d", Summary: "a daemon.", Commands: []*Command{{Listen: true, HealthAddr: ":0", Daemon: true,
		Run: func(_ context.Context, env *Env) error {
			env.AddReady("x", func() (bool, any) { return true, "fine" })
			resp, err := http.Get("http://" + env.ListenAddr() + "/readyz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			body = string(b)
			return err
		}}}}
	code, _, errOut := runTool(t, p, "--health-addr=127.0.0.1:0")
	assert.Equal(t, 0, code, errOut)
	assert.JSONEq(t, `{"ok":true,"checks":{"x":{"ok":true,"detail":"fine"}}}`, body, "loopback callers get the details")
	code, _, errOut = runTool(t, p, "--health-addr=256.0.0.1:1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "health address 256.0.0.1:1")
}
