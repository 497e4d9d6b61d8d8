package gpuname

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// ResourcePrefix is the domain of every GPU resource name.
const ResourcePrefix = "nvidia.com/"

// ErrOverrides marks a names config that does not parse or holds an
// invalid key or name.
var ErrOverrides = errors.New("invalid names config")

var overrideKey = regexp.MustCompile(`^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$`)

// ParseOverrides parses a names config: a YAML or JSON map from
// "VENDOR:DEVICE" (exactly four hex digits each side, any case, like
// "10de:2236") to the resource name after nvidia.com/ (a Kubernetes
// extended-resource name: at most 63 characters, letters or digits at both
// ends, '-', '_' and '.' inside). Errors name the key.
func ParseOverrides(b []byte) (map[uint32]string, error) {
	var raw map[string]any
	if err := yaml.UnmarshalStrict(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOverrides, err)
	}
	m := make(map[string]string, len(raw))
	for k, v := range raw {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: key %q: the name must be a string, got %s", ErrOverrides, k, describe(v))
		}
		m[k] = s
	}
	return checkOverrides(m)
}

// checkOverrides validates keys and names; two keys for one id are an
// error (10de:2236 and 10DE:2236).
func checkOverrides(m map[string]string) (map[uint32]string, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key is reported, always the same one
	out := make(map[uint32]string, len(m))
	seen := make(map[uint32]string, len(m))
	for _, k := range keys {
		id, err := ParseOverrideKey(k)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOverrides, err)
		}
		if other, dup := seen[id]; dup {
			return nil, fmt.Errorf("%w: keys %q and %q name the same device", ErrOverrides, other, k)
		}
		if err := ValidResourceName(m[k]); err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrOverrides, k, err)
		}
		seen[id], out[id] = k, m[k]
	}
	return out, nil
}

// ParseOverrideKey parses "VENDOR:DEVICE" into vendor<<16|device.
func ParseOverrideKey(k string) (uint32, error) {
	if !overrideKey.MatchString(k) {
		return 0, fmt.Errorf("key %q: want VENDOR:DEVICE, exactly 4 hex digits each side, like \"10de:2236\" (quote keys made of digits only in YAML)", k)
	}
	v, err := strconv.ParseUint(k[:4]+k[5:], 16, 32)
	if err != nil {
		return 0, fmt.Errorf("key %q: %w", k, err)
	}
	return uint32(v), nil
}

// ValidResourceName checks the part of an extended-resource name after
// nvidia.com/.
func ValidResourceName(name string) error {
	if errs := validation.IsQualifiedName(ResourcePrefix + name); len(errs) > 0 {
		return fmt.Errorf("name %q is not a valid resource name after %s: %s", name, ResourcePrefix, strings.Join(errs, "; "))
	}
	return nil
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case float64, int64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case map[string]any:
		return "a map"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}
