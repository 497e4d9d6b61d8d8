// Command imagebuild writes one OCI image archive per shipped binary of
// sandbox-gpu (and its CycloneDX SBOM, <binary>.cdx.json), checks the Debian
// packages that go into them, and pushes those archives to a registry, with no container
// daemon: go-containerregistry builds the images in process, from files on
// disk, and the same library pushes them.
//
//	imagebuild list  [--root DIR]
//	imagebuild build [--root DIR] --bin-dir DIR --out DIR [--registry R] [--version V]
//	                 [--libc-root DIR --libc-version V [--libc-sha256 H]] [--binaries a,b]
//	imagebuild push  --from DIR [--registry R] [--insecure]
//	imagebuild verify-deb --deb FILE --package P --version V --arch A [--keyring FILE] [--lists DIR]
//
// hack/images.sh builds the binaries reproducibly and fetches Debian's libc6
// before it calls build; `make images` and `make push` call hack/images.sh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

const usage = `usage:
  imagebuild list  [--root DIR]
  imagebuild build [--root DIR] --bin-dir DIR --out DIR [--registry R] [--version V]
                   [--revision REV] [--created UNIX_SECONDS]
                   [--libc-root DIR --libc-version V [--libc-sha256 HEX]] [--binaries a,b,...]
  imagebuild push  --from DIR [--registry R] [--insecure]
  imagebuild verify-deb --deb FILE --package P --version V --arch A [--keyring FILE] [--lists DIR]
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "list":
		return runList(args[1:], stdout)
	case "build":
		return runBuild(args[1:], stdout)
	case "push":
		return runPush(ctx, args[1:], stdout)
	case "verify-deb":
		return runVerifyDeb(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func runList(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("imagebuild list", flag.ContinueOnError)
	root := fs.String("root", "", "repository root (default: the git top level of the working directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := repoRoot(*root)
	if err != nil {
		return err
	}
	bins, err := Discover(r)
	if err != nil {
		return err
	}
	for _, b := range bins {
		fmt.Fprintln(stdout, b)
	}
	return nil
}

func runBuild(args []string, stdout io.Writer) error {
	var o Options
	fs := flag.NewFlagSet("imagebuild build", flag.ContinueOnError)
	root := fs.String("root", "", "repository root: cmd/ names the binaries and describes them (default: the git top level)")
	fs.StringVar(&o.BinDir, "bin-dir", "bin", "folder holding the built binaries")
	fs.StringVar(&o.OutDir, "out", "bin/images", "folder the archives are written to, one <binary>.tar and its SBOM <binary>.cdx.json each")
	fs.StringVar(&o.Registry, "registry", DefaultRegistry, "registry and path of the image names: <registry>/<binary>:<version>")
	fs.StringVar(&o.Version, "version", DefaultVersion, "image tag and org.opencontainers.image.version")
	revision := fs.String("revision", "", "org.opencontainers.image.revision (default: git HEAD of --root)")
	created := fs.String("created", "", "image time in Unix seconds (default: $SOURCE_DATE_EPOCH, else HEAD's commit time, else 0)")
	fs.StringVar(&o.LibcRoot, "libc-root", "", "Debian's libc6 package extracted (dpkg-deb -x): glibc for dynamically linked binaries")
	fs.StringVar(&o.LibcVersion, "libc-version", "", "Debian version of that libc6 package (recorded in a label)")
	fs.StringVar(&o.LibcSHA256, "libc-sha256", "", "sha256 of that libc6 .deb (recorded in a label)")
	binaries := fs.String("binaries", "", "comma-separated binaries (default: every directory of cmd/ but "+strings.Join(excluded, ", ")+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.Root, err = repoRoot(*root); err != nil {
		return err
	}
	if o.Created, err = createdTime(*created, o.Root); err != nil {
		return err
	}
	o.Revision = *revision
	if o.Revision == "" {
		o.Revision = gitRevision(o.Root)
	}
	if *binaries != "" {
		o.Binaries = strings.Split(*binaries, ",")
	}
	results, err := Build(o)
	if err != nil {
		return err
	}
	printTable(stdout, results)
	return nil
}

func runPush(ctx context.Context, args []string, stdout io.Writer) error {
	var o PushOptions
	fs := flag.NewFlagSet("imagebuild push", flag.ContinueOnError)
	fs.StringVar(&o.From, "from", "bin/images", "folder of the archives written by build")
	fs.StringVar(&o.Registry, "registry", "", "push to <registry>/<binary>:<tag> (default: the name each archive carries)")
	fs.BoolVar(&o.Insecure, "insecure", false, "plain HTTP (and no TLS verification) to the registry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	results, err := Push(ctx, o)
	if err != nil {
		return err
	}
	printTable(stdout, results)
	return nil
}

func runVerifyDeb(args []string, stdout io.Writer) error {
	c := DebCheck{Now: time.Now()}
	fs := flag.NewFlagSet("imagebuild verify-deb", flag.ContinueOnError)
	fs.StringVar(&c.Deb, "deb", "", "the .deb file to check")
	fs.StringVar(&c.Package, "package", "", "its package name in Debian's index (libc6)")
	fs.StringVar(&c.Version, "version", "", "its Debian version")
	fs.StringVar(&c.Arch, "arch", "", "its Debian architecture (amd64, arm64)")
	fs.StringVar(&c.Keyring, "keyring", DebianKeyring, "OpenPGP keys that must have signed the index")
	fs.StringVar(&c.Lists, "lists", AptLists, "apt's lists folder: the InRelease and Packages files apt-get update fetched")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || c.Deb == "" || c.Package == "" || c.Version == "" || c.Arch == "" {
		return errors.New("verify-deb needs --deb, --package, --version and --arch, and no arguments")
	}
	proof, err := VerifyDeb(c)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, proof)
	return nil
}

func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tSIZE\tUNPACKED\tUSER")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Ref, r.Digest, human(r.Size), human(r.Unpacked), r.User)
	}
	tw.Flush()
}

// human prints a byte count in MiB (KiB below one MiB), with one decimal.
func human(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
