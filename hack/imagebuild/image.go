package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	DefaultRegistry = "ghcr.io/sandbox-gpu"
	DefaultVersion  = "v0.1.0"
	Source          = "https://github.com/sandbox-gpu/sandbox-gpu"
	License         = "Apache-2.0"

	// BinPath is where every image holds its binary; it is the entrypoint.
	BinPath = "/usr/local/bin"

	// NonRoot is the user and group every operand runs as unless runAsRoot
	// names it (the distroless convention; /etc/passwd calls it nonroot).
	NonRoot = 65532

	// LabelLibc6 records the Debian version of the libc6 package a
	// dynamically linked binary's glibc comes from; LabelLibc6SHA256 its .deb.
	LabelLibc6       = "io.sandbox-gpu.debian.libc6.version"
	LabelLibc6SHA256 = "io.sandbox-gpu.debian.libc6.sha256"

	// AnnotationImageName is the annotation `ctr images import` names the
	// image by; AnnotationRefName is the OCI one (the tag).
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// excluded are the directories of cmd/ that are no shipped binary.
var excluded = []string{"sandbox-gpu-demo"} // `make demo` only: it runs the story in one process

// runAsRoot names the operands that must run as root, and why. Every other
// binary runs as NonRoot:NonRoot (the operator and the validator today): a
// new binary is non-root unless it is added here with its reason.
var runAsRoot = map[string]string{
	// Writes sysfs (driver_override, unbind, bind, new_id, drivers_probe),
	// loads vfio modules and reads every process's open files under /proc.
	"vfio-manager": "writes sysfs and loads kernel modules",
	// Both device plugins create their socket in the kubelet's root-owned
	// /var/lib/kubelet/device-plugins and register on the kubelet's socket
	// there; the Kata one also writes its CDI spec to its root-owned folder /var/lib/sandbox-gpu/kata-cdi.
	"kubevirt-device-plugin": "serves from the kubelet's root-owned device-plugins folder",
	"kata-device-plugin":     "serves from the kubelet's root-owned device-plugins folder and writes its root-owned CDI folder /var/lib/sandbox-gpu/kata-cdi",
	// containerd's NRI socket and the kubelet's pod-resources socket are
	// root-only (0700 folders, 0660 root sockets).
	"nri-gpu-plugin": "connects to containerd's root-only NRI socket and the kubelet's pod-resources socket",
	// Creates and removes mdev and SR-IOV vGPUs through sysfs writes.
	"vgpu-device-manager": "writes sysfs to create and remove vGPUs",
}

// dlopenLibs are the libc6 libraries an image must hold, besides what its
// binary links against, for the libraries it dlopens from the host at run
// time. The NRI plugin dlopens the driver's libnvidia-ml.so.1, which is
// linked against libpthread, libdl, libm and librt: glibc's loader looks for
// them in the image (the host's driver folder holds no glibc), so they must
// come from the same libc6 as the image's libc.so.6. The vGPU device
// manager dlopens the vGPU host driver's NVML the same way.
var dlopenLibs = map[string][]string{
	"nri-gpu-plugin":      {"libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1"},
	"vgpu-device-manager": {"libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1"},
}

// Options say what Build builds.
type Options struct {
	Root     string // repository root: cmd/<binary> describes each binary
	BinDir   string // the built binaries, <BinDir>/<binary>
	OutDir   string // the archives, <OutDir>/<binary>.tar
	Registry string // image names are <Registry>/<binary>:<Version>
	Version  string
	Revision string    // org.opencontainers.image.revision; omitted when empty
	Created  time.Time // the one time every timestamp in an image has

	// LibcRoot is Debian's libc6 package extracted (dpkg-deb -x), needed
	// for dynamically linked binaries; LibcVersion is its Debian version and
	// LibcSHA256 the .deb's digest, both recorded in labels.
	LibcRoot, LibcVersion, LibcSHA256 string

	Binaries []string // default Discover(Root)
}

