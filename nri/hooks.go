package nri

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Hook policies: which OCI hooks a GPU CDI spec may bring. A hook runs on
// the host, as root, before the container: a spec planted by a compromised
// node component (another CDI writer on the node) with a hook of its own
// must never run.
const (
	// HooksNVIDIA allows only NVIDIA's toolkit hooks at their installed
	// paths (nvidia-ctk's specs call nvidia-cdi-hook or nvidia-ctk), each a
	// createContainer hook running one of the toolkit's known hooks with
	// arguments of the shapes NVIDIA's generator writes and no env but
	// NVIDIA_CTK_DEBUG; the default.
	HooksNVIDIA = "nvidia"
	// HooksNone refuses every hook (generate-cdi writes specs without).
	HooksNone = "none"
	// HooksAny allows any hook (a policy that trusts every CDI writer).
	HooksAny = "any"
)

// NVIDIAHookPaths are where NVIDIA's container toolkit installs the hook
// binaries its CDI specs name: the Debian/RPM packages and the GPU
// Operator's toolkit container.
var NVIDIAHookPaths = []string{
	"/usr/bin/nvidia-cdi-hook", "/usr/bin/nvidia-ctk",
	"/usr/local/bin/nvidia-cdi-hook", "/usr/local/bin/nvidia-ctk",
	"/usr/local/nvidia/toolkit/nvidia-cdi-hook", "/usr/local/nvidia/toolkit/nvidia-ctk",
}

// LdconfigPaths are the host ldconfig programs an update-ldcache hook may
// run (--ldconfig-path; the hook runs it as root), relative to a driver
// root: glibc's, and Ubuntu's real one behind its wrapper.
var LdconfigPaths = []string{"/sbin/ldconfig", "/sbin/ldconfig.real", "/usr/sbin/ldconfig", "/usr/sbin/ldconfig.real"}

// nvidiaHookFlags are the toolkit's hooks (nvidia-cdi-hook <hook>, or
// nvidia-ctk hook <hook>) with the flags each may carry, as NVIDIA's CDI
// generator (internal/discover/hooks.go of nvidia-container-toolkit) writes
// them. --container-spec (the hook reads the OCI state from a file: a test
// aid) is never allowed.
var nvidiaHookFlags = map[string]map[string]func(p *Policy, v string) error{
	"update-ldcache": {
		"folder":        containerPathArg,
		"ldconfig-path": (*Policy).ldconfigArg,
	},
	"create-symlinks": {"link": linkArg},
	"chmod": {
		"mode": modeArg,
		"path": containerPathArg,
	},
	"enable-cuda-compat": {
		"host-driver-version":        versionArg,
		"host-cuda-version":          versionArg,
		"cuda-compat-container-root": containerPathArg,
	},
	"disable-device-node-modification": {},
	"update-application-profile":       {},
}

var version = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,3}$`)

func versionArg(_ *Policy, v string) error {
	if !version.MatchString(v) {
		return fmt.Errorf("%q is not a version", v)
	}
	return nil
}

func modeArg(_ *Policy, v string) error {
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m&^0o755 != 0 {
		return fmt.Errorf("mode %q: want octal permission bits within 755", v)
	}
	return nil
}

// containerPathArg is a path in the container: absolute and clean (the
// hook joins it to the container's root).
func containerPathArg(_ *Policy, v string) error {
	if !cleanAbs(v) || v == "/" {
		return fmt.Errorf("container path %q: want an absolute, clean path other than /", v)
	}
	return nil
}

// linkArg is create-symlinks' target::link; the link is made in the
// container.
func linkArg(_ *Policy, v string) error {
	target, link, ok := strings.Cut(v, "::")
	if !ok || target == "" || strings.ContainsRune(target, 0) {
		return fmt.Errorf("link %q: want target::link", v)
	}
	return containerPathArg(nil, link)
}

func (p *Policy) ldconfigArg(v string) error {
	for _, root := range p.driverRoots() {
		for _, l := range LdconfigPaths {
			if v == path.Join(root, l) {
				return nil
			}
		}
	}
	return fmt.Errorf("ldconfig %q: not one of %s under a driver root (%s)", v, strings.Join(LdconfigPaths, ", "), strings.Join(p.driverRoots(), ", "))
}

// checkHook returns why the policy refuses a hook, or nil.
func (p *Policy) checkHook(h *cdispec.Hook) error {
	switch p.hooks() {
	case HooksAny:
		return nil
	case HooksNone:
		return fmt.Errorf("hook %s: no hooks allowed (--cdi-hooks=none)", h.Path)
	}
	if !slices.Contains(NVIDIAHookPaths, h.Path) {
		return fmt.Errorf("hook %s: not one of NVIDIA's toolkit hooks at its installed path (--cdi-hooks=nvidia)", h.Path)
	}
	if h.HookName != "createContainer" {
		return fmt.Errorf("hook %s: runs at %q; NVIDIA's hooks run at createContainer", h.Path, h.HookName)
	}
	for _, kv := range h.Env {
		if kv != "NVIDIA_CTK_DEBUG=false" && kv != "NVIDIA_CTK_DEBUG=true" {
			return fmt.Errorf("hook %s: env %q: only NVIDIA_CTK_DEBUG=true|false allowed", h.Path, kv)
		}
	}
	if err := p.checkHookArgs(h.Path, h.Args); err != nil {
		return fmt.Errorf("hook %s: args %q: %w", h.Path, h.Args, err)
	}
	return nil
}

// checkHookArgs checks NVIDIA's hook command line: the binary's name, the
// hook (after "hook" for nvidia-ctk), then only that hook's flags, as
// --flag value or --flag=value.
func (p *Policy) checkHookArgs(bin string, args []string) error {
	base := path.Base(bin)
	if len(args) == 0 || args[0] != base {
		return fmt.Errorf("want %s as the first argument", base)
	}
	args = args[1:]
	if base == "nvidia-ctk" {
		if len(args) == 0 || args[0] != "hook" {
			return fmt.Errorf("want nvidia-ctk hook <hook>")
		}
		args = args[1:]
	}
	if len(args) == 0 {
		return fmt.Errorf("no hook named")
	}
	flags, known := nvidiaHookFlags[args[0]]
	if !known {
		return fmt.Errorf("%q is not one of NVIDIA's known hooks", args[0])
	}
	hook := args[0]
	for i := 1; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			return fmt.Errorf("%s: unexpected argument %q", hook, a)
		}
		check, ok := flags[name]
		if !ok {
			return fmt.Errorf("%s: flag --%s is not allowed", hook, name)
		}
		if !hasValue {
			if i+1 >= len(args) {
				return fmt.Errorf("%s: --%s without a value", hook, name)
			}
			i++
			value = args[i]
			if strings.HasPrefix(value, "-") {
				return fmt.Errorf("%s: --%s %q: a value that reads as a flag", hook, name, value)
			}
		}
		if err := check(p, value); err != nil {
			return fmt.Errorf("%s --%s: %w", hook, name, err)
		}
	}
	return nil
}

func validHookPolicy(p string) error {
	switch p {
	case HooksNVIDIA, HooksNone, HooksAny:
		return nil
	}
	return fmt.Errorf("hook policy %q: want nvidia, none or any", p)
}
