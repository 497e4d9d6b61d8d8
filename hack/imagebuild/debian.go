package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/pierrec/lz4/v4"
)

// DebianKeyring is Debian's archive keyring, from the debian-archive-keyring
// package: the keys that sign the archive's InRelease files.
const DebianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// AptLists is where apt keeps the InRelease and Packages files it fetched.
const AptLists = "/var/lib/apt/lists"

// Size bounds of what VerifyDeb reads: an InRelease file, a Packages file
// (Debian's main/binary-amd64 is ~50 MB uncompressed) and a keyring.
const (
	maxInRelease = 16 << 20
	maxPackages  = 512 << 20
	maxKeyring   = 16 << 20
)

// DebCheck says which .deb VerifyDeb checks, and against what.
type DebCheck struct {
	Deb                    string // the .deb file
	Package, Version, Arch string // as Debian's index names it: libc6, 2.36-9+deb12u14, amd64
	Keyring                string // OpenPGP keys the index must be signed by (DebianKeyring)
	Lists                  string // apt's lists folder: <prefix>InRelease and <prefix><component>_binary-<arch>_Packages[.lz4|.gz]
	Now                    time.Time
}

// DebProof is where a checked .deb is listed.
type DebProof struct {
	Package, Version, Arch string
	SHA256                 string // the .deb's, as the index lists it
	Size                   int64
	Filename               string // its path in the archive (pool/main/g/glibc/...)
	InRelease              string // the signed index file that lists its Packages file
	Suite                  string // the index's Codename (bookworm, bookworm-security)
	Signer                 string // fingerprint of the key that signed the index
}

func (p DebProof) String() string {
	return fmt.Sprintf("%s %s %s: sha256 %s, %s in %s (%s), signed by %s",
		p.Package, p.Version, p.Arch, p.SHA256, p.Filename, filepath.Base(p.InRelease), p.Suite, p.Signer)
}

// VerifyDeb checks a .deb against Debian's signed package index: an
// InRelease file in c.Lists whose OpenPGP signature a key of c.Keyring
// verifies, a Packages file whose SHA256 and size that InRelease lists, and
// in it the package at that version and architecture, whose SHA256 and size
// the .deb has. The error names what did not match.
func VerifyDeb(c DebCheck) (DebProof, error) {
	keyring, err := readKeyring(c.Keyring)
	if err != nil {
		return DebProof{}, err
	}
	debSum, debSize, err := fileSHA256(c.Deb)
	if err != nil {
		return DebProof{}, err
	}
	releases, err := filepath.Glob(filepath.Join(c.Lists, "*_InRelease"))
	if err != nil {
		return DebProof{}, err
	}
	slices.Sort(releases)
	var tried []string
	for _, rel := range releases {
		proof, found, err := searchIndex(c, keyring, rel)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		if !found {
			continue
		}
		if proof.SHA256 != debSum || proof.Size != debSize {
			return proof, fmt.Errorf("%s: sha256 %s, %d bytes; Debian's index (%s, %s) lists %s %s %s as sha256 %s, %d bytes",
				c.Deb, debSum, debSize, rel, proof.Filename, c.Package, c.Version, c.Arch, proof.SHA256, proof.Size)
		}
		return proof, nil
	}
	msg := fmt.Sprintf("no index in %s signed by a key of %s lists %s %s %s", c.Lists, c.Keyring, c.Package, c.Version, c.Arch)
	if len(releases) == 0 {
		msg += " (no *_InRelease file: run apt-get update)"
	}
	if len(tried) > 0 {
		msg += ":\n  " + strings.Join(tried, "\n  ")
	}
	return DebProof{}, errors.New(msg)
}

