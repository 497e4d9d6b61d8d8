package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestDiscover(t *testing.T) {
	o := fakeRepo(t, "vfio-manager", "sandbox-gpu-operator")
	got, err := Discover(o.Root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sandbox-gpu-operator", "vfio-manager"}; !slices.Equal(got, want) {
		t.Fatalf("Discover = %q, want %q (no demo, no folder without Go files)", got, want)
	}
}

func TestDiscoverRealRepository(t *testing.T) {
	got, err := Discover("../..")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, "sandbox-gpu-demo") || !slices.Contains(got, "vfio-manager") || !slices.Contains(got, "nri-gpu-plugin") {
		t.Fatalf("Discover(repository) = %q", got)
	}
	for _, b := range got {
		if d := Describe("../..", b); !strings.HasPrefix(d, "Command "+b+" ") {
			t.Errorf("%s has no package comment to describe it: %q", b, d)
		}
	}
}

// Same inputs, same bytes: the archives of two builds are identical, and
// only a change of input changes a digest.
func TestReproducible(t *testing.T) {
	o := fakeRepo(t, "vfio-manager", "sandbox-gpu-operator")
	first, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.OutDir = filepath.Join(t.TempDir(), "again")
	second, err := Build(o2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Digest != second[i].Digest {
			t.Errorf("%s: digest %s, then %s", first[i].Binary, first[i].Digest, second[i].Digest)
		}
		a, _ := os.ReadFile(first[i].Path)
		b, _ := os.ReadFile(second[i].Path)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the two archives differ", first[i].Binary)
		}
	}

	o3 := o
	o3.OutDir, o3.Created = t.TempDir(), o.Created.Add(time.Second)
	third, err := Build(o3)
	if err != nil {
		t.Fatal(err)
	}
	if third[0].Digest == first[0].Digest {
		t.Error("another image time gave the same digest")
	}
	// The layers do not carry the image time: they are the same blobs.
	img1, _, _ := BuildImage(o, "vfio-manager")
	img3, _, _ := BuildImage(o3, "vfio-manager")
	m1, _ := img1.Manifest()
	m3, _ := img3.Manifest()
	if !reflect.DeepEqual(m1.Layers, m3.Layers) {
		t.Error("the layers changed with the image time")
	}
}

