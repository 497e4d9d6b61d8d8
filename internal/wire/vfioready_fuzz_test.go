package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzParseVFIOReady: any readiness file content parses or fails naming
// the file, never a panic; Judge calls a report ready only when it says
// ready, has no error and has not expired, and gives a reason otherwise;
// a parsed report written back parses to the same JSON.
func FuzzParseVFIOReady(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Add([]byte(`{"ready":true,"time":"2026-01-02T03:04:00Z","vfio":["0000:3b:00.0"],"actions":[],"refused":[],"pid":7,"heartbeat":"2026-01-02T03:04:00Z","expires":"2026-01-02T03:05:00Z"}`))
	f.Add([]byte(`{"ready":false,"reason":"0000:3b:00.0: in use: qemu-kvm","refused":[{"address":"0000:3b:00.0","reason":"in use"}],"expires":"2026-01-02T03:05:00+01:00"}`))
	f.Add([]byte(`{"ready":true,"error":"config x: bad input","expires":"9999-12-31T23:59:59.999999999Z"}`))
	f.Add([]byte(`{"ready":true}`))
	f.Add([]byte(`garbage`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseVFIOReady("vfio-manager.ready", data)
		if err != nil {
			if r != nil || !strings.Contains(err.Error(), "vfio-manager.ready") {
				t.Fatalf("error does not name the file (result %v): %v", r, err)
			}
			return
		}
		ok, why := r.Judge(now)
		if ok && (!r.Ready || r.Error != "" || !now.Before(r.Expires)) {
			t.Fatalf("judged ready: %+v", r)
		}
		if !ok && why == "" {
			t.Fatalf("not ready without a reason: %+v", r)
		}
		b1, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%q parsed but does not marshal: %v", data, err)
		}
		r2, err := ParseVFIOReady("again", b1)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", b1, err)
		}
		b2, err := json.Marshal(r2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("not stable: %s then %s (%v)", b1, b2, err)
		}
		if ok2, why2 := r2.Judge(now); ok2 != ok || why2 != why {
			t.Fatalf("judged %v %q, written back %v %q", ok, why, ok2, why2)
		}
	})
}