// Result is one image built or pushed.
type Result struct {
	Binary   string
	Ref      string // full image name: registry/binary:tag
	Digest   string // the manifest's digest
	Size     int64  // manifest, config and compressed layers: what a pull moves
	Unpacked int64  // the layers' uncompressed tar bytes
	User     string
	Path     string // the archive
	SBOM     string // its CycloneDX SBOM, <binary>.cdx.json beside it
}

// Discover lists the shipped binaries: the directories of <root>/cmd that
// hold Go files, but the excluded ones, sorted.
func Discover(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("discover binaries: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || slices.Contains(excluded, e.Name()) {
			continue
		}
		gofiles, _ := filepath.Glob(filepath.Join(root, "cmd", e.Name(), "*.go"))
		if len(gofiles) > 0 {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("discover binaries: no command under %s", filepath.Join(root, "cmd"))
	}
	return out, nil
}

// Describe returns the first sentence of the binary's package comment in
// cmd/<binary>, or a generic line when it has none.
func Describe(root, binary string) string {
	files, _ := filepath.Glob(filepath.Join(root, "cmd", binary, "*.go"))
	slices.Sort(files)
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil || af.Doc == nil {
			continue
		}
		if s := new(doc.Package).Synopsis(af.Doc.Text()); s != "" {
			return s
		}
	}
	return "sandbox-gpu " + binary
}

// UserOf returns the user an operand's image runs as, uid:gid.
func UserOf(binary string) string {
	if _, ok := runAsRoot[binary]; ok {
		return "0:0"
	}
	return fmt.Sprintf("%d:%d", NonRoot, NonRoot)
}

// Ref returns the image name of a binary.
func Ref(registry, binary, version string) (name.Tag, error) {
	return name.NewTag(strings.TrimSuffix(registry, "/")+"/"+binary+":"+version, name.StrictValidation)
}

