package simnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

const within = 20 * time.Second

// namespace starts a process in a new private mount namespace (as the cluster's node namespace)
// and returns its namespace file; the process ends with the test.
func namespace(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "2147483647")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ns := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/mnt"
	self, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if l, err := os.Readlink(ns); err == nil && l != self {
			return ns
		}
		select {
		case <-ctx.Done():
			t.Fatalf("unshare made no mount namespace within %v", within)
		case <-tick.C:
		}
	}
}

// inNS runs a shell script in the namespace and returns its output.
func inNS(t *testing.T, ns, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "--mount="+ns, "--", "sh", "-c", script).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func startNode(t *testing.T) (*Node, string) {
	t.Helper()
	if m := Missing(); len(m) > 0 {
		testutil.MissingPeer(t, "simnode needs %s", strings.Join(m, ", "))
	}
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	n, err := Start(ctx, Options{Fixture: "a10", Dir: t.TempDir(), Namespace: ns})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		assert.NoError(t, n.Close(ctx))
	})
	return n, ns
}

// TestWritesTakeEffect: a process in the namespace moves the simulated A10 from nvidia to vfio-pci
// by plain writes to sysfs files, as the VFIO manager does; each write has taken effect when it
// returns, the kernel's refusals come back as the write's error, and a refused write leaves the
// attribute as it was.
func TestWritesTakeEffect(t *testing.T) {
	n, ns := startNode(t)
	a := host.Address("0000:3b:00.0")
	dev := filepath.Join(n.SysDir(), "bus/pci/devices", string(a))

	out, err := inNS(t, ns, "grep -c "+FSType+" /proc/self/mountinfo")
	require.NoError(t, err, out)
	assert.Equal(t, "1", out, "sys/ is served in the namespace")
	self, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(self), FSType, "nothing is mounted in the test's namespace")

	out, err = inNS(t, ns, "cat "+dev+"/vendor "+dev+"/device; basename $(readlink "+dev+"/driver)")
	require.NoError(t, err, out)
	assert.Equal(t, "0x10de\n0x2236\nnvidia", out)

	script := "echo vfio-pci > " + dev + "/driver_override && echo " + string(a) + " > " + dev + "/driver/unbind && " +
		"test ! -e " + dev + "/driver && echo " + string(a) + " > " + n.SysDir() + "/bus/pci/drivers_probe && " +
		"basename $(readlink " + dev + "/driver) && cat " + dev + "/driver_override && ls " + n.SysDir() + "/bus/pci/drivers/vfio-pci/"
	out, err = inNS(t, ns, script)
	require.NoError(t, err, out)
	assert.Equal(t, "vfio-pci\nvfio-pci\n"+string(a)+"\nbind\nmodule\nnew_id\nremove_id\nunbind", out)
	assert.Equal(t, "vfio-pci", n.Kernel.DriverOf(a))
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(n.Root(), "dev/vfio/12"), &st))
	assert.Equal(t, uint32(syscall.S_IFCHR), st.Mode&syscall.S_IFMT, "the group node is a character device")
	assert.Equal(t, []hostsim.Write{
		{Path: "devices/pci0000:00/" + string(a) + "/driver_override", Data: "vfio-pci\n", Address: a},
		{Path: "bus/pci/drivers/nvidia/unbind", Data: string(a) + "\n", Address: a},
		{Path: "bus/pci/drivers_probe", Data: string(a) + "\n", Address: a},
	}, n.Kernel.Writes())

	// coreutils' echo names the write's error (dash's builtin says "I/O error" for any).
	out, err = inNS(t, ns, "/bin/echo "+string(a)+" > "+n.SysDir()+"/bus/pci/drivers/nvidia/unbind")
	require.Error(t, err)
	assert.Contains(t, out, "No such device", "unbind from a driver the function is not on: ENODEV")
	out, err = inNS(t, ns, "/bin/echo 1 > "+dev+"/numa_node")
	require.Error(t, err)
	assert.Contains(t, out, "Permission denied", "an attribute the kernel does not model")
	out, err = inNS(t, ns, "cat "+dev+"/numa_node")
	require.NoError(t, err, out)
	assert.Equal(t, "0", out, "a refused write truncates nothing")
	out, err = inNS(t, ns, "echo x > "+dev+"/new_file")
	require.Error(t, err, "sysfs has no new files: %s", out)
}

// TestCloseEndsTheServer: Close detaches the mount in the namespace and returns once the server
// has ended; the backing tree stays.
func TestCloseEndsTheServer(t *testing.T) {
	n, ns := startNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	require.NoError(t, n.Close(ctx))
	out, err := inNS(t, ns, "grep -c "+FSType+" /proc/self/mountinfo || true")
	require.NoError(t, err, out)
	assert.Equal(t, "0", out)
	assert.FileExists(t, filepath.Join(n.SysDir(), "bus/pci/devices/0000:3b:00.0/vendor"))
	require.NoError(t, n.Close(ctx), "a second Close does nothing")
}
