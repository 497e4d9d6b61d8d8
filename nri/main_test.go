package nri

import (
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

func TestMain(m *testing.M) { nritest.Main(m) }
