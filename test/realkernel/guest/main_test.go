//go:build realkernelguest

package guest

import (
	"os"
	"testing"
)

// TestMain runs the tests, or, when the test binary is started again as a VFIO holder (see
// startHolder), holds a VFIO device until its standard input closes.
func TestMain(m *testing.M) {
	if group := os.Getenv(holdGroupEnv); group != "" {
		os.Exit(holdMain(group, os.Getenv(holdDeviceEnv)))
	}
	os.Exit(m.Run())
}
