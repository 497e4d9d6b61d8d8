package host

import "fmt"

// NoFunctionError is a PCI function the host does not have: it is not
// under the sysfs root's bus/pci/devices.
type NoFunctionError struct {
	Address Address
	Dir     string // the folder it was looked for in
}

func (e *NoFunctionError) Error() string {
	return fmt.Sprintf("no PCI function %s under %s", e.Address, e.Dir)
}

// NoFunction is the error for a PCI function that is not on this host,
// naming where it was looked for. Callers report it instead of reading a
// root of the host model themselves.
func (h *Host) NoFunction(a Address) error {
	return &NoFunctionError{Address: a, Dir: h.devicesDir()}
}
