package vfio

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// TestReadyReportJSONIsTheWireFormat: the daemon's report, as /readyz and
// the readiness file carry it, has the keys it always had (wire.VFIOReady):
// the planner's own fields (group, module) stay out, an empty list stays
// [] and a missing one null, as before the format moved to internal/wire.
func TestReadyReportJSONIsTheWireFormat(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rep := &ReadyReport{Reason: "0000:af:00.0: in use: qemu", Time: at, VFIO: []string{"0000:3b:00.0"},
		Actions: []Action{{Address: "0000:3b:00.0", From: "nvidia", To: "vfio-pci", Group: 7, Module: "vfio_pci"}},
		Refused: []Refusal{{Address: "0000:af:00.0", Reason: "in use: qemu"}}, Error: "boom",
		Split: &Split{Declared: "1", Source: "--vm-gpus", VM: []host.Address{"0000:3b:00.0"}, Container: []host.Address{}}}
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"every field", rep, `{"ready":false,"reason":"0000:af:00.0: in use: qemu","time":"2026-01-02T03:04:05Z","vfio":["0000:3b:00.0"],` +
			`"actions":[{"address":"0000:3b:00.0","from":"nvidia","to":"vfio-pci"}],"refused":[{"address":"0000:af:00.0","reason":"in use: qemu"}],` +
			`"error":"boom","heartbeat":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z",` +
			`"split":{"declared":"1","source":"--vm-gpus","vm":["0000:3b:00.0"],"container":[]}}`},
		{"a value as the pointer", *rep, ""},
		{"empty lists", &ReadyReport{Ready: true, Time: at, VFIO: []string{}, Actions: []Action{}, Refused: []Refusal{}},
			`{"ready":true,"time":"2026-01-02T03:04:05Z","vfio":[],"actions":[],"refused":[],"heartbeat":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z"}`},
		{"before the first reconcile", &ReadyReport{Error: "not reconciled yet"},
			`{"ready":false,"time":"0001-01-01T00:00:00Z","vfio":null,"actions":null,"refused":null,"error":"not reconciled yet","heartbeat":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.v)
			require.NoError(t, err)
			want := c.want
			if want == "" {
				want = mustJSON(t, rep)
			}
			assert.JSONEq(t, want, string(b))
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
