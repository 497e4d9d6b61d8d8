package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SBOMSuffix names an image's SBOM beside its archive: <binary>.cdx.json,
// CycloneDX 1.6 JSON.
const SBOMSuffix = ".cdx.json"

// SBOM describes what an image holds, as a CycloneDX BOM: the image (by
// digest), its binary with the Go modules and Go release it was built from
// (the binary's own build information, as `go version -m` prints it), and
// the Debian packages whose files it carries (libc6 for a dynamically
// linked binary). It is made from the image and the binary only, with the
// image's time: the same sources give the same bytes.
func SBOM(o Options, binary string, img v1.Image, ref name.Tag) ([]byte, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	binPath := filepath.Join(o.BinDir, binary)
	repo := ref.Context().Name()

	imageRef := "pkg:oci/" + binary + "@" + purlVersion(digest.String()) +
		"?arch=" + cf.Architecture + "&repository_url=" + url.QueryEscape(repo) + "&tag=" + url.QueryEscape(ref.TagStr())
	image := cdx.Component{
		BOMRef: imageRef, Type: cdx.ComponentTypeContainer, Name: repo, Version: digest.String(), PackageURL: imageRef,
		Description: cf.Config.Labels["org.opencontainers.image.description"],
		Hashes:      &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: digest.Hex}},
		Properties:  &[]cdx.Property{{Name: "oci:tag", Value: ref.TagStr()}, {Name: "oci:user", Value: cf.Config.User}},
	}

	data, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	binSum := sha256.Sum256(data)
	app := cdx.Component{
		BOMRef: "file:" + BinPath + "/" + binary, Type: cdx.ComponentTypeApplication, Name: binary, Version: o.Version,
		Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: fmt.Sprintf("%x", binSum)}},
	}
	var components []cdx.Component
	var appDeps []string
	// A Go binary lists the modules it was built from; an ELF without Go
	// build information (the tests' stand-ins) says so.
	props := []cdx.Property{{Name: "go:buildinfo", Value: "none"}}
	if bi, err := buildinfo.Read(bytes.NewReader(data)); err == nil {
		props = []cdx.Property{{Name: "go:main", Value: bi.Path}, {Name: "go:module", Value: bi.Main.Path}}
		for _, s := range bi.Settings {
			props = append(props, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
		}
		std := goComponent("stdlib", bi.GoVersion, "", "")
		components = append(components, std)
		appDeps = append(appDeps, std.BOMRef)
		for _, d := range bi.Deps {
			// A replaced module is what replaces it: the version and sum
			// of the replacement ((devel) for a folder of this repository).
			m, replaced := d, ""
			if d.Replace != nil {
				m, replaced = d.Replace, strings.TrimSpace(d.Replace.Path+" "+d.Replace.Version)+" (required "+d.Version+")"
			}
			c := goComponent(d.Path, m.Version, m.Sum, replaced)
			components = append(components, c)
			appDeps = append(appDeps, c.BOMRef)
		}
	}
	app.Properties = &props

	imageDeps := []string{app.BOMRef}
	if v := cf.Config.Labels[LabelLibc6]; v != "" {
		deb := cdx.Component{Type: cdx.ComponentTypeLibrary, Name: "libc6", Version: v, Supplier: &cdx.OrganizationalEntity{Name: "Debian"}}
		deb.PackageURL = "pkg:deb/debian/libc6@" + purlVersion(v) + "?arch=" + cf.Architecture // Debian names amd64 and arm64 as Go does
		deb.BOMRef = deb.PackageURL
		if sum := cf.Config.Labels[LabelLibc6SHA256]; sum != "" {
			deb.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}}
		}
		components = append(components, deb)
		imageDeps = append(imageDeps, deb.BOMRef)
	}
	components = append([]cdx.Component{app}, components...)

	bom := cdx.NewBOM()
	serial := sha256.Sum256([]byte("sandbox-gpu sbom " + digest.String()))
	serial[6] = serial[6]&0x0f | 0x50 // a name-based UUID (version 5 layout) of the digest
	serial[8] = serial[8]&0x3f | 0x80
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", serial[0:4], serial[4:6], serial[6:8], serial[8:10], serial[10:16])
	bom.Metadata = &cdx.Metadata{
		Timestamp: o.Created.UTC().Format(time.RFC3339),
		Component: &image,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: "sandbox-gpu hack/imagebuild",
			ExternalReferences: &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: Source}}}}},
		Licenses: &cdx.Licenses{{License: &cdx.License{ID: License}}},
	}
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{{Ref: image.BOMRef, Dependencies: &imageDeps}, {Ref: app.BOMRef, Dependencies: &appDeps}}

	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, fmt.Errorf("encode the SBOM: %w", err)
	}
	return buf.Bytes(), nil
}

// goComponent is a Go module (or the standard library) as a component.
func goComponent(path, version, sum, replacedBy string) cdx.Component {
	purl := "pkg:golang/" + path
	if version != "" {
		purl += "@" + purlVersion(version)
	}
	c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: path, Version: version, PackageURL: purl}
	var props []cdx.Property
	if sum != "" {
		props = append(props, cdx.Property{Name: "go:sum", Value: sum}) // go.sum's h1: hash of the module's files
	}
	if replacedBy != "" {
		props = append(props, cdx.Property{Name: "go:replaced-by", Value: replacedBy})
	}
	if len(props) > 0 {
		c.Properties = &props
	}
	return c
}

// purlVersion percent-encodes a version for a package URL (":" too, as the
// purl specification's examples write sha256%3A...).
func purlVersion(v string) string { return strings.ReplaceAll(url.PathEscape(v), ":", "%3A") }