func TestImageContents(t *testing.T) {
	o := fakeRepo(t, "vfio-manager", "sandbox-gpu-operator", "some-new-binary")
	epoch := time.Unix(0, 0).UTC()
	base := []entry{
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "etc/group", Type: tar.TypeReg, Mode: 0o644, Data: "root:x:0:\nnonroot:x:65532:\n"},
		{Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{Name: "home/", Type: tar.TypeDir, Mode: 0o755},
		{Name: "home/nonroot/", Type: tar.TypeDir, Mode: 0o700, UID: 65532, GID: 65532},
		{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
	}
	for _, c := range []struct{ binary, user string }{
		{"vfio-manager", "0:0"},
		{"sandbox-gpu-operator", "65532:65532"},
		{"some-new-binary", "65532:65532"}, // non-root unless runAsRoot says why not
	} {
		t.Run(c.binary, func(t *testing.T) {
			img, ref, err := BuildImage(o, c.binary)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Name() != "ghcr.io/sandbox-gpu/"+c.binary+":v0.1.0" {
				t.Errorf("name %s", ref.Name())
			}
			if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %s", mt)
			}
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.Config.MediaType != types.OCIConfigJSON {
				t.Errorf("config media type %s", m.Config.MediaType)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != 2 {
				t.Fatalf("%d layers, want 2 (base, binary)", len(layers))
			}
			for _, l := range m.Layers {
				if l.MediaType != types.OCILayer {
					t.Errorf("layer media type %s", l.MediaType)
				}
			}
			bin := []entry{
				{Name: "usr/", Type: tar.TypeDir, Mode: 0o755},
				{Name: "usr/local/", Type: tar.TypeDir, Mode: 0o755},
				{Name: "usr/local/bin/", Type: tar.TypeDir, Mode: 0o755},
				{Name: "usr/local/bin/" + c.binary, Type: tar.TypeReg, Mode: 0o755, Data: string(fakeELF("binary " + c.binary))},
			}
			for i, want := range [][]entry{base, bin} {
				for j := range want {
					want[j].ModTime = epoch
				}
				if got := layerEntries(t, layers[i]); !reflect.DeepEqual(got, want) {
					t.Errorf("layer %d:\n got %+v\nwant %+v", i, got, want)
				}
			}

			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(testTime) {
				t.Errorf("os %s, architecture %s, created %v", cf.OS, cf.Architecture, cf.Created)
			}
			if cf.Config.User != c.user {
				t.Errorf("user %q, want %q", cf.Config.User, c.user)
			}
			if want := []string{"/usr/local/bin/" + c.binary}; !slices.Equal(cf.Config.Entrypoint, want) || len(cf.Config.Cmd) != 0 {
				t.Errorf("entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
			}
			wantLabels := map[string]string{
				"org.opencontainers.image.title":       c.binary,
				"org.opencontainers.image.description": "Command " + c.binary + " does fake things.",
				"org.opencontainers.image.source":      "https://github.com/sandbox-gpu/sandbox-gpu",
				"org.opencontainers.image.version":     "v0.1.0",
				"org.opencontainers.image.revision":    o.Revision,
				"org.opencontainers.image.licenses":    "Apache-2.0",
				"org.opencontainers.image.created":     "2026-05-04T03:02:01Z",
			}
			if !reflect.DeepEqual(cf.Config.Labels, wantLabels) {
				t.Errorf("labels\n got %v\nwant %v", cf.Config.Labels, wantLabels)
			}
			if len(cf.History) != 2 {
				t.Fatalf("history %+v", cf.History)
			}
			for _, h := range cf.History {
				if !h.Created.Time.Equal(testTime) || h.CreatedBy == "" {
					t.Errorf("history %+v", h)
				}
			}
		})
	}
}

func TestDynamicBinaryNeedsLibc(t *testing.T) {
	o := fakeRepo(t, "nri-gpu-plugin")
	// A dynamically linked binary: any one of this machine's will do for
	// the check, which fails before glibc is looked for.
	self, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(o.BinDir, "nri-gpu-plugin"), string(self), 0o755)
	_, _, err = BuildImage(o, "nri-gpu-plugin")
	if err == nil || !strings.Contains(err.Error(), "--libc-root") {
		t.Fatalf("err = %v, want one asking for --libc-root", err)
	}
	write(t, filepath.Join(o.BinDir, "nri-gpu-plugin"), "#!/bin/sh\n", 0o755)
	if _, _, err = BuildImage(o, "nri-gpu-plugin"); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Fatalf("err = %v, want not an ELF binary", err)
	}
}