// Build writes an archive and its SBOM for each binary and returns what it
// wrote, in the binaries' order.
func Build(o Options) ([]Result, error) {
	bins := o.Binaries
	if len(bins) == 0 {
		var err error
		if bins, err = Discover(o.Root); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []Result
	for _, b := range bins {
		img, ref, err := BuildImage(o, b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		path := filepath.Join(o.OutDir, b+".tar")
		if err := WriteArchive(path, img, ref); err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		sbom, err := SBOM(o, b, img, ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		sbomPath := filepath.Join(o.OutDir, b+SBOMSuffix)
		if err := os.WriteFile(sbomPath, sbom, 0o644); err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		r, err := describeImage(img, ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b, err)
		}
		r.Binary, r.Path, r.SBOM = b, path, sbomPath
		out = append(out, r)
	}
	return out, nil
}

// BuildImage builds the image of one binary: a base layer (passwd, group,
// /tmp), glibc when the binary is dynamically linked, and the binary.
func BuildImage(o Options, binary string) (v1.Image, name.Tag, error) {
	ref, err := Ref(o.Registry, binary, o.Version)
	if err != nil {
		return nil, name.Tag{}, err
	}
	binPath := filepath.Join(o.BinDir, binary)
	data, err := os.ReadFile(binPath)
	if err != nil {
		return nil, name.Tag{}, err
	}
	ef, err := elf.Open(binPath)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s is not an ELF binary: %w", binPath, err)
	}
	defer ef.Close()
	machine, err := archOf(ef.Machine)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s: %w", binPath, err)
	}
	if ef.Class != elf.ELFCLASS64 {
		return nil, name.Tag{}, fmt.Errorf("%s: not a 64-bit binary", binPath)
	}

	user := UserOf(binary)
	labels := map[string]string{
		"org.opencontainers.image.title":       binary,
		"org.opencontainers.image.description": Describe(o.Root, binary),
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.licenses":    License,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}

	var adds []mutate.Addendum
	base, err := baseLayer()
	if err != nil {
		return nil, name.Tag{}, err
	}
	adds = append(adds, addendum(base, o.Created, "base: /etc/passwd and /etc/group (root, nonroot 65532), /tmp, /home/nonroot"))

	interp, dynamic, err := interpreter(ef)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s: %w", binPath, err)
	}
	if dynamic {
		if o.LibcRoot == "" || o.LibcVersion == "" {
			return nil, name.Tag{}, fmt.Errorf("%s is dynamically linked (%s): --libc-root and --libc-version are needed", binPath, interp)
		}
		files, err := GlibcFiles(ef, o.LibcRoot, dlopenLibs[binary])
		if err != nil {
			return nil, name.Tag{}, fmt.Errorf("%s: %w", binPath, err)
		}
		l, err := layer(files)
		if err != nil {
			return nil, name.Tag{}, err
		}
		adds = append(adds, addendum(l, o.Created, "glibc from Debian libc6 "+o.LibcVersion+": "+strings.Join(fileNames(files), " ")))
		labels[LabelLibc6] = o.LibcVersion
		if o.LibcSHA256 != "" {
			labels[LabelLibc6SHA256] = o.LibcSHA256
		}
	}

	bl, err := layer([]File{{Path: BinPath + "/" + binary, Mode: 0o755, Data: data}})
	if err != nil {
		return nil, name.Tag{}, err
	}
	what := "binary: " + BinPath + "/" + binary + ", runs as " + user
	if why, ok := runAsRoot[binary]; ok {
		what += " (" + why + ")"
	}
	adds = append(adds, addendum(bl, o.Created, what))

	cfg := &v1.ConfigFile{
		Architecture: machine.goarch,
		OS:           "linux",
		Created:      v1.Time{Time: o.Created.UTC()},
		Config: v1.Config{
			User:       user,
			Entrypoint: []string{BinPath + "/" + binary},
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, name.Tag{}, err
	}
	if img, err = mutate.Append(img, adds...); err != nil {
		return nil, name.Tag{}, err
	}
	return img, ref, nil
}

func addendum(l v1.Layer, created time.Time, what string) mutate.Addendum {
	return mutate.Addendum{
		Layer:     l,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created.UTC()},
			CreatedBy: "hack/imagebuild: " + what,
		},
	}
}

// baseLayer holds what every image shares: the two users, a world-writable
// /tmp and the non-root user's home.
func baseLayer() (v1.Layer, error) {
	return layer([]File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: NonRoot, GID: NonRoot},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	})
}

// describeImage sums up an image for the table.
func describeImage(img v1.Image, ref name.Tag) (Result, error) {
	r := Result{Ref: ref.Name()}
	d, err := img.Digest()
	if err != nil {
		return r, err
	}
	r.Digest = d.String()
	m, err := img.Manifest()
	if err != nil {
		return r, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return r, err
	}
	r.Size = int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		r.Size += l.Size
	}
	layers, err := img.Layers()
	if err != nil {
		return r, err
	}
	for _, l := range layers {
		n, err := uncompressedSize(l)
		if err != nil {
			return r, err
		}
		r.Unpacked += n
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return r, err
	}
	r.User = cf.Config.User
	return r, nil
}

// repoRoot returns dir, or the git top level of the working directory.
func repoRoot(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", errors.New("--root not given and the working directory is in no git repository")
	}
	return strings.TrimSpace(string(out)), nil
}

// gitRevision returns HEAD's commit of the repository at root, or "".
func gitRevision(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// createdTime returns the image time: flag (Unix seconds), else
// $SOURCE_DATE_EPOCH, else the commit time of HEAD, else the Unix epoch.
func createdTime(flagValue, root string) (time.Time, error) {
	for _, s := range []struct{ from, v string }{{"--created", flagValue}, {"SOURCE_DATE_EPOCH", os.Getenv("SOURCE_DATE_EPOCH")}} {
		if s.v == "" {
			continue
		}
		n, err := strconv.ParseInt(s.v, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("%s=%q: want Unix seconds", s.from, s.v)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%ct", "HEAD").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
			return time.Unix(n, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}
