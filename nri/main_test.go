package nri

import (
	"os"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

func TestMain(m *testing.M) {
	nritest.QuietNRI()
	os.Exit(m.Run())
}
