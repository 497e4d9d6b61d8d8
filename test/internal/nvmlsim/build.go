package nvmlsim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Library is the file name the real library has and the simulated one is
// built as.
const Library = "libnvidia-ml.so.1"

// Build builds the simulated NVML (package libnvml, tag nvmlsim, cgo
// -buildmode=c-shared) into dir/libnvidia-ml.so.1 and returns its path.
// It runs the go command of the test module (the current directory must
// be inside it), which gives go-nvml's nvml.h to the library's preamble.
func Build(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, Library)
	nvmlDir, err := goCmd(ctx, nil, "list", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml/pkg/nvml")
	if err != nil {
		return "", fmt.Errorf("build simulated NVML: find go-nvml's nvml.h: %w", err)
	}
	env := []string{"CGO_ENABLED=1", "CGO_CFLAGS=-I" + strings.TrimSpace(nvmlDir)}
	// The real library's SONAME, which nvidia-ctk reads for its links.
	if _, err := goCmd(ctx, env, "build", "-tags", "nvmlsim", "-buildmode=c-shared", "-o", out,
		"-ldflags=-extldflags=-Wl,-soname,"+Library,
		"github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim/libnvml"); err != nil {
		return "", fmt.Errorf("build simulated NVML %s: %w", out, err)
	}
	return out, nil
}

func goCmd(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
