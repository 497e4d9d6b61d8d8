package operands

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// writerOf names the writer whose run folder an operand may mount
// writable: its own, or the one of the operand it releases.
func writerOf(operand string) string {
	if of, ok := IsRelease(operand); ok {
		return of
	}
	return operand
}

// TestRunFolderWritableOnlyByItsWriter: no DaemonSet mounts the whole run
// folder; a writer's folder is mounted writable only by that writer (and
// its release), every reader mounts what it reads read-only, and each
// shared file's default path lies in a folder its readers mount.
func TestRunFolderWritableOnlyByItsWriter(t *testing.T) {
	want := map[string]map[string]string{
		names.VFIOManager:                             {names.VFIOManager: "rw"},
		names.ReleaseOperand(names.VFIOManager):       {names.VFIOManager: "rw"},
		names.VGPUDeviceManager:                       {names.VGPUDeviceManager: "rw"},
		names.ReleaseOperand(names.VGPUDeviceManager): {names.VGPUDeviceManager: "rw"},
		names.KubeVirtDevicePlugin:                    {names.KubeVirtDevicePlugin: "rw", names.VFIOManager: "ro", names.VGPUDeviceManager: "ro"},
		names.KataDevicePlugin:                        {names.VFIOManager: "ro"},
		names.Validator:                               {names.VFIOManager: "ro", names.VGPUDeviceManager: "ro", names.KubeVirtDevicePlugin: "ro"},
	}
	for _, op := range Names() {
		ds, _ := build(t, op, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		got := map[string]string{}
		for host, mount := range hostPaths(ds) {
			if host != names.RunDir && !strings.HasPrefix(host, names.RunDir+"/") {
				continue
			}
			require.NotEqual(t, names.RunDir, host, "%s mounts the whole run folder", op)
			writer := strings.TrimPrefix(host, names.RunDir+"/")
			require.Contains(t, names.Writers(), writer, "%s: %s is no writer's folder", op, host)
			at, mode, _ := strings.Cut(mount, ":")
			assert.Equal(t, host, at, "%s: mounted where the flags' defaults look", op)
			if mode == "rw" {
				assert.Equal(t, writer, writerOf(op), "%s mounts %s's folder writable", op, writer)
			}
			got[writer] = mode
		}
		if want[op] == nil {
			assert.Empty(t, got, "%s reads no shared file", op)
			continue
		}
		assert.Equal(t, want[op], got, op)
	}
	for _, f := range []string{names.VFIOReadyFile, names.VFIOLockFile, names.VGPUReadyFile, names.VGPUPauseFile, names.VGPULockFile, names.PermittedFile} {
		assert.Equal(t, names.WriterDir(names.Writer(f)), filepath.Dir(names.RunPath(f)), f)
	}
}
