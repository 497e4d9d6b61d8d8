package podresources

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Holder is one container the kubelet allocated a device to.
type Holder struct {
	Pod       string // namespace/name
	Container string
	Resource  string
}

func (h Holder) String() string {
	return fmt.Sprintf("pod %s container %s (%s)", h.Pod, h.Container, h.Resource)
}

// Lister lists every pod's allocations (Client.List).
type Lister interface {
	List(ctx context.Context) (map[string]PodAllocations, error)
}

// Holders maps every device ID the kubelet allocated to pods, as NormID
// gives it, to who holds it (sorted by pod, then container). A device
// allocated to a pod is in use even before (or after) a process opens it:
// the VM is starting, or its container is between restarts.
func Holders(ctx context.Context, l Lister) (map[string][]Holder, error) {
	pods, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]Holder{}
	keys := make([]string, 0, len(pods))
	for k := range pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, pod := range keys {
		ctrs := make([]string, 0, len(pods[pod]))
		for c := range pods[pod] {
			ctrs = append(ctrs, c)
		}
		sort.Strings(ctrs)
		for _, ctr := range ctrs {
			for res, ids := range pods[pod][ctr] {
				for _, id := range ids {
					n := NormID(id)
					out[n] = append(out[n], Holder{Pod: pod, Container: ctr, Resource: res})
				}
			}
		}
	}
	return out, nil
}

// NormID makes device IDs comparable: PCI addresses in canonical form,
// everything else (UUIDs, group numbers) lower case without blanks, and a
// time-slicing replica ("GPU-...::3") as the device it shares.
func NormID(id string) string {
	id, _, _ = strings.Cut(id, "::")
	if a, err := host.ParseAddress(id); err == nil {
		return string(a)
	}
	return strings.ToLower(strings.TrimSpace(id))
}
