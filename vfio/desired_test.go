package vfio

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// TestConfigVendorIsTyped: YAML reads an unquoted `vendor: 0x10de` as the
// number 4318, which used to select vendor 0x4318 without a word. A vendor
// is hex in a string; a number is an error naming the file and the key.
func TestConfigVendorIsTyped(t *testing.T) {
	dir := t.TempDir()
	good := map[string]uint16{
		"vendor: \"10de\"\nall: true\n":     0x10de,
		"vendor: \"0x10DE\"\nall: true\n":   0x10de,
		"vendor: 10de\nall: true\n":         0x10de, // unquoted, but not a number: YAML keeps it a string
		"vendor: '15b3'\n":                  0x15b3,
		`{"vendor": "0x1002", "all": true}`: 0x1002,
		"all: true\n":                       host.VendorNVIDIA,
	}
	for body, want := range good {
		p := filepath.Join(dir, "good.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		d, err := LoadDesired(p)
		require.NoError(t, err, body)
		sel, _, err := d.Selections()
		require.NoError(t, err)
		assert.Equal(t, want, sel.Vendor, body)
	}
	bad := map[string]string{
		"unquoted hex":     "vendor: 0x10de\nall: true\n", // YAML: the number 4318
		"unquoted decimal": "vendor: 4318\nall: true\n",
		"digits only":      "vendor: 1002\n", // AMD's id, but YAML reads a number
		"JSON number":      `{"vendor": 4318}`,
		"not hex":          "vendor: \"nvidia\"\n",
		"too long":         "vendor: \"10de0\"\n",
		"zero":             "vendor: \"0000\"\n",
		"null":             "vendor:\nall: true\n",
		"list":             "vendor: [\"10de\"]\n",
	}
	for what, body := range bad {
		t.Run(what, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(what, " ", "_")+".yaml")
			require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
			_, err := LoadDesired(p)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadInput)
			assert.Contains(t, err.Error(), p, "the error names the file")
			assert.Contains(t, err.Error(), "vendor", "the error names the key")
		})
	}
	_, err := LoadDesired(filepath.Join(dir, "unquoted_hex.yaml"))
	assert.Contains(t, err.Error(), "4318 is not a string")

	// The daemon refuses the file: nothing is selected, the node is not ready.
	k, h := buildFixture(t, "a10")
	cfg := filepath.Join(dir, "unquoted_hex.yaml")
	d, err := NewDaemon(DaemonOptions{Host: h, ConfigFile: cfg, Log: logr.Discard()})
	require.NoError(t, err)
	_, err = d.Reconcile(context.Background())
	require.ErrorIs(t, err, ErrBadInput)
	assert.Empty(t, k.Writes())
}

func TestVendorIDRoundTrip(t *testing.T) {
	b, err := json.Marshal(Desired{Vendor: 0x10de, All: true})
	require.NoError(t, err)
	assert.JSONEq(t, `{"vendor": "10de", "all": true}`, string(b))
	b, err = json.Marshal(Desired{All: true})
	require.NoError(t, err)
	assert.JSONEq(t, `{"all": true}`, string(b), "no vendor means NVIDIA")
}

// FuzzParseDesired: any config parses or fails with ErrBadInput naming the
// file, never a panic; what parses selects a real vendor (never 0 or
// ffff), and re-encoding it parses back to the same selections.
func FuzzParseDesired(f *testing.F) {
	for _, s := range []string{"all: true\n", "vendor: 0x10de\nall: true\n", "vendor: \"10de\"\nnvswitches: true\nall: true\n",
		"devices: [\"0000:3b:00.0\"]\nhost: [\"3b:00.0\"]\n", "devices: [\"../../x\"]\n", `{"vendor": 4318}`, "vendor: 10de\n", "{}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDesired("fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "config fuzz.yaml") || !strings.Contains(err.Error(), ErrBadInput.Error()) {
				t.Fatalf("error does not name the file or is not bad input: %v", err)
			}
			return
		}
		toVFIO, toHost, err := d.Selections()
		if err != nil {
			t.Fatalf("parsed but does not select: %v", err)
		}
		if toVFIO.Vendor == 0 || toVFIO.Vendor == 0xffff {
			t.Fatalf("vendor %#x selected", toVFIO.Vendor)
		}
		b, err := json.Marshal(d) // JSON is YAML: the same parser reads it back
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseDesired("again", b)
		if err != nil {
			t.Fatalf("%+v re-encoded as %q does not parse: %v", d, b, err)
		}
		v2, h2, err := again.Selections()
		if err != nil || !reflect.DeepEqual(v2, toVFIO) || !reflect.DeepEqual(h2, toHost) {
			t.Fatalf("%q re-encoded as %q selects %+v %+v, not %+v %+v (%v)", data, b, v2, h2, toVFIO, toHost, err)
		}
	})
}
