package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// blob is one file of an OCI image layout.
type blob struct {
	name string
	open func() (io.ReadCloser, error)
	size int64
}

// WriteArchive writes img as an OCI image layout in a tar at path
// (index.json, oci-layout, blobs/sha256/...), reproducibly: entries sorted,
// one fixed time, root owner. The index names the image for `ctr images
// import` (io.containerd.image.name, the full name) and for OCI tools
// (org.opencontainers.image.ref.name, the tag). The file is replaced
// atomically.
func WriteArchive(dst string, img v1.Image, ref name.Tag) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mt,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture},
			Annotations: map[string]string{
				AnnotationImageName: ref.Name(),
				AnnotationRefName:   ref.TagStr(),
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}

	blobs := map[string]blob{}
	addBytes := func(name string, b []byte) {
		blobs[name] = blob{name: name, size: int64(len(b)), open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}}
	}
	addBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	addBytes("index.json", indexJSON)
	addBytes(blobPath(digest), manifest)
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgDigest, err := img.ConfigName()
	if err != nil {
		return err
	}
	addBytes(blobPath(cfgDigest), rawCfg)
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		blobs[blobPath(d)] = blob{name: blobPath(d), size: size, open: l.Compressed}
	}

	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := writeTar(tmp, blobs); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

func writeTar(w io.Writer, blobs map[string]blob) error {
	names := make([]string, 0, len(blobs))
	dirs := map[string]bool{}
	for n := range blobs {
		names = append(names, n)
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: layerTime, Mode: 0o644, Typeflag: tar.TypeReg}
		if dirs[n] {
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		b := blobs[n]
		h.Size = b.size
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		rc, err := b.open()
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return tw.Close()
}

// Archived is one image of an archive, as the index names it.
type Archived struct {
	Name  string // io.containerd.image.name
	Image v1.Image
}

// OpenArchive reads an archive written by WriteArchive (any OCI image
// layout in a tar) with go-containerregistry's layout package: it unpacks
// it into a temporary folder, which close removes.
func OpenArchive(archive string) (images []Archived, close func(), err error) {
	dir, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return nil, nil, err
	}
	close = func() { os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			close()
		}
	}()
	if err := untar(archive, dir); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", archive, err)
	}
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", archive, err)
		}
		images = append(images, Archived{Name: d.Annotations[AnnotationImageName], Image: img})
	}
	if len(images) == 0 {
		return nil, nil, fmt.Errorf("%s: no image in its index", archive)
	}
	return images, close, nil
}

// untar unpacks the regular files and folders of a tar into dir; any other
// entry, or a name leaving dir, is an error.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		n := path.Clean(h.Name)
		if !filepath.IsLocal(n) {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		p := filepath.Join(dir, n)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %q", h.Name, h.Typeflag)
		}
	}
}
