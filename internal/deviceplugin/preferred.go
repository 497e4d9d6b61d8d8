package deviceplugin

import "sort"

// preferNUMA picks size devices from available: the must-include ones
// first, then devices of the NUMA node that already holds the must-include
// ones, else of the node with the most available devices, then the rest.
// Ties go to the lower node and device ID so the answer is stable.
func preferNUMA(available, must []string, size int, numa map[string]int) []string {
	out := make([]string, 0, size)
	taken := map[string]bool{}
	for _, id := range must {
		if len(out) < size && !taken[id] {
			out, taken[id] = append(out, id), true
		}
	}
	rest := make([]string, 0, len(available))
	count := map[int]int{}
	for _, id := range available {
		if !taken[id] {
			rest = append(rest, id)
			count[nodeOf(numa, id)]++
		}
	}
	target := NoNUMA
	if len(must) > 0 {
		target = nodeOf(numa, must[0])
	} else {
		nodes := make([]int, 0, len(count))
		for n := range count {
			nodes = append(nodes, n)
		}
		sort.Ints(nodes)
		best := 0
		for _, n := range nodes {
			// Known nodes win over an unknown one; then more devices; then the lower node.
			if c := count[n]; c > best || (target == NoNUMA && n != NoNUMA && c == best) {
				target, best = n, c
			}
		}
	}
	sort.SliceStable(rest, func(i, j int) bool {
		ni, nj := nodeOf(numa, rest[i]), nodeOf(numa, rest[j])
		if (ni == target) != (nj == target) {
			return ni == target
		}
		if (ni == NoNUMA) != (nj == NoNUMA) {
			return nj == NoNUMA
		}
		if count[ni] != count[nj] {
			return count[ni] > count[nj]
		}
		if ni != nj {
			return ni < nj
		}
		return rest[i] < rest[j]
	})
	for _, id := range rest {
		if len(out) >= size {
			break
		}
		out = append(out, id)
	}
	return out
}

func nodeOf(numa map[string]int, id string) int {
	if n, ok := numa[id]; ok {
		return n
	}
	return NoNUMA
}