// The archive is an OCI image layout that go-containerregistry's layout
// package opens, with the names ctr and OCI tools read.
func TestArchiveLayout(t *testing.T) {
	o := fakeRepo(t, "sandbox-gpu-validator")
	o.Registry, o.Version = "registry.example:5000/team/sandbox-gpu", "v9.8.7"
	res, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Path != filepath.Join(o.OutDir, "sandbox-gpu-validator.tar") || r.Ref != "registry.example:5000/team/sandbox-gpu/sandbox-gpu-validator:v9.8.7" {
		t.Fatalf("result %+v", r)
	}

	dir := t.TempDir()
	if err := untar(r.Path, dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "oci-layout")); string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", b)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index %+v", im)
	}
	d := im.Manifests[0]
	if d.Digest.String() != r.Digest || d.MediaType != types.OCIManifestSchema1 {
		t.Errorf("descriptor %+v, want digest %s", d, r.Digest)
	}
	if want := map[string]string{AnnotationImageName: r.Ref, AnnotationRefName: "v9.8.7"}; !reflect.DeepEqual(d.Annotations, want) {
		t.Errorf("annotations %v, want %v", d.Annotations, want)
	}
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("platform %+v", d.Platform)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Every blob is there and matches its digest (validate reads them all).
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		dg, _ := l.Digest()
		if _, err := os.Stat(filepath.Join(dir, "blobs", "sha256", dg.Hex)); err != nil {
			t.Error(err)
		}
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(raw, &cf); err != nil || cf.Config.User != "65532:65532" {
		t.Errorf("config %s: %v", raw, err)
	}

	// The archive holds the layout and nothing else, in sorted order, with
	// fixed owners and times.
	f, err := os.Open(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d, time %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if !slices.IsSorted(names) || names[0] != "blobs/" || names[len(names)-1] != "oci-layout" || len(names) != 2+4+2 {
		t.Errorf("entries %q", names)
	}

	// OpenArchive, which push uses, finds the image by its name.
	imgs, closeArchive, err := OpenArchive(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeArchive()
	if len(imgs) != 1 || imgs[0].Name != r.Ref {
		t.Fatalf("OpenArchive: %+v", imgs)
	}
}

func TestUntarRefusesEscapes(t *testing.T) {
	dir := t.TempDir()
	for _, h := range []*tar.Header{
		{Name: "../evil", Typeflag: tar.TypeReg},
		{Name: "/abs", Typeflag: tar.TypeReg},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Close()
		p := filepath.Join(dir, "a.tar")
		write(t, p, buf.String(), 0o644)
		if err := untar(p, t.TempDir()); err == nil {
			t.Errorf("%s: no error", h.Name)
		}
	}
}

func TestLayerTarRejects(t *testing.T) {
	for _, files := range [][]File{
		{{Path: "/a", Data: nil}, {Path: "a"}},
		{{Path: "/a/../b"}},
		{{Path: "/"}},
		{{Path: "/a"}, {Path: "/a/b"}},
	} {
		if _, err := layerTar(files); err == nil {
			t.Errorf("%+v: no error", files)
		}
	}
}

// The command line: list, then build, which prints the table.
func TestCommandLine(t *testing.T) {
	o := fakeRepo(t, "vfio-manager", "sandbox-gpu-operator")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"list", "--root", o.Root}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "sandbox-gpu-operator\nvfio-manager\n" {
		t.Errorf("list printed %q", out.String())
	}
	out.Reset()
	t.Setenv("SOURCE_DATE_EPOCH", "1777777777")
	err := run(context.Background(), []string{"build", "--root", o.Root, "--bin-dir", o.BinDir, "--out", o.OutDir,
		"--registry", "example.com/x", "--version", "v1.2.3", "--revision", "abc"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "IMAGE") ||
		!strings.Contains(lines[1], "example.com/x/sandbox-gpu-operator:v1.2.3") || !strings.Contains(lines[1], "65532:65532") ||
		!regexp.MustCompile(`^example.com/x/vfio-manager:v1.2.3 +sha256:[0-9a-f]{64} `).MatchString(lines[2]) || !strings.Contains(lines[2], "0:0") {
		t.Errorf("build printed\n%s", out.String())
	}
	imgs, closeArchive, err := OpenArchive(filepath.Join(o.OutDir, "vfio-manager.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeArchive()
	cf, _ := imgs[0].Image.ConfigFile()
	if cf.Created.Unix() != 1777777777 || cf.Config.Labels["org.opencontainers.image.revision"] != "abc" {
		t.Errorf("created %v, labels %v", cf.Created, cf.Config.Labels)
	}
	if err := run(context.Background(), []string{"build", "--root", o.Root, "--created", "yesterday"}, &out); err == nil {
		t.Error("--created yesterday: no error")
	}
}
