package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

func readSBOM(t *testing.T, path string) *cdx.BOM {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bom := new(cdx.BOM)
	if err := cdx.NewBOMDecoder(bytes.NewReader(data), cdx.BOMFileFormatJSON).Decode(bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return bom
}

// sbomModules lists the Go modules (and stdlib) an SBOM names, as
// "path version".
func sbomModules(bom *cdx.BOM) []string {
	var out []string
	for _, c := range *bom.Components {
		if strings.HasPrefix(c.PackageURL, "pkg:golang/") {
			out = append(out, c.Name+" "+c.Version)
		}
	}
	slices.Sort(out)
	return out
}

// Build writes <binary>.cdx.json beside each archive: a CycloneDX 1.6 SBOM
// that names the image by its digest, the binary by its sha256, and every
// Go module of the binary's build information at its version (here the
// test binary itself stands in for a shipped one); two builds write the
// same bytes, and another image time changes them.
func TestSBOM(t *testing.T) {
	o := fakeRepo(t, "vfio-manager", "sandbox-gpu-operator")
	// A static Go binary with build information: this tool itself.
	bin := filepath.Join(t.TempDir(), "imagebuild")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(o.BinDir, "vfio-manager"), string(data), 0o755)
	res, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	r := res[1]
	if r.Binary != "vfio-manager" || r.SBOM != filepath.Join(o.OutDir, "vfio-manager.cdx.json") {
		t.Fatalf("result %+v", r)
	}
	bom := readSBOM(t, r.SBOM)
	if bom.SpecVersion != cdx.SpecVersion1_6 || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") || bom.Metadata == nil ||
		bom.Metadata.Timestamp != "2026-05-04T03:02:01Z" {
		t.Fatalf("bom %+v", bom)
	}
	img := bom.Metadata.Component
	if img == nil || img.Type != cdx.ComponentTypeContainer || img.Version != r.Digest || img.Name != "ghcr.io/sandbox-gpu/vfio-manager" ||
		!strings.HasPrefix(img.PackageURL, "pkg:oci/vfio-manager@sha256%3A") {
		t.Errorf("image component %+v, want the image at %s", img, r.Digest)
	}

	// What `go version -m` says the binary was built from.
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := goVersionModules(string(out))
	slices.Sort(want)
	if len(want) < 3 {
		t.Fatalf("go version -m printed %d modules:\n%s", len(want), out)
	}
	if got := sbomModules(bom); !slices.Equal(got, want) {
		t.Errorf("Go modules in the SBOM:\n got %q\nwant %q", got, want)
	}
	app := (*bom.Components)[0]
	if app.Type != cdx.ComponentTypeApplication || app.Name != "vfio-manager" || app.Hashes == nil || len((*app.Hashes)[0].Value) != 64 {
		t.Errorf("binary component %+v", app)
	}
	for _, c := range *bom.Components {
		if c.Name == "libc6" {
			t.Errorf("a static binary's image lists libc6: %+v", c)
		}
	}

	// The stand-in without Go build information says so, and lists no module.
	other := readSBOM(t, res[0].SBOM)
	if got := sbomModules(other); len(got) != 0 {
		t.Errorf("modules of a binary without build information: %q", got)
	}
	if p := (*other.Components)[0].Properties; p == nil || !slices.Contains(*p, cdx.Property{Name: "go:buildinfo", Value: "none"}) {
		t.Errorf("binary without build information: properties %+v", p)
	}

	// Same sources, same bytes.
	o2 := o
	o2.OutDir = t.TempDir()
	if _, err := Build(o2); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(r.SBOM)
	b, _ := os.ReadFile(filepath.Join(o2.OutDir, "vfio-manager.cdx.json"))
	if !bytes.Equal(a, b) {
		t.Error("two builds wrote different SBOMs")
	}
	o3 := o
	o3.OutDir, o3.Created = t.TempDir(), o.Created.Add(1e9)
	if _, err := Build(o3); err != nil {
		t.Fatal(err)
	}
	if c, _ := os.ReadFile(filepath.Join(o3.OutDir, "vfio-manager.cdx.json")); bytes.Equal(a, c) {
		t.Error("another image time (another digest) wrote the same SBOM")
	}
}

// goVersionModules lists the modules `go version -m` prints, as "path
// version": a replaced module at its replacement's version ((devel) for a
// folder), and the standard library as stdlib.
func goVersionModules(out string) []string {
	var mods []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "dep":
			mods = append(mods, f[1]+" "+f[2])
		case len(f) >= 3 && f[0] == "=>" && len(mods) > 0:
			path, _, _ := strings.Cut(mods[len(mods)-1], " ")
			mods[len(mods)-1] = path + " " + f[2]
		case len(f) == 2 && strings.HasSuffix(f[0], ":"):
			mods = append(mods, "stdlib "+f[1]) // the first line: "<file>: go1.26.8"
		}
	}
	slices.Sort(mods)
	return mods
}
