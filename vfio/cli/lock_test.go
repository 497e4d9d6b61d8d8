package cli

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// TestCLIAndDaemonShareTheLock: on a real host both default to the same
// lock file, the one the DaemonSet mounts.
func TestCLIAndDaemonShareTheLock(t *testing.T) {
	for _, selection := range []bool{true, false} {
		var c common
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		c.register(fs, true)
		require.NoError(t, fs.Parse(nil))
		assert.Equal(t, names.RunPath(names.VFIOLockFile), c.lockPath(true), "selection %v", selection)
		assert.Empty(t, c.lockPath(false), "no host lock for another tree")
	}
	assert.Equal(t, "/run/sandbox-gpu/vfio-manager/vfio.lock", defaultLockFile)
}

// TestCLIWaitsForTheDaemon: while the daemon moves a GPU (a slow unbind),
// a host-side `vfio-manager unbind` on the same lock waits; it cannot run
// next to the daemon.
func TestCLIWaitsForTheDaemon(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	release := make(chan struct{})
	k.SetLatency(func(w hostsim.Write) time.Duration {
		if filepath.Base(w.Path) == "unbind" {
			<-release // the daemon sits inside its reconcile, holding the lock
		}
		return 0
	})
	lock := filepath.Join(t.TempDir(), "vfio.lock")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	daemonDone := make(chan int, 1)
	go func() {
		daemonDone <- shell.Run(ctx, ProgramOn(k), append([]string{"daemon", "--all", "--lock-file", lock, "--ready-dir", t.TempDir(), "--health-addr="},
			simFlags(k, "daemon")...), shell.IO{})
	}()
	testutil.Eventually(t, 10*time.Second, "the daemon starts unbinding the GPU", func() bool { return len(k.Writes()) > 0 })

	short, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	var out, errb bytes.Buffer
	unbind := append([]string{"unbind", "--all", "--lock-file", lock}, simFlags(k, "unbind")...)
	code := shell.Run(short, ProgramOn(k), unbind, shell.IO{Stdout: &out, Stderr: &errb})
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "held by another process")
	assert.Contains(t, errb.String(), lock)

	close(release)
	testutil.Eventually(t, 10*time.Second, "the daemon bound the GPU", func() bool { return k.DriverOf("0000:3b:00.0") == "vfio-pci" })
	code = shell.Run(context.Background(), ProgramOn(k), unbind, shell.IO{Stdout: &out, Stderr: &errb})
	assert.Equal(t, 0, code, errb.String())
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
	cancel()
	assert.Equal(t, 0, <-daemonDone)
}
