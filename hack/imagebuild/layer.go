package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer: a regular file (Data), a directory (Dir) or
// a symbolic link (Link).
type File struct {
	Path     string // absolute path in the image
	Dir      bool
	Link     string // target of a symbolic link
	Mode     int64  // permission bits (and sticky bit)
	UID, GID int
	Data     []byte
}

// layerTime is the modification time of every entry of every layer. It is
// a constant, not the image time, so that a layer's digest depends on its
// contents alone: the base and glibc layers are the same blobs in every
// image and every release, and registries and containerd store them once.
var layerTime = time.Unix(0, 0).UTC()

// layerTar returns a tar of files, reproducibly: entries sorted by path,
// parent directories added (0755, root), one fixed time, numeric owners
// only, no user or group names, USTAR headers where they suffice.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if p == "/" || p != "/"+strings.TrimPrefix(f.Path, "/") {
			return nil, fmt.Errorf("layer: bad path %q", f.Path)
		}
		f.Path = p
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("layer: %s twice", p)
		}
		byPath[p] = f
	}
	for p := range byPath {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if old, ok := byPath[d]; ok {
				if !old.Dir {
					return nil, fmt.Errorf("layer: %s is a file and a parent folder", d)
				}
				continue
			}
			byPath[d] = File{Path: d, Dir: true, Mode: 0o755}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    f.Mode,
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: layerTime,
		}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer returns files as a gzip-compressed OCI layer. The gzip stream is
// written here, with an empty header (no name, no time), so its bytes, and
// so the layer's digest, depend on the files alone.
func layer(files []File) (v1.Layer, error) {
	raw, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// uncompressedSize counts the bytes of a layer's tar.
func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

func fileNames(files []File) []string {
	out := make([]string, 0, len(files))
	for _, f := range files {
		if !f.Dir {
			out = append(out, f.Path)
		}
	}
	sort.Strings(out)
	return out
}
