package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/pierrec/lz4/v4"
)

// debFixture is a signed Debian index in an apt lists folder: a keyring
// holding one test key, an InRelease signed with it that lists a Packages
// file (kept lz4-compressed, as apt keeps it with Acquire::GzipIndexes),
// and in it the fake .deb.
type debFixture struct {
	dir, keyring, lists, deb string
	key                      *openpgp.Entity
	packages                 string // the Packages text
}

const fixturePrefix = "deb.example.org_debian_dists_bookworm_"

func newKey(t *testing.T, name string) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@example.org", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newDebFixture(t *testing.T) *debFixture {
	t.Helper()
	f := &debFixture{dir: t.TempDir(), key: newKey(t, "archive")}
	f.keyring = filepath.Join(f.dir, "keyring.gpg")
	var kr bytes.Buffer
	if err := f.key.Serialize(&kr); err != nil {
		t.Fatal(err)
	}
	write(t, f.keyring, kr.String(), 0o644)
	f.lists = filepath.Join(f.dir, "lists")
	f.deb = filepath.Join(f.dir, "libc6_2.36-9+deb12u14_amd64.deb")
	write(t, f.deb, "!<arch>\nthe fake libc6 package\n", 0o644)
	sum, size, err := fileSHA256(f.deb)
	if err != nil {
		t.Fatal(err)
	}
	f.packages = "Package: libc-bin\nVersion: 2.36-9+deb12u14\nArchitecture: amd64\nSHA256: " + strings.Repeat("0", 64) + "\nSize: 1\n\n" +
		"Package: libc6\nVersion: 2.36-9+deb12u13\nArchitecture: amd64\nSHA256: " + strings.Repeat("1", 64) + "\nSize: 2\n\n" +
		"Package: libc6\nVersion: 2.36-9+deb12u14\nArchitecture: amd64\nDescription: GNU C Library\n the shared libraries\n" +
		"Filename: pool/main/g/glibc/libc6_2.36-9+deb12u14_amd64.deb\nSize: " + fmt.Sprint(size) + "\nSHA256: " + sum + "\n"
	f.writeLists(t, f.packages, f.packages, f.key)
	return f
}

// writeLists writes the lists folder: listed is the Packages text whose
// hash InRelease records, stored the one on disk, signer the key.
func (f *debFixture) writeLists(t *testing.T, listed, stored string, signer *openpgp.Entity) {
	t.Helper()
	if err := os.MkdirAll(f.lists, 0o755); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := lz4.NewWriter(&z)
	if _, err := zw.Write([]byte(stored)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.lists, fixturePrefix+"main_binary-amd64_Packages.lz4"), z.String(), 0o644)
	sum := sha256.Sum256([]byte(listed))
	release := "Origin: Debian\nSuite: stable\nCodename: bookworm\nDate: Sat, 01 Aug 2026 00:00:00 UTC\n" +
		"Valid-Until: Thu, 01 Jan 2099 00:00:00 UTC\nSHA256:\n" +
		fmt.Sprintf(" %x %d main/binary-amd64/Packages\n", sum, len(listed)) +
		" " + strings.Repeat("e", 64) + " 10 main/binary-arm64/Packages\n" // a component apt did not fetch
	write(t, filepath.Join(f.lists, fixturePrefix+"InRelease"), clearSign(t, release, signer), 0o644)
}

