package gpuname

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestNamesConfigIsStrict: "10de:0x22" used to read as 10de:0000 and
// "10de:22zz" as 10de:0022, and 100-character names were accepted. Each bad
// entry is an error naming the file and the key.
func TestNamesConfigIsStrict(t *testing.T) {
	dir := t.TempDir()
	bad := map[string]struct{ body, key string }{
		"0x prefix":          {"\"10de:0x22\": X\n", "10de:0x22"},
		"trailing garbage":   {"\"10de:22zz\": X\n", "10de:22zz"},
		"short device":       {"10de:22: X\n", "10de:22"},
		"long device":        {"10de:22360: X\n", "10de:22360"},
		"short vendor":       {"de:2236: X\n", "de:2236"},
		"spaces":             {"\" 10de:2236\": X\n", " 10de:2236"},
		"no colon":           {"10de2236: X\n", "10de2236"},
		"digits only":        {"12345678: X\n", "12345678"},
		"name too long":      {"10de:2236: " + strings.Repeat("A", 64) + "\n", "10de:2236"},
		"name 100 chars":     {"10de:2236: " + strings.Repeat("A", 100) + "\n", "10de:2236"},
		"name with slash":    {"10de:2236: \"a/b\"\n", "10de:2236"},
		"name ends in _":     {"10de:2236: A10_\n", "10de:2236"},
		"name starts with .": {"10de:2236: .A10\n", "10de:2236"},
		"empty name":         {"10de:2236: \"\"\n", "10de:2236"},
		"number name":        {"10de:2236: 12\n", "10de:2236"},
		"null name":          {"10de:2236:\n", "10de:2236"},
		"list name":          {"10de:2236: [a]\n", "10de:2236"},
		"same id twice":      {"10de:2236: A\n10DE:2236: B\n", "10DE:2236"},
	}
	for what, c := range bad {
		t.Run(what, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(what, " ", "_")+".yaml")
			require.NoError(t, os.WriteFile(p, []byte(c.body), 0o644))
			_, err := NewNamer("", p)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrOverrides), "%v", err)
			assert.Contains(t, err.Error(), p, "the error names the file")
			assert.Contains(t, err.Error(), fmt.Sprintf("%q", c.key), "the error names the key")
		})
	}
	p := filepath.Join(dir, "good.json")
	long := strings.Repeat("A", 63)
	require.NoError(t, os.WriteFile(p, []byte(`{"10DE:2236": "a10.fleet-1", "10de:ABCD": "`+long+`", "1234:0059": "X"}`), 0o644))
	n, err := NewNamer("", p)
	require.NoError(t, err)
	name, source := n.Name(NVIDIA, 0x2236)
	assert.Equal(t, "a10.fleet-1", name)
	assert.Equal(t, "override", source)
	name, _ = n.Name(NVIDIA, 0xabcd)
	assert.Equal(t, long, name, "63 characters are allowed")
}

// FuzzParseOverrides: any names config parses or fails with ErrOverrides,
// never a panic; what parses has only valid resource names, and writing it
// back out (canonical lower-case keys) parses to the same map.
func FuzzParseOverrides(f *testing.F) {
	for _, s := range []string{"10de:2236: A10\n", "\"10DE:2236\": A10_FLEET\n10de:2330: H100\n", `{"10de:0x22": "X"}`, "10de:22zz: X\n", "10de:2236: [\n", "", "a: b", "10de:2236: 5\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseOverrides(data)
		if err != nil {
			if m != nil || !errors.Is(err, ErrOverrides) {
				t.Fatalf("error without ErrOverrides (result %v): %v", m, err)
			}
			return
		}
		var raw map[string]any
		if err := yaml.Unmarshal(data, &raw); err != nil || len(raw) != len(m) {
			t.Fatalf("parsed %d entries of %d: %v", len(m), len(raw), err)
		}
		for k, v := range raw {
			id, err := ParseOverrideKey(k)
			if err != nil || fmt.Sprintf("%04x:%04x", id>>16, id&0xffff) != strings.ToLower(k) || m[id] != v {
				t.Fatalf("key %q (%v) is not exactly the id %08x it was read as: %v", k, v, id, err)
			}
		}
		canon := map[string]string{}
		for id, name := range m {
			if err := ValidResourceName(name); err != nil {
				t.Fatalf("%08x: %v", id, err)
			}
			canon[fmt.Sprintf("%04x:%04x", id>>16, id&0xffff)] = name
		}
		b, err := yaml.Marshal(canon)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseOverrides(b)
		if err != nil || len(again) != len(m) {
			t.Fatalf("%q re-encoded as %q does not parse back: %v", data, b, err)
		}
		for id, name := range m {
			if again[id] != name {
				t.Fatalf("%08x: %q re-parses as %q", id, name, again[id])
			}
		}
	})
}
