package vfio

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// unit is the GPUs of one IOMMU group (one GPU where each has its own
// group, as behind ACS): they move together, so a count takes them whole.
type unit []splitGPU

func (u unit) numa() int { return u[0].numa() }

func size(us []unit) int {
	n := 0
	for _, u := range us {
		n += len(u)
	}
	return n
}

// units groups GPUs by IOMMU group, in address order of their first GPU.
func units(gpus []splitGPU) []unit {
	var out []unit
	index := map[int]int{}
	for _, g := range gpus {
		grp := g.f.IOMMUGroup
		if i, ok := index[grp]; ok && grp != host.NoGroup {
			out[i] = append(out[i], g)
			continue
		}
		index[grp] = len(out)
		out = append(out, unit{g})
	}
	return out
}

// pickCount chooses n GPUs for VMs (see Planner.Split), whole IOMMU groups
// at a time; false when whole groups cannot make n.
func pickCount(gpus []splitGPU, n int) ([]splitGPU, bool) {
	var tiers [4][]unit // busy on vfio, idle on vfio, idle on the host driver, busy there
	for _, u := range units(gpus) {
		onVFIO, busy := false, false
		for _, g := range u {
			onVFIO, busy = onVFIO || g.onVFIO, busy || g.busy
		}
		t := 3
		switch {
		case onVFIO && busy:
			t = 0
		case onVFIO:
			t = 1
		case !busy:
			t = 2
		}
		tiers[t] = append(tiers[t], u)
	}
	var keep []unit
	for _, tier := range tiers {
		keep = append(keep, pickNUMA(tier, keep, n-size(keep))...)
	}
	if size(keep) != n {
		// Whole groups in NUMA order left a gap: any groups that make n,
		// in the same order of preference.
		var ordered []unit
		for _, tier := range tiers {
			ordered = append(ordered, pickNUMA(tier, nil, size(tier))...)
		}
		keep = exactly(ordered, n)
	}
	var out []splitGPU
	for _, u := range keep {
		out = append(out, u...)
	}
	return out, len(out) == n
}

// exactly returns units of us (in order of preference) that make n GPUs,
// preferring earlier ones; nil when none do.
func exactly(us []unit, n int) []unit {
	// can[i][s]: units i.. can make s.
	can := make([][]bool, len(us)+1)
	for i := range can {
		can[i] = make([]bool, n+1)
		can[i][0] = true
	}
	for i := len(us) - 1; i >= 0; i-- {
		for s := 1; s <= n; s++ {
			can[i][s] = can[i+1][s] || (len(us[i]) <= s && can[i+1][s-len(us[i])])
		}
	}
	if !can[0][n] {
		return nil
	}
	var out []unit
	for i, rem := 0, n; rem > 0; i++ {
		if len(us[i]) <= rem && can[i+1][rem-len(us[i])] {
			out = append(out, us[i])
			rem -= len(us[i])
		}
	}
	return out
}

// sharedGroups describes the IOMMU groups with more than one GPU.
func sharedGroups(gpus []splitGPU) string {
	var parts []string
	for _, u := range units(gpus) {
		if len(u) > 1 {
			parts = append(parts, fmt.Sprintf("group %d: %s", u[0].f.IOMMUGroup, strings.Join(strs(addressesOf(u)), " ")))
		}
	}
	return strings.Join(parts, "; ")
}

func addressesOf(u unit) []host.Address {
	out := make([]host.Address, 0, len(u))
	for _, g := range u {
		out = append(out, g.f.Address)
	}
	return out
}

// maxNUMASearch bounds the exhaustive search over NUMA nodes (2^n sets).
const maxNUMASearch = 12

// pickNUMA chooses units of pool (in address order) making at most n GPUs
// so that, with already, they span as few NUMA nodes as possible: first
// from the NUMA nodes already has, then from the fewest other NUMA nodes
// that hold enough, preferring higher NUMA ids; within a NUMA node, lowest
// address first; then, where whole groups did not fit, from any NUMA node.
// It returns fewer when pool is smaller than n.
func pickNUMA(pool, already []unit, n int) []unit {
	if n <= 0 || len(pool) == 0 {
		return nil
	}
	byNode := map[int][]unit{}
	for _, u := range pool {
		byNode[u.numa()] = append(byNode[u.numa()], u)
	}
	used := map[int]bool{}
	for _, u := range already {
		used[u.numa()] = true
	}
	var ids, rest []int
	for id := range byNode {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ids)))
	var out []unit
	taken := map[host.Address]bool{}
	take := func(id int) {
		for _, u := range byNode[id] {
			if !taken[u[0].f.Address] && size(out)+len(u) <= n {
				taken[u[0].f.Address] = true
				out = append(out, u)
			}
		}
	}
	for _, id := range ids {
		if used[id] {
			take(id)
		} else {
			rest = append(rest, id)
		}
	}
	for _, id := range fewestNodes(rest, byNode, n-size(out)) {
		take(id)
	}
	for _, id := range ids {
		take(id)
	}
	return out
}

// fewestNodes returns the fewest NUMA nodes of ids (sorted highest first)
// whose GPUs number at least need, preferring higher ids; all of them
// when even all are not enough.
func fewestNodes(ids []int, byNode map[int][]unit, need int) []int {
	if need <= 0 {
		return nil
	}
	if len(ids) > maxNUMASearch {
		// Too many to search: the largest first (ties: highest id).
		sorted := append([]int(nil), ids...)
		sort.SliceStable(sorted, func(i, j int) bool { return size(byNode[sorted[i]]) > size(byNode[sorted[j]]) })
		return sorted
	}
	for m := 1; m <= len(ids); m++ {
		if set := firstCombination(ids, byNode, m, need); set != nil {
			return set
		}
	}
	return ids
}

// firstCombination returns the first set of m of ids, in lexicographic
// order of positions (higher ids first), holding at least need GPUs.
func firstCombination(ids []int, byNode map[int][]unit, m, need int) []int {
	pos := make([]int, m)
	for i := range pos {
		pos[i] = i
	}
	for {
		sum := 0
		for _, p := range pos {
			sum += size(byNode[ids[p]])
		}
		if sum >= need {
			out := make([]int, m)
			for i, p := range pos {
				out[i] = ids[p]
			}
			return out
		}
		i := m - 1
		for i >= 0 && pos[i] == len(ids)-m+i {
			i--
		}
		if i < 0 {
			return nil
		}
		pos[i]++
		for j := i + 1; j < m; j++ {
			pos[j] = pos[j-1] + 1
		}
	}
}