func clearSign(t *testing.T, text string, key *openpgp.Entity) string {
	t.Helper()
	var out bytes.Buffer
	w, err := clearsign.Encode(&out, key.PrivateKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func (f *debFixture) check() DebCheck {
	return DebCheck{Deb: f.deb, Package: "libc6", Version: "2.36-9+deb12u14", Arch: "amd64", Keyring: f.keyring, Lists: f.lists,
		Now: time.Date(2026, 8, 2, 0, 0, 0, 0, time.UTC)}
}

func TestVerifyDeb(t *testing.T) {
	f := newDebFixture(t)
	proof, err := VerifyDeb(f.check())
	if err != nil {
		t.Fatal(err)
	}
	sum, size, _ := fileSHA256(f.deb)
	fp := strings.ToUpper(fmt.Sprintf("%x", f.key.PrimaryKey.Fingerprint))
	if proof.SHA256 != sum || proof.Size != size || proof.Suite != "bookworm" || proof.Signer != fp ||
		proof.Filename != "pool/main/g/glibc/libc6_2.36-9+deb12u14_amd64.deb" || filepath.Base(proof.InRelease) != fixturePrefix+"InRelease" {
		t.Errorf("proof %+v", proof)
	}

	// The command line prints the proof.
	var out bytes.Buffer
	c := f.check()
	err = runVerifyDeb([]string{"--deb", c.Deb, "--package", "libc6", "--version", c.Version, "--arch", "amd64",
		"--keyring", c.Keyring, "--lists", c.Lists}, &out)
	if err != nil || !strings.Contains(out.String(), "libc6 2.36-9+deb12u14 amd64: sha256 "+sum) {
		t.Errorf("verify-deb printed %q: %v", out.String(), err)
	}
}

// Each thing that can be wrong is an error that names it.
func TestVerifyDebRefuses(t *testing.T) {
	for _, c := range []struct {
		name    string
		breakIt func(t *testing.T, f *debFixture, c *DebCheck)
		want    []string
	}{
		{"tampered deb", func(t *testing.T, f *debFixture, c *DebCheck) {
			write(t, f.deb, "!<arch>\nthe fake libc6 packagE\n", 0o644)
		}, []string{"libc6_2.36-9+deb12u14_amd64.deb: sha256 ", "Debian's index", "lists libc6 2.36-9+deb12u14 amd64 as sha256 "}},
		{"tampered Packages", func(t *testing.T, f *debFixture, c *DebCheck) {
			evil := strings.Replace(f.packages, "SHA256: "+strings.Repeat("1", 64), "SHA256: "+strings.Repeat("2", 64), 1)
			f.writeLists(t, f.packages, evil, f.key)
		}, []string{fixturePrefix + "main_binary-amd64_Packages.lz4: sha256 ", "lists main/binary-amd64/Packages as sha256 ", "no index in"}},
		{"signed by another key", func(t *testing.T, f *debFixture, c *DebCheck) {
			f.writeLists(t, f.packages, f.packages, newKey(t, "mallory"))
		}, []string{fixturePrefix + "InRelease: signature not verified by ", "keyring.gpg", "no index in"}},
		{"InRelease changed after signing", func(t *testing.T, f *debFixture, c *DebCheck) {
			p := filepath.Join(f.lists, fixturePrefix+"InRelease")
			data, _ := os.ReadFile(p)
			write(t, p, strings.Replace(string(data), "Codename: bookworm", "Codename: trixie", 1), 0o644)
		}, []string{fixturePrefix + "InRelease: signature not verified", "no index in"}},
		{"not signed", func(t *testing.T, f *debFixture, c *DebCheck) {
			write(t, filepath.Join(f.lists, fixturePrefix+"InRelease"), "Codename: bookworm\nSHA256:\n", 0o644)
		}, []string{fixturePrefix + "InRelease: not an OpenPGP clear-signed file"}},
		{"expired index", func(t *testing.T, f *debFixture, c *DebCheck) {
			c.Now = time.Date(2099, 1, 2, 0, 0, 0, 0, time.UTC)
		}, []string{fixturePrefix + "InRelease: expired (Valid-Until Thu, 01 Jan 2099 00:00:00 UTC)"}},
		{"another version", func(t *testing.T, f *debFixture, c *DebCheck) {
			c.Version = "2.36-9+deb12u15"
		}, []string{"lists libc6 2.36-9+deb12u15 amd64"}},
		{"no lists", func(t *testing.T, f *debFixture, c *DebCheck) {
			c.Lists = t.TempDir()
		}, []string{"no *_InRelease file: run apt-get update"}},
		{"no keyring", func(t *testing.T, f *debFixture, c *DebCheck) {
			c.Keyring = filepath.Join(t.TempDir(), "none.gpg")
		}, []string{"none.gpg: no such file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newDebFixture(t)
			check := f.check()
			c.breakIt(t, f, &check)
			_, err := VerifyDeb(check)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}
