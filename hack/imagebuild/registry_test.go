package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// registry is Debian's docker-registry (the CNCF distribution registry,
// 2.8) serving on a loopback port from a temporary folder.
type registry struct {
	addr string // host:port
	logs *lockedBuffer
}

// startRegistry starts docker-registry for the test. Missing, it fails the
// test (CI must not skip it) unless SANDBOX_GPU_SKIP_MISSING_PEERS=1 is set
// outside CI, as everywhere in the repository (internal/testutil).
func startRegistry(t *testing.T) *registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		msg := "docker-registry not found: apt-get install -y docker-registry (Debian's distribution registry 2.8)"
		if os.Getenv("SANDBOX_GPU_SKIP_MISSING_PEERS") == "1" && os.Getenv("CI") != "true" {
			t.Skip(msg + " (SANDBOX_GPU_SKIP_MISSING_PEERS=1)")
		}
		t.Fatal(msg + " (outside CI, SANDBOX_GPU_SKIP_MISSING_PEERS=1 skips instead)")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	// Port 0: the registry picks a free port and logs it, so no other
	// process can take it between a pick here and its listen.
	write(t, cfg, fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: 127.0.0.1:0
  secret: imagebuild-test
`, filepath.Join(dir, "storage")), 0o644)

	cmd := exec.Command(bin, "serve", cfg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &registry{logs: &lockedBuffer{}}
	listening := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		re := regexp.MustCompile(`listening on (127\.0\.0\.1:[0-9]+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.logs.WriteString(line + "\n")
			if m := re.FindStringSubmatch(line); m != nil {
				select {
				case listening <- m[1]:
				default:
				}
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { <-done; exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("docker-registry's log:\n%s", r.logs.String())
		}
	})
	select {
	case r.addr = <-listening:
	case err := <-exited:
		t.Fatalf("docker-registry exited: %v\n%s", err, r.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("docker-registry did not say where it listens within 30 s:\n%s", r.logs.String())
	}
	deadline(t, 30*time.Second, "docker-registry answers /v2/", func() error {
		resp, err := http.Get("http://" + r.addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
	return r
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Push the archives to a real registry, then pull each back by digest and
// by tag: the same manifest, config and layer bytes come back.
func TestPushPullRealRegistry(t *testing.T) {
	reg := startRegistry(t)
	o := fakeRepo(t, "vfio-manager", "sandbox-gpu-operator")
	built, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// --registry renames (ghcr.io/sandbox-gpu/x:v0.1.0 becomes <addr>/mirror/x:v0.1.0);
	// --insecure is plain HTTP.
	var out bytes.Buffer
	if err := run(ctx, []string{"push", "--from", o.OutDir, "--registry", reg.addr + "/mirror/sandbox-gpu", "--insecure"}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("push printed:\n%s", out.String())
	for _, b := range built {
		if !regexp.MustCompile(regexp.QuoteMeta(reg.addr+"/mirror/sandbox-gpu/"+b.Binary+":v0.1.0") + ` +` + b.Digest + ` `).MatchString(out.String()) {
			t.Errorf("push did not print %s at %s", b.Binary, b.Digest)
		}
		pullAndCompare(t, reg.addr+"/mirror/sandbox-gpu/"+b.Binary, b)
	}

	// Without --registry, each archive goes to the name it carries; a
	// loopback registry is plain HTTP even without --insecure.
	o2 := o
	o2.Registry, o2.OutDir = reg.addr+"/own", t.TempDir()
	own, err := Build(o2)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := Push(ctx, PushOptions{From: o2.OutDir})
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != len(own) {
		t.Fatalf("pushed %+v", pushed)
	}
	for i, b := range own {
		if pushed[i].Ref != b.Ref || pushed[i].Digest != b.Digest {
			t.Errorf("pushed %+v, built %+v", pushed[i], b)
		}
		pullAndCompare(t, reg.addr+"/own/"+b.Binary, b)
	}

	if _, err := Push(ctx, PushOptions{From: t.TempDir(), Registry: reg.addr}); err == nil || !strings.Contains(err.Error(), "no archive") {
		t.Errorf("push of an empty folder: %v", err)
	}
}

func pullAndCompare(t *testing.T, repo string, b Result) {
	t.Helper()
	local, closeArchive, err := OpenArchive(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeArchive()
	want := local[0].Image

	byDigest, err := name.NewDigest(repo + "@" + b.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(byDigest)
	if err != nil {
		t.Fatalf("pull %s: %v", byDigest, err)
	}
	for _, c := range []struct {
		what      string
		got, want func() ([]byte, error)
	}{
		{"manifest", got.RawManifest, want.RawManifest},
		{"config", got.RawConfigFile, want.RawConfigFile},
	} {
		g, err1 := c.got()
		w, err2 := c.want()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s: pulled %s differs:\n%s\n%s", repo, c.what, g, w)
		}
	}
	gl, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := want.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(gl) != len(wl) {
		t.Fatalf("%s: %d layers pulled, %d pushed", repo, len(gl), len(wl))
	}
	for i := range gl {
		g := readAll(t, gl[i].Compressed)
		w := readAll(t, wl[i].Compressed)
		if !bytes.Equal(g, w) {
			t.Errorf("%s: layer %d differs after the round trip", repo, i)
		}
	}

	byTag, err := name.NewTag(repo + ":v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(byTag)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest.String() != b.Digest {
		t.Errorf("%s serves %s, want %s", byTag, desc.Digest, b.Digest)
	}
}

func readAll(t *testing.T, open func() (io.ReadCloser, error)) []byte {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
