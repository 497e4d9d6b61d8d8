package archtest

import "testing"

// kitPath is the test kit: the harnesses more than one part uses (agents on
// simulated hosts, the process runner, the stand-in kubelet, envtest, what
// the end-to-end suites share), for the product module's tests, the demo
// and the test/ module.
const kitPath = modulePath + "/internal/testutil"

// No shipped command links the kit: every package of it is test code to
// forbiddenDep, whatever its own name.
func TestForbiddenDepCoversTheKit(t *testing.T) {
	for p, bad := range map[string]bool{
		kitPath:                      true,
		kitPath + "/proc":            true,
		kitPath + "/apiserver":       true,
		kitPath + "/agenttest":       true,
		kitPath + "/e2e":             true,
		kitPath + "/mountinfo":       true,
		kitPath + "/containerdconf":  true,
		kitPath + "x/proc":           false, // another package whose name only starts alike
		modulePath + "/internal/kit": false,
	} {
		if got := forbiddenDep(p) != ""; got != bad {
			t.Errorf("forbiddenDep(%q) = %q, want forbidden=%v", p, forbiddenDep(p), bad)
		}
	}
}
