package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The one test of real binaries, through hack/images.sh as `make images`
// runs it: vfio-manager (static), nri-gpu-plugin and vgpu-device-manager
// (cgo, NVML through dlopen) are built and packed twice, with the same
// digests; the NRI and vGPU device manager images hold glibc's loader, libc
// and the libraries a dlopened NVML needs, all from Debian's libc6 and
// nothing else of it, and the manager runs in its image; and in a chroot of that image
// the plugin dlopens a libnvidia-ml.so.1 from a "host" folder and calls it.
// The libc6 .deb was checked against Debian's signed package index.
func TestRealImages(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"bash", "gcc", "dpkg-query", "dpkg-deb", "apt-get"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the image build needs it (cgo, Debian's libc6 package)", tool)
		}
	}
	tmp := t.TempDir()
	images := func(out string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "hack", "images.sh"), args...)
		cmd.Env = append(os.Environ(), "BINARIES=vfio-manager nri-gpu-plugin vgpu-device-manager", "BIN_DIR="+filepath.Join(tmp, "bin"), "OUT="+out,
			"REGISTRY=", "VERSION=") // the defaults
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("hack/images.sh %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	out1, out2 := filepath.Join(tmp, "images1"), filepath.Join(tmp, "images2")
	table := images(out1)
	t.Logf("first build:\n%s", table)
	if table2 := images(out2); table2 != table {
		t.Errorf("second build printed another table:\n%s", table2)
	}
	for _, b := range []string{"vfio-manager", "nri-gpu-plugin", "vgpu-device-manager"} {
		a, err1 := os.ReadFile(filepath.Join(out1, b+".tar"))
		c, err2 := os.ReadFile(filepath.Join(out2, b+".tar"))
		if err1 != nil || err2 != nil || !bytes.Equal(a, c) {
			t.Errorf("%s: the archives of the two builds differ (%v, %v)", b, err1, err2)
		}
	}

	for _, b := range []string{"vfio-manager", "nri-gpu-plugin"} {
		a, err1 := os.ReadFile(filepath.Join(out1, b+SBOMSuffix))
		c, err2 := os.ReadFile(filepath.Join(out2, b+SBOMSuffix))
		if err1 != nil || err2 != nil || !bytes.Equal(a, c) {
			t.Errorf("%s: the SBOMs of the two builds differ (%v, %v)", b, err1, err2)
		}
	}

	libc6 := strings.TrimSpace(lastLine(images("", "libc6")))
	libcRoot := filepath.Join(libc6, "root")
	version := readTrim(t, filepath.Join(libc6, "version"))
	if installed, _ := exec.Command("dpkg-query", "-W", "-f=${Version}", "libc6").Output(); string(installed) != version {
		t.Errorf("libc6 %s fetched, %s installed (the version cgo linked against)", version, installed)
	}
	// The .deb was checked against Debian's signed index (imagebuild verify-deb) before it was used.
	if index := readTrim(t, filepath.Join(libc6, "index")); !strings.Contains(index, "sha256 "+readTrim(t, filepath.Join(libc6, "sha256"))) ||
		!strings.Contains(index, "_InRelease") || !strings.Contains(index, "signed by ") {
		t.Errorf("libc6's index record %q: want the .deb's sha256 and the signed InRelease that lists it", index)
	}

	vfio := openImage(t, filepath.Join(out1, "vfio-manager.tar"))
	if files := imageFiles(t, vfio); slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, "lib") }) {
		t.Errorf("the static vfio-manager image holds libraries: %q", files)
	}

	nri := openImage(t, filepath.Join(out1, "nri-gpu-plugin.tar"))
	cf, err := nri.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels[LabelLibc6] != version || cf.Config.Labels[LabelLibc6SHA256] != readTrim(t, filepath.Join(libc6, "sha256")) {
		t.Errorf("labels %v: want libc6 %s", cf.Config.Labels, version)
	}
	if cf.Config.User != "0:0" || cf.Architecture != "amd64" && cf.Architecture != "arm64" {
		t.Errorf("user %s, architecture %s", cf.Config.User, cf.Architecture)
	}
	// The NRI image's SBOM lists every Go module `go version -m` names in
	// its binary (wazero and go-plugin as the stand-ins that replace them),
	// and the libc6 package its glibc comes from.
	bom := readSBOM(t, filepath.Join(out1, "nri-gpu-plugin"+SBOMSuffix))
	gv, err := exec.Command("go", "version", "-m", filepath.Join(tmp, "bin", "nri-gpu-plugin")).Output()
	if err != nil {
		t.Fatal(err)
	}
	mods := goVersionModules(string(gv))
	if got := sbomModules(bom); len(mods) < 10 || !slices.Equal(got, mods) {
		t.Errorf("Go modules in the NRI image's SBOM:\n got %q\nwant (go version -m) %q", got, mods)
	}
	var debs []string
	for _, c := range *bom.Components {
		if strings.HasPrefix(c.PackageURL, "pkg:deb/") && c.Hashes != nil {
			debs = append(debs, c.Name+" "+c.Version+" "+(*c.Hashes)[0].Value)
		}
	}
	if want := []string{"libc6 " + version + " " + readTrim(t, filepath.Join(libc6, "sha256"))}; !slices.Equal(debs, want) {
		t.Errorf("Debian packages in the NRI image's SBOM: %q, want %q", debs, want)
	}

	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[cf.Architecture]
	ef, err := elf.Open(filepath.Join(tmp, "bin", "nri-gpu-plugin"))
	if err != nil {
		t.Fatal(err)
	}
	interp, _, _ := interpreter(ef)
	ef.Close()
	want := []string{strings.TrimPrefix(interp, "/"), "lib/" + triplet + "/" + path.Base(interp)}
	for _, l := range []string{"libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0", "librt.so.1"} {
		want = append(want, "lib/"+triplet+"/"+l)
	}
	slices.Sort(want)
	var fromLibc6 []string
	for _, f := range imageFiles(t, nri) {
		if _, err := os.Lstat(filepath.Join(libcRoot, f)); err == nil && !strings.HasSuffix(f, "/") {
			fromLibc6 = append(fromLibc6, f)
		}
	}
	if !slices.Equal(fromLibc6, want) {
		t.Errorf("files of libc6 in the NRI image:\n got %q\nwant %q", fromLibc6, want)
	}
	vgpu := openImage(t, filepath.Join(out1, "vgpu-device-manager.tar"))
	var vgpuLibc6 []string
	for _, f := range imageFiles(t, vgpu) {
		if _, err := os.Lstat(filepath.Join(libcRoot, f)); err == nil && !strings.HasSuffix(f, "/") {
			vgpuLibc6 = append(vgpuLibc6, f)
		}
	}
	if !slices.Equal(vgpuLibc6, want) {
		t.Errorf("files of libc6 in the vGPU device manager's image:\n got %q\nwant %q", vgpuLibc6, want)
	}
	vgpuRoot := filepath.Join(tmp, "vgpu-rootfs")
	unpack(t, vgpu, vgpuRoot)
	if out, err := runChroot(t, vgpuRoot, "/usr/local/bin/vgpu-device-manager", "run", "--help"); err != nil || !strings.Contains(out, "-driver-root") {
		t.Errorf("in its image, vgpu-device-manager run --help: %v\n%s", err, out)
	}

	// dlopen in the image: a stand-in libnvidia-ml.so.1 in the "host"
	// folder, linked against what NVIDIA's is linked against, answers
	// nvmlInit with NVML_ERROR_DRIVER_NOT_LOADED.
	rootfs := filepath.Join(tmp, "rootfs")
	unpack(t, nri, rootfs)
	src := filepath.Join(tmp, "nvml.c")
	write(t, src, `int nvmlInit(void) { return 9; }
int nvmlInit_v2(void) { return 9; }
const char *nvmlErrorString(int r) { (void)r; return "stand-in NVML: driver not loaded"; }
int nvmlShutdown(void) { return 0; }
`, 0o644)
	lib := filepath.Join(rootfs, "host", "usr", "lib64", "libnvidia-ml.so.1")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src, "-Wl,--no-as-needed",
		"-l:libpthread.so.0", "-l:libdl.so.2", "-l:libm.so.6", "-l:librt.so.1").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	generate := []string{"/usr/local/bin/nri-gpu-plugin", "generate-cdi", "--driver-root=/host", "--cdi-dir=/tmp/cdi", "--check-cdi-dir=/tmp/none"}
	out, _ := runChroot(t, rootfs, generate...)
	if !strings.Contains(out, "initialise NVML /host/usr/lib64/libnvidia-ml.so.1: stand-in NVML: driver not loaded") {
		t.Errorf("in the image, the plugin did not load and call the stand-in NVML:\n%s", out)
	}
	// Without one of those libraries, dlopen fails: they are needed.
	if err := os.Remove(filepath.Join(rootfs, "lib", triplet, "librt.so.1")); err != nil {
		t.Fatal(err)
	}
	out, _ = runChroot(t, rootfs, generate...)
	if !strings.Contains(out, "librt.so.1: cannot open shared object file") {
		t.Errorf("without librt.so.1 in the image, want dlopen to fail on it:\n%s", out)
	}
}

// runChroot runs a command in a chroot of rootfs: as root directly, else
// in a user namespace where this user is root.
func runChroot(t *testing.T, rootfs string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs}
	if uid, gid := os.Geteuid(), os.Getegid(); uid != 0 {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("chroot %s %q: %v (root, or unprivileged user namespaces, are needed)", rootfs, args, err)
	}
	return string(out), err
}

func openImage(t *testing.T, archive string) v1.Image {
	t.Helper()
	imgs, closeArchive, err := OpenArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeArchive)
	return imgs[0].Image
}

// imageFiles lists the entries of every layer of img, sorted.
func imageFiles(t *testing.T, img v1.Image) []string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range layers {
		for _, e := range layerEntries(t, l) {
			out = append(out, e.Name)
		}
	}
	slices.Sort(out)
	return out
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