// searchIndex verifies one InRelease file and the Packages files of c.Arch
// it lists, and looks for the package in them.
func searchIndex(c DebCheck, keyring openpgp.EntityList, rel string) (DebProof, bool, error) {
	data, err := readBounded(rel, maxInRelease)
	if err != nil {
		return DebProof{}, false, err
	}
	block, _ := clearsign.Decode(data)
	if block == nil {
		return DebProof{}, false, fmt.Errorf("%s: not an OpenPGP clear-signed file", rel)
	}
	signer, err := block.VerifySignature(keyring, nil)
	if err != nil {
		return DebProof{}, false, fmt.Errorf("%s: signature not verified by %s: %w", rel, c.Keyring, err)
	}
	fields, sums, err := parseRelease(block.Plaintext)
	if err != nil {
		return DebProof{}, false, fmt.Errorf("%s: %w", rel, err)
	}
	if v := fields["Valid-Until"]; v != "" && !c.Now.IsZero() {
		until, err := time.Parse(time.RFC1123, strings.Replace(v, "UTC", "GMT", 1))
		if err != nil {
			return DebProof{}, false, fmt.Errorf("%s: Valid-Until %q: %w", rel, v, err)
		}
		if c.Now.After(until) {
			return DebProof{}, false, fmt.Errorf("%s: expired (Valid-Until %s): run apt-get update", rel, v)
		}
	}
	prefix := strings.TrimSuffix(rel, "InRelease")
	var paths []string
	for p := range sums {
		if comp, rest, ok := strings.Cut(p, "/"); ok && comp != "" && rest == "binary-"+c.Arch+"/Packages" {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		local, packages, err := readPackages(prefix + strings.ReplaceAll(p, "/", "_"))
		if err != nil {
			return DebProof{}, false, err
		}
		if packages == nil {
			continue // a component apt does not fetch
		}
		sum := sha256.Sum256(packages)
		if want := sums[p]; hex.EncodeToString(sum[:]) != want.sha256 || int64(len(packages)) != want.size {
			return DebProof{}, false, fmt.Errorf("%s: sha256 %x, %d bytes (uncompressed); %s lists %s as sha256 %s, %d bytes",
				local, sum, len(packages), rel, p, want.sha256, want.size)
		}
		st, ok, err := findPackage(packages, c.Package, c.Version, c.Arch)
		if err != nil {
			return DebProof{}, false, fmt.Errorf("%s: %w", local, err)
		}
		if !ok {
			continue
		}
		size, err := strconv.ParseInt(st["Size"], 10, 64)
		if err != nil || st["SHA256"] == "" {
			return DebProof{}, false, fmt.Errorf("%s: %s %s has no SHA256 or Size", local, c.Package, c.Version)
		}
		return DebProof{
			Package: c.Package, Version: c.Version, Arch: c.Arch,
			SHA256: st["SHA256"], Size: size, Filename: st["Filename"],
			InRelease: rel, Suite: fields["Codename"], Signer: strings.ToUpper(hex.EncodeToString(signer.PrimaryKey.Fingerprint)),
		}, true, nil
	}
	return DebProof{}, false, nil
}

type fileSum struct {
	sha256 string
	size   int64
}

// parseRelease reads a Release file's fields and its SHA256 list.
func parseRelease(text []byte) (map[string]string, map[string]fileSum, error) {
	fields := map[string]string{}
	sums := map[string]fileSum{}
	inSHA256 := false
	for line := range strings.Lines(string(text)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, " ") {
			if !inSHA256 {
				continue
			}
			f := strings.Fields(line)
			if len(f) != 3 || len(f[0]) != 64 {
				return nil, nil, fmt.Errorf("SHA256 line %q: want <hash> <size> <path>", line)
			}
			size, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("SHA256 line %q: %w", line, err)
			}
			sums[f[2]] = fileSum{strings.ToLower(f[0]), size}
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		inSHA256 = k == "SHA256"
		fields[k] = strings.TrimSpace(v)
	}
	if len(sums) == 0 {
		return nil, nil, errors.New("no SHA256 list")
	}
	return fields, sums, nil
}

// readPackages reads a Packages file as apt keeps it: plain, or compressed
// with lz4 or gzip (Acquire::GzipIndexes). nil, nil when there is none.
func readPackages(base string) (string, []byte, error) {
	for _, ext := range []string{"", ".lz4", ".gz"} {
		p := base + ext
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return p, nil, err
		}
		defer f.Close()
		var r io.Reader = f
		switch ext {
		case ".lz4":
			r = lz4.NewReader(f)
		case ".gz":
			zr, err := gzip.NewReader(f)
			if err != nil {
				return p, nil, fmt.Errorf("%s: %w", p, err)
			}
			r = zr
		}
		data, err := io.ReadAll(io.LimitReader(r, maxPackages+1))
		if err != nil {
			return p, nil, fmt.Errorf("%s: %w", p, err)
		}
		if len(data) > maxPackages {
			return p, nil, fmt.Errorf("%s: more than %d bytes uncompressed", p, maxPackages)
		}
		return p, data, nil
	}
	return base, nil, nil
}

// findPackage returns the stanza of pkg at version and arch in a Packages
// file.
func findPackage(packages []byte, pkg, version, arch string) (map[string]string, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(packages))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	st := map[string]string{}
	match := func() bool {
		return st["Package"] == pkg && st["Version"] == version && st["Architecture"] == arch
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if match() {
				return st, true, nil
			}
			st = map[string]string{}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // a continuation line
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, false, err
	}
	return st, match(), nil
}

func readKeyring(path string) (openpgp.EntityList, error) {
	data, err := readBounded(path, maxKeyring)
	if err != nil {
		return nil, err
	}
	keys, err := openpgp.ReadKeyRing(bytes.NewReader(data))
	if err != nil {
		if keys, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("keyring %s: %w", path, err)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("keyring %s: no keys", path)
	}
	return keys, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
