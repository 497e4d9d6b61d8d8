package podresources

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// SocketFlag is a --pod-resources-socket flag (flag.Value) that remembers
// whether it was given: a socket given explicitly must exist, the default
// may be absent (a host without a kubelet).
type SocketFlag struct {
	path  string
	given bool
}

// NewSocketFlag is the flag with its default path.
func NewSocketFlag(def string) SocketFlag { return SocketFlag{path: def} }

func (f *SocketFlag) String() string     { return f.path }
func (f *SocketFlag) Set(v string) error { f.path, f.given = v, true; return nil }

// Path is the socket's path ("" when set empty: ask no kubelet).
func (f *SocketFlag) Path() string { return f.path }

// Open connects to the socket. It returns nil and no error when there is
// no kubelet to ask: the flag set empty, or the default socket absent. A
// socket given explicitly that cannot be found is an error naming it.
func (f *SocketFlag) Open(timeout time.Duration) (*Client, error) {
	if f.path == "" {
		return nil, nil
	}
	if _, err := os.Stat(f.path); err != nil {
		if errors.Is(err, fs.ErrNotExist) && !f.given {
			return nil, nil
		}
		return nil, fmt.Errorf("kubelet PodResources socket %s: %w", f.path, err)
	}
	return New(f.path, timeout)
}
