package hostroots

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// TestOptions: the flags' roots become the host model's, empty ones its
// defaults; a kernel given replaces this machine's in every role.
func TestOptions(t *testing.T) {
	o := Options(shell.Roots{Sysfs: "/a/sys", Dev: "/a/dev", Proc: "/a/proc"})
	assert.Equal(t, host.Options{SysfsRoot: "/a/sys", DevRoot: "/a/dev", ProcRoot: "/a/proc"}, o)
	o = Options(shell.Roots{})
	assert.Equal(t, host.Options{SysfsRoot: host.DefaultSysfsRoot, DevRoot: host.DefaultDevRoot, ProcRoot: host.DefaultProcRoot}, o)
	assert.Equal(t, Options(shell.Roots{}), On(shell.Roots{}, nil), "no kernel given: this machine's")

	k := kernel{}
	o = On(shell.Roots{Sysfs: "/b/sys"}, k)
	assert.Equal(t, "/b/sys", o.SysfsRoot)
	assert.Equal(t, k, o.Writer)
	assert.Equal(t, k, o.Links)
	assert.Equal(t, k, o.ModuleKernel)
	assert.Equal(t, k, o.Claimer)
}

// kernel is a Kernel that does nothing.
type kernel struct{}

func (kernel) WriteFile(string, []byte) error  { return nil }
func (kernel) LinkUp(string) (bool, error)     { return false, nil }
func (kernel) FinitModule(*os.File, int) error { return nil }
func (kernel) InitModule([]byte) error         { return nil }
func (kernel) Claim(string) (func(), error)    { return func() {}, nil }
