package vgpu

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
)

// Report is the JSON of plan and apply. Keys are stable:
//
//	file     the config file
//	config   the selected config
//	dryRun   true for plan (nothing done)
//	gpus     every NVIDIA GPU by index: index, address, device ("10de:2236"),
//	         backend (mdev, mdev-sriov, vendor-vfio, sriov, none), managed
//	         (an entry applies), want and have (vGPUs by type; have is after
//	         the apply for apply), and for plan the types it can host with
//	         max and maxFrom (where the capacity comes from)
//	actions  steps planned (plan) or completed (apply), in order per GPU:
//	         op (disable-vfs, enable-vfs, remove, create), gpu, address,
//	         id (mdev UUID or VF address), type, typeId, parent, vfs
//	refused  GPUs left alone or stopped: gpu, address, reason; a reason
//	         starts with "in use:" when a vGPU is held, "failed:" otherwise
type Report struct {
	File    string      `json:"file"`
	Config  string      `json:"config"`
	DryRun  bool        `json:"dryRun"`
	GPUs    []GPUReport `json:"gpus"`
	Actions []Step      `json:"actions"`
	Refused []Refusal   `json:"refused"`
}

// GPUID names a GPU in a report and in the ready file.
type GPUID struct {
	Index   int     `json:"index"`
	Address string  `json:"address"`
	Device  string  `json:"device"` // vendor:device, hex
	Backend Backend `json:"backend"`
}

func gpuID(g *GPU) GPUID {
	return GPUID{Index: g.Index, Address: string(g.Address), Device: fmt.Sprintf("%04x:%04x", g.ID.Vendor, g.ID.Device), Backend: g.Backend}
}

// GPUReport is one GPU in a report.
type GPUReport struct {
	GPUID
	Managed bool           `json:"managed"`
	Want    map[string]int `json:"want"`
	Have    map[string]int `json:"have"`
	Types   []TypeReport   `json:"types,omitempty"`
}

// TypeReport is a type a GPU can host, with its capacity.
type TypeReport struct {
	Name    string `json:"name"`
	ID      string `json:"id,omitempty"`
	Max     int    `json:"max"`
	MaxFrom string `json:"maxFrom,omitempty"`
}

func gpuReport(g *GPU, managed bool, want, have map[string]int) GPUReport {
	if want == nil {
		want = map[string]int{}
	}
	return GPUReport{GPUID: gpuID(g), Managed: managed, Want: want, Have: have}
}

// PlanReport renders a plan (nothing done).
func PlanReport(p *Plan) Report {
	r := Report{File: p.File, Config: p.Config, DryRun: true, GPUs: []GPUReport{}, Actions: []Step{}, Refused: jsonout.List(p.Refusals())}
	for _, gp := range p.GPUs {
		gr := gpuReport(gp.GPU, gp.Managed, gp.Want, gp.GPU.counts())
		for _, t := range gp.GPU.Types {
			gr.Types = append(gr.Types, TypeReport{Name: t.Name, ID: t.ID, Max: t.Max, MaxFrom: t.MaxFrom})
		}
		r.GPUs = append(r.GPUs, gr)
		r.Actions = append(r.Actions, gp.Steps...)
	}
	return r
}

// ResultReport renders what an apply did.
func ResultReport(res *Result) Report {
	r := Report{File: res.File, Config: res.Config, GPUs: []GPUReport{}, Actions: []Step{}, Refused: jsonout.List(res.Refused)}
	for _, g := range res.GPUs {
		r.GPUs = append(r.GPUs, gpuReport(g.GPU, g.Managed, g.Want, g.Have))
		r.Actions = append(r.Actions, g.Done...)
	}
	for _, e := range res.Errors {
		r.Refused = append(r.Refused, Refusal{GPU: -1, Reason: e})
	}
	return r
}

// WriteTable writes a plan or apply report as tables: the GPUs, then the
// actions, then the refusals.
func WriteTable(w io.Writer, r Report) error {
	fmt.Fprintf(w, "Config %q of %s\n", r.Config, r.File)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tADDRESS\tDEVICE\tBACKEND\tWANT\tHAVE")
	for _, g := range r.GPUs {
		want := counts(g.Want)
		if !g.Managed {
			want = "(not in config)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Address, g.Device, g.Backend, want, counts(g.Have))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Actions) == 0 && len(r.Refused) == 0 {
		_, err := fmt.Fprintln(w, "Nothing to do: every GPU holds the vGPUs the config asks for")
		return err
	}
	if len(r.Actions) > 0 {
		verb := "DONE"
		if r.DryRun {
			verb = "PLANNED"
		}
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tGPU\tOP\tTYPE\tID\tPARENT\n", verb)
		for _, a := range r.Actions {
			id := a.ID
			if a.Op == OpEnableVFs {
				id = fmt.Sprintf("%d VFs", a.VFs)
			}
			fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s\n", a.GPU, a.Op, dash(a.Type), dash(id), dash(string(a.Parent)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Refused) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REFUSED\tGPU\tADDRESS\tREASON")
		for _, x := range r.Refused {
			fmt.Fprintf(tw, "\t%d\t%s\t%s\n", x.GPU, dash(string(x.Address)), x.Reason)
		}
		return tw.Flush()
	}
	return nil
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		name := k
		if name == "" {
			name = "(unknown type)"
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, m[k]))
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
