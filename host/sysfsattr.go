package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func readAttr(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readOptionalAttr(dir, name string) (string, error) {
	s, err := readAttr(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return s, err
}

func readID(dir, name string) (uint16, error) {
	s, err := readAttr(dir, name)
	if err != nil {
		return 0, err
	}
	v, err := ParseID(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

func readOptionalID(dir, name string) (uint16, error) {
	s, err := readOptionalAttr(dir, name)
	if err != nil || s == "" {
		return 0, err
	}
	v, err := ParseID(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

func readOptionalInt(dir, name string, def int) (int, error) {
	s, err := readOptionalAttr(dir, name)
	if err != nil || s == "" {
		return def, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: invalid number %q: %w", filepath.Join(dir, name), s, err)
	}
	return v, nil
}

// linkBase returns the last element of a symlink's target, "" when the
// link does not exist.
func linkBase(p string) (string, error) {
	target, err := os.Readlink(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read link %s: %w", p, err)
	}
	return filepath.Base(target), nil
}

// readOptionalLink parses the last element of the target of link name in
// dir, def when there is no such link; a parse error names the link.
func readOptionalLink[T any](dir, name string, def T, parse func(string) (T, error)) (T, error) {
	p := filepath.Join(dir, name)
	base, err := linkBase(p)
	if err != nil || base == "" {
		return def, err
	}
	v, err := parse(base)
	if err != nil {
		return def, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
}

// readIfExists reads file p; exists is false, with no error, when there is
// no such file. Other errors name p.
func readIfExists(p string) (data []byte, exists bool, err error) {
	data, err = os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", p, err)
	}
	return data, true, nil
}

// dirNames lists a directory's entry names, nil when it does not exist.
func dirNames(p string) ([]string, error) {
	entries, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read dir %s: %w", p, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// isUUID reports the 8-4-4-4-12 hex form mdev devices are named with.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
