package vgpu

import (
	"fmt"
	"maps"
	"strconv"
	"sync"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// TypeMemory remembers the names of vendor-specific VFIO type ids per GPU.
// The driver's creatable_vgpu_types lists only what can be created now:
// nothing on a VF that holds a vGPU, nothing on a full card. So Inventory
// teaches it every name the driver lists (before any create writes the
// id), and it names the ids no list shows any more: on a full card, after
// a restart (Load and Save keep it in the run folder, wire.VGPUTypeNames),
// and in the ready report the KubeVirt plugin reads. What it learns is
// written to its file at once, before the create that follows can write
// the id: a manager killed after that write still names it when started
// again. Ids it does not know it asks Fallback (NVML on a node; nil for
// none): Inventory asks it (TypeNamesFor) only when a VF holds an id that
// neither the driver's lists nor the memory name. Safe for concurrent use.
type TypeMemory struct {
	Fallback TypeNamer

	mu      sync.Mutex
	file    string // "" for a memory of this process only
	known   map[host.Address]map[int]string
	dirty   bool  // learned something not written yet
	saveErr error // the last failed write, until one succeeds
}

// LoadTypeMemory reads the memory kept at path (a missing file: empty).
// A file that cannot be read or parsed is an error naming it; the memory
// returned then is empty, and its first write replaces the file.
func LoadTypeMemory(path string, fallback TypeNamer) (*TypeMemory, error) {
	m := &TypeMemory{Fallback: fallback, file: path, known: map[host.Address]map[int]string{}}
	t, err := wire.ReadVGPUTypeNames(path)
	if err != nil {
		return m, err
	}
	for gpu, ids := range t.GPUs {
		a, err := host.ParseAddress(gpu)
		if err != nil {
			return &TypeMemory{Fallback: fallback, file: path, known: map[host.Address]map[int]string{}}, fmt.Errorf("%s: %w", path, err)
		}
		for id, name := range ids {
			n, _ := strconv.Atoi(id) // validated by wire
			m.learn(a, n, name)
		}
	}
	m.dirty = false
	return m, nil
}

// Save writes what the memory learned and could not write yet; nil when
// all is written (or it keeps no file).
func (m *TypeMemory) Save() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.save()
}

func (m *TypeMemory) save() error {
	if !m.dirty || m.file == "" {
		return nil
	}
	t := wire.VGPUTypeNames{GPUs: map[string]map[string]string{}}
	for gpu, ids := range m.known {
		out := map[string]string{}
		for id, name := range ids {
			out[strconv.Itoa(id)] = name
		}
		t.GPUs[string(gpu)] = out
	}
	if err := wire.WriteVGPUTypeNames(m.file, t); err != nil {
		m.saveErr = err
		return err
	}
	m.dirty, m.saveErr = false, nil
	return nil
}

// Learn remembers the names (type id -> short name) of a GPU's types and
// writes them to the memory's file when they are news. A failed write is
// kept for Save to report (and retry); the names are remembered anyway.
func (m *TypeMemory) Learn(gpu host.Address, names map[int]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, name := range names {
		m.learn(gpu, id, name)
	}
	_ = m.save() // reported by Save
}

func (m *TypeMemory) learn(gpu host.Address, id int, name string) {
	if id <= 0 || !wire.ValidTypeName(name) {
		return // nothing the memory's file could hold
	}
	if m.known == nil {
		m.known = map[host.Address]map[int]string{}
	}
	if m.known[gpu] == nil {
		m.known[gpu] = map[int]string{}
	}
	if m.known[gpu][id] != name {
		m.known[gpu][id] = name
		m.dirty = true
	}
}

// Remembered is what the memory names on a GPU (a copy).
func (m *TypeMemory) Remembered(gpu host.Address) map[int]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.known[gpu])
}

// TypeNames implements TypeNamer: what Fallback names (when set), over
// which the remembered names win. Fallback's names are remembered too.
func (m *TypeMemory) TypeNames(gpu host.Address) (map[int]string, error) {
	out := map[int]string{}
	if m.Fallback != nil {
		more, err := m.Fallback.TypeNames(gpu)
		if err != nil {
			return nil, err
		}
		for id, name := range more {
			out[id] = host.ShortTypeName(name)
		}
		m.Learn(gpu, out)
	}
	maps.Copy(out, m.Remembered(gpu))
	return out, nil
}

// TypeNamesFor is TypeNames asking Fallback only when the memory does not
// name every one of ids (the type ids a GPU's VFs hold that the driver's
// lists do not name): NVML is asked only for what nobody else names.
func (m *TypeMemory) TypeNamesFor(gpu host.Address, ids []int) (map[int]string, error) {
	known := m.Remembered(gpu)
	for _, id := range ids {
		if _, ok := known[id]; !ok && m.Fallback != nil {
			return m.TypeNames(gpu)
		}
	}
	if known == nil {
		known = map[int]string{}
	}
	return known, nil
}

// idNamer is a TypeNamer that can be told which ids it must name
// (TypeMemory).
type idNamer interface {
	TypeNamesFor(gpu host.Address, ids []int) (map[int]string, error)
}

// typeLearner is a TypeNamer that learns what the driver lists
// (TypeMemory).
type typeLearner interface {
	Learn(gpu host.Address, names map[int]string)
}
