package realkernel

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bootTimeout bounds one boot; one takes about 4 s under TCG on an idle core.
const bootTimeout = 3 * time.Minute

// machine is one QEMU guest: its PCI devices, whether it has an IOMMU, and the scenario
// script (under testdata) that its init runs.
type machine struct {
	iommu    bool
	devices  []string // -device values, in order
	scenario string
}

// rootPort returns the -device values of a pcie-root-port with the given devices behind it:
// each root port is its own IOMMU group.
func rootPort(n int, devices ...string) []string {
	id := fmt.Sprintf("rp%d", n)
	out := []string{fmt.Sprintf("pcie-root-port,id=%s,chassis=%d,slot=%d", id, n, n)}
	for _, d := range devices {
		out = append(out, d+",bus="+id)
	}
	return out
}

// pciBridge returns the -device values of a pcie-pci-bridge behind its own root port with the
// given devices in slots 1, 2, ...: a conventional PCI bus cannot isolate its devices, so the
// bridge and everything behind it share one IOMMU group.
func pciBridge(n int, devices ...string) []string {
	id := fmt.Sprintf("br%d", n)
	out := rootPort(n, "pcie-pci-bridge,id="+id)
	for i, d := range devices {
		out = append(out, fmt.Sprintf("%s,bus=%s,addr=%d", d, id, i+1))
	}
	return out
}

func (m machine) qemuArgs(kernel, initrd string) []string {
	// TCG always: KVM guests hang in early boot on these machines. intel-iommu must come
	// before every PCI device.
	args := []string{
		"-machine", "q35,kernel-irqchip=split", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "512M",
		"-nodefaults", "-no-user-config", "-display", "none", "-vga", "none", "-nic", "none",
		"-serial", "stdio", "-monitor", "none", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
	}
	// no_timer_check: on a loaded host TCG can miss the kernel's early timer-IRQ probe, which
	// with interrupt remapping panics ("timer doesn't work through Interrupt-remapped IO-APIC").
	cmdline := "console=ttyS0 panic=-1 quiet no_timer_check"
	if m.iommu {
		args = append(args, "-device", "intel-iommu,intremap=on")
		cmdline += " intel_iommu=on"
	}
	for _, d := range m.devices {
		args = append(args, "-device", d)
	}
	return append(args, "-append", cmdline)
}

// boot runs the guest to completion and returns its parsed console. A guest that does not
// finish its scenario fails the test, but what it printed is still returned.
func boot(t *testing.T, env hostEnv, rd initramfs, m machine) *console {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("testdata", m.scenario))
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	rd.scenario = string(script)
	initrd := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := rd.writeTo(initrd); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), bootTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, env.qemu, m.qemuArgs(env.kernel, initrd)...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("guest %s ran %s", m.scenario, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console of the guest (%s):\n%s", strings.Join(cmd.Args, " "), out.String())
		}
	})

	con := parseConsole(out.String())
	switch {
	case ctx.Err() != nil:
		t.Errorf("guest %s did not power off within %s", m.scenario, bootTimeout)
	case runErr != nil:
		t.Errorf("qemu: %v", runErr)
	case !con.booted:
		t.Errorf("guest %s never reached its init script", m.scenario)
	case !con.done:
		t.Errorf("guest %s stopped before the end of its scenario", m.scenario)
	}
	for _, name := range con.insmodFailed {
		t.Errorf("guest %s: insmod %s failed", m.scenario, name)
	}
	return con
}

// devState is one PCI function as the guest's sysfs showed it.
type devState struct {
	vendor, device, class, driver, group string
	net                                  []string
}

// snapshot is the guest's state after a step.
type snapshot struct {
	devices map[string]devState // by PCI address
	vfio    []string            // group nodes under /dev/vfio (the container node /dev/vfio/vfio left out)
}

func (s snapshot) hasVFIONode(group string) bool {
	for _, n := range s.vfio {
		if n == group {
			return true
		}
	}
	return false
}

// stepResult is one command the guest ran.
type stepResult struct {
	name, cmd      string
	rc             int
	stdout, stderr string
	after          snapshot
	ended          bool
}

// console is what the guest printed, parsed from its @@ markers.
type console struct {
	booted, done bool
	insmodFailed []string
	vars         map[string]string
	steps        map[string]*stepResult
}

// parseConsole reads the marker lines. Markers are matched anywhere in a line: firmware escape
// sequences can precede the first one.
func parseConsole(raw string) *console {
	c := &console{vars: map[string]string{}, steps: map[string]*stepResult{}}
	var cur *stepResult
	var stdout, stderr strings.Builder
	for line := range strings.Lines(raw) {
		line = strings.TrimRight(line, "\r\n")
		i := strings.Index(line, "@@")
		if i < 0 {
			continue
		}
		mark, rest, _ := strings.Cut(line[i:], " ")
		switch mark {
		case "@@BOOT":
			c.booted = true
		case "@@DONE":
			c.done = true
		case "@@INSMOD_FAIL":
			c.insmodFailed = append(c.insmodFailed, rest)
		case "@@VAR":
			k, v, _ := strings.Cut(rest, " ")
			c.vars[k] = v
		case "@@STEP":
			cur = &stepResult{name: rest, rc: -1, after: snapshot{devices: map[string]devState{}}}
			c.steps[rest] = cur
			stdout.Reset()
			stderr.Reset()
		}
		if cur == nil {
			continue
		}
		switch mark {
		case "@@CMD":
			cur.cmd = rest
		case "@@O":
			stdout.WriteString(rest + "\n")
		case "@@E":
			stderr.WriteString(rest + "\n")
		case "@@RC":
			if n, err := strconv.Atoi(rest); err == nil {
				cur.rc = n
			}
		case "@@DEV":
			addr, d := parseDev(rest)
			cur.after.devices[addr] = d
		case "@@VFIO":
			for _, n := range strings.Fields(rest) {
				if n != "vfio" {
					cur.after.vfio = append(cur.after.vfio, n)
				}
			}
		case "@@END":
			cur.stdout, cur.stderr, cur.ended = stdout.String(), stderr.String(), true
			cur = nil
		}
	}
	return c
}

// parseDev reads "ADDR 0xVENDOR 0xDEVICE 0xCLASS drv=D group=G net=a,b,".
func parseDev(s string) (string, devState) {
	f := strings.Fields(s)
	var d devState
	if len(f) < 4 {
		return s, d
	}
	d.vendor = strings.TrimPrefix(f[1], "0x")
	d.device = strings.TrimPrefix(f[2], "0x")
	d.class = strings.TrimPrefix(f[3], "0x")
	for _, kv := range f[4:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "drv":
			d.driver = v
		case "group":
			d.group = v
		case "net":
			d.net = strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
		}
	}
	return f[0], d
}
