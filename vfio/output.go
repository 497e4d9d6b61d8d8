package vfio

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
)

// StatusReport is the JSON of `vfio-manager status`.
type StatusReport struct {
	IOMMU   IOMMUReport      `json:"iommu"`
	VFIO    host.DriverState `json:"vfio"`
	Devices []DeviceReport   `json:"devices"`
	// Warnings say what the report could not know (no kernel release:
	// vfio-pci for every function, its loadability unknown).
	Warnings []string `json:"warnings,omitempty"`
}

// IOMMUReport is the IOMMU part of a status.
type IOMMUReport struct {
	Enabled       bool     `json:"enabled"`
	UnsafeNoIOMMU bool     `json:"unsafeNoIOMMU"`
	Units         []string `json:"units"`
}

// DeviceReport is one function in a status.
type DeviceReport struct {
	Address         string   `json:"address"`
	Vendor          string   `json:"vendor"`
	Device          string   `json:"device"`
	Class           string   `json:"class"`
	Driver          string   `json:"driver"`
	IOMMUGroup      *int     `json:"iommuGroup"`
	Role            string   `json:"role"`
	SubsystemVendor string   `json:"subsystemVendor"`
	SubsystemDevice string   `json:"subsystemDevice"`
	DriverOverride  string   `json:"driverOverride"`
	NUMANode        int      `json:"numaNode"`
	GroupType       string   `json:"iommuGroupType,omitempty"`
	VFIODriver      string   `json:"vfioDriver"` // best vfio driver for it
	PhysFn          string   `json:"physFn,omitempty"`
	VirtFns         []string `json:"virtFns,omitempty"`
}

// Status builds the status report of the functions of one vendor (all
// functions when vendor is 0), with the vfio driver each would take and
// whether vfio-pci is loaded or loadable.
func Status(h HostView, snap *host.Snapshot, vendor uint16) (StatusReport, error) {
	aliases, warning, err := readAliases(h)
	if err != nil {
		return StatusReport{}, err
	}
	vfioState, warning2, err := vfioDriverState(h)
	if err != nil {
		return StatusReport{}, err
	}
	r := StatusReport{
		Warnings: appendWarning(appendWarning(nil, warning), warning2),
		VFIO:     vfioState,
		IOMMU:    IOMMUReport{Enabled: snap.IOMMU.Enabled, UnsafeNoIOMMU: snap.IOMMU.UnsafeNoIOMMU, Units: snap.IOMMU.Units},
		Devices:  []DeviceReport{},
	}
	if r.IOMMU.Units == nil {
		r.IOMMU.Units = []string{}
	}
	for _, f := range snap.Functions {
		if vendor != 0 && f.Vendor != vendor {
			continue
		}
		d := DeviceReport{
			Address: string(f.Address), Vendor: fmt.Sprintf("%04x", f.Vendor), Device: fmt.Sprintf("%04x", f.Device),
			Class: fmt.Sprintf("%06x", f.Class), Driver: f.Driver, Role: string(f.Role),
			SubsystemVendor: fmt.Sprintf("%04x", f.SubsystemVendor), SubsystemDevice: fmt.Sprintf("%04x", f.SubsystemDevice),
			DriverOverride: f.DriverOverride, NUMANode: f.NUMANode, PhysFn: string(f.PhysFn),
		}
		d.VFIODriver, _ = h.VFIODriverFor(f, aliases)
		if f.IOMMUGroup != host.NoGroup {
			g := f.IOMMUGroup
			d.IOMMUGroup = &g
			if grp, ok := snap.Groups[g]; ok {
				d.GroupType = grp.Type
			}
		}
		for _, vf := range f.VirtFns {
			d.VirtFns = append(d.VirtFns, string(vf))
		}
		r.Devices = append(r.Devices, d)
	}
	return r, nil
}

// ChangeReport is the JSON of plan, bind and unbind.
type ChangeReport struct {
	Target  Target    `json:"target"`
	DryRun  bool      `json:"dryRun"`
	Actions []Action  `json:"actions"`
	Refused []Refusal `json:"refused"`
	// Split is the split planned or applied (--vm-gpus): the VM and the
	// container GPUs.
	Split *Split `json:"split,omitempty"`
}

// PlanReport renders a plan (nothing done).
func PlanReport(p *Plan) ChangeReport {
	return ChangeReport{Target: p.Target, DryRun: true, Actions: jsonout.List(p.Actions), Refused: jsonout.List(p.Refused)}
}

// ResultReport renders what an apply did.
func ResultReport(r *Result) ChangeReport {
	return ChangeReport{Target: r.Target, Actions: jsonout.List(r.Actions), Refused: jsonout.List(r.Refused)}
}

// WriteStatusTable writes a status as a table.
func WriteStatusTable(w io.Writer, r StatusReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "IOMMU enabled: %v", r.IOMMU.Enabled)
	if r.IOMMU.UnsafeNoIOMMU {
		fmt.Fprint(tw, " (unsafe no-IOMMU mode)")
	}
	fmt.Fprintf(tw, "; vfio-pci loaded: %v, loadable: %v\n", r.VFIO.Loaded, r.VFIO.Loadable)
	fmt.Fprintln(tw, "ADDRESS\tID\tCLASS\tROLE\tDRIVER\tGROUP\tNUMA\tVFIO DRIVER")
	for _, d := range r.Devices {
		group := "-"
		if d.IOMMUGroup != nil {
			group = fmt.Sprint(*d.IOMMUGroup)
		}
		drv := d.Driver
		if drv == "" {
			drv = "-"
		}
		fmt.Fprintf(tw, "%s\t%s:%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.Address, d.Vendor, d.Device, d.Class, d.Role, drv, group, d.NUMANode, d.VFIODriver)
	}
	return tw.Flush()
}

// WriteChangeTable writes a plan or result as a table.
func WriteChangeTable(w io.Writer, r ChangeReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	verb := "DONE"
	if r.DryRun {
		verb = "PLANNED"
	}
	if r.Split != nil {
		writeSplit(tw, r.Split)
	}
	switch {
	case len(r.Actions) > 0 || len(r.Refused) > 0:
	case r.Split != nil:
		fmt.Fprintln(tw, "Nothing to do: every GPU is where the split wants it")
	default:
		fmt.Fprintf(tw, "Nothing to do: every selected function is on its %s driver\n", r.Target)
	}
	if len(r.Actions) > 0 {
		fmt.Fprintf(tw, "%s\tADDRESS\tFROM\tTO\n", verb)
		for _, a := range r.Actions {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\n", a.Address, orNone(a.From), orNone(a.To))
		}
	}
	if len(r.Refused) > 0 {
		fmt.Fprintln(tw, "REFUSED\tADDRESS\tREASON")
		for _, x := range r.Refused {
			fmt.Fprintf(tw, "\t%s\t%s\n", x.Address, x.Reason)
		}
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
