package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions say what Push pushes where.
type PushOptions struct {
	From     string // folder of archives (*.tar)
	Registry string // when set, push to <Registry>/<binary>:<tag> instead of each archive's own name
	// Insecure allows plain HTTP and skips TLS verification. Loopback and
	// private addresses (localhost:5000, 127.0.0.1:5000) get plain HTTP
	// from go-containerregistry even without it.
	Insecure bool
}

// Push pushes every archive of o.From to its registry and checks that the
// registry then serves the tag at the archive's digest. Credentials come
// from the Docker config (~/.docker/config.json, $DOCKER_CONFIG), as docker
// login writes it.
func Push(ctx context.Context, o PushOptions) ([]Result, error) {
	archives, err := filepath.Glob(filepath.Join(o.From, "*.tar"))
	if err != nil {
		return nil, err
	}
	if len(archives) == 0 {
		return nil, fmt.Errorf("no archive (*.tar) in %s: run the build first", o.From)
	}
	sort.Strings(archives)
	var nameOpts []name.Option
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure
		remoteOpts = append(remoteOpts, remote.WithTransport(t))
	}
	var out []Result
	for _, a := range archives {
		r, err := pushArchive(a, o.Registry, nameOpts, remoteOpts)
		if err != nil {
			return nil, err
		}
		out = append(out, r...)
	}
	return out, nil
}

func pushArchive(archive, registry string, nameOpts []name.Option, remoteOpts []remote.Option) ([]Result, error) {
	images, closeArchive, err := OpenArchive(archive)
	if err != nil {
		return nil, err
	}
	defer closeArchive()
	var out []Result
	for _, im := range images {
		if im.Name == "" {
			return nil, fmt.Errorf("%s: the image has no %s annotation", archive, AnnotationImageName)
		}
		src, err := name.NewTag(im.Name, nameOpts...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		dst := src
		if registry != "" {
			dst, err = name.NewTag(strings.TrimSuffix(registry, "/")+"/"+path.Base(src.RepositoryStr())+":"+src.TagStr(), nameOpts...)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", archive, err)
			}
		}
		if err := remote.Write(dst, im.Image, remoteOpts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", dst, err)
		}
		r, err := describeImage(im.Image, dst)
		if err != nil {
			return nil, err
		}
		got, err := remote.Head(dst, remoteOpts...)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", dst, err)
		}
		if got.Digest.String() != r.Digest {
			return nil, fmt.Errorf("pushed %s at %s, but the registry serves %s", dst, r.Digest, got.Digest)
		}
		r.Binary, r.Path = path.Base(dst.RepositoryStr()), archive
		out = append(out, r)
	}
	return out, nil
}
