package host

import (
	"path"
	"strings"
	"testing"
)

// FuzzParseModulesDep: any text parses or fails without a panic; what
// parses names only clean relative module paths, and every load order of
// it ends (no cycle runs forever) with each module after what it needs.
func FuzzParseModulesDep(f *testing.F) {
	for _, s := range []string{
		"kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/pci/vfio-pci-core.ko kernel/drivers/vfio/vfio.ko\n" +
			"kernel/drivers/vfio/pci/vfio-pci-core.ko: kernel/drivers/vfio/vfio.ko\nkernel/drivers/vfio/vfio.ko:\n",
		"kernel/a.ko.xz: kernel/b.ko.zst\nkernel/b.ko.zst: kernel/a.ko.xz\n",
		"kernel/a.ko.gz:\n# comment\n\n", "a.ko", "../a.ko:", "/a.ko:", "kernel/a.ko: ../../b.ko", ":", "a.ko: a.ko",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ix, err := ParseModulesDep(strings.NewReader(s))
		if err != nil {
			return
		}
		for name, file := range ix.files {
			if path.IsAbs(file) || path.Clean(file) != file || strings.HasPrefix(file, "../") || file == ".." {
				t.Fatalf("module %s has the unsafe path %q", name, file)
			}
			if !validModuleName(name) {
				t.Fatalf("invalid module name %q from %q", name, file)
			}
		}
		for name := range ix.files {
			order, err := ix.LoadOrder(name)
			if err != nil {
				continue
			}
			pos := map[string]int{}
			for i, m := range order {
				if _, dup := pos[m]; dup {
					t.Fatalf("load order of %s has %s twice: %v", name, m, order)
				}
				pos[m] = i
			}
			for _, m := range order {
				for _, d := range ix.deps[m] {
					if pd, ok := pos[d]; !ok || pd > pos[m] {
						t.Fatalf("load order of %s puts %s before its dependency %s: %v", name, m, d, order)
					}
				}
			}
		}
	})
}
