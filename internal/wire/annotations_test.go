package wire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseReportFormat: the value the operator reads, exactly: done
// alone when done; reason and left only when there are some.
func TestReleaseReportFormat(t *testing.T) {
	for _, c := range []struct {
		r    ReleaseReport
		want string
	}{
		{ReleaseReport{Done: true}, `{"done":true}`},
		{ReleaseReport{Reason: "not released yet"}, `{"done":false,"reason":"not released yet"}`},
		{ReleaseReport{Reason: "0000:3b:00.0: in use: held by pid 42 (qemu-kvm)", Left: []string{"0000:3b:00.0"}},
			`{"done":false,"reason":"0000:3b:00.0: in use: held by pid 42 (qemu-kvm)","left":["0000:3b:00.0"]}`},
	} {
		assert.Equal(t, c.want, c.r.Encode())
		got, err := ParseReleaseReport(c.want)
		require.NoError(t, err)
		assert.Equal(t, c.r, got)
	}
	// A newer writer's field is no error for an older reader.
	got, err := ParseReleaseReport(`{"done":true,"since":"2026-01-01"}`)
	require.NoError(t, err)
	assert.Equal(t, ReleaseReport{Done: true}, got)
}

// TestSplitReportFormat: vm and container are always lists (empty, never
// null); left and reason only when there are some.
func TestSplitReportFormat(t *testing.T) {
	for _, c := range []struct {
		s    SplitReport
		want string
	}{
		{SplitReport{Ready: true}, `{"declared":"","ready":true,"vm":[],"container":[]}`},
		{SplitReport{Declared: "2", Ready: true, VM: []string{"0000:9a:00.0", "0000:ab:00.0"}, Container: []string{"0000:18:00.0"}},
			`{"declared":"2","ready":true,"vm":["0000:9a:00.0","0000:ab:00.0"],"container":["0000:18:00.0"]}`},
		{SplitReport{Declared: "three", VM: []string{}, Container: []string{}, Reason: `bad input: "three"`},
			`{"declared":"three","ready":false,"vm":[],"container":[],"reason":"bad input: \"three\""}`},
		{SplitReport{Declared: "1", VM: []string{}, Container: []string{"0000:18:00.0"}, Left: []string{"0000:18:00.0"}, Reason: "0000:18:00.0: in use"},
			`{"declared":"1","ready":false,"vm":[],"container":["0000:18:00.0"],"left":["0000:18:00.0"],"reason":"0000:18:00.0: in use"}`},
	} {
		assert.Equal(t, c.want, c.s.Encode())
		got, err := ParseSplitReport(c.want)
		require.NoError(t, err)
		if c.s.VM == nil {
			c.s.VM, c.s.Container = []string{}, []string{}
		}
		assert.Equal(t, c.s, got)
	}
}

// TestParseErrorsNameTheReport: a value that is no report is an error
// naming which report and the value.
func TestParseErrorsNameTheReport(t *testing.T) {
	_, err := ParseReleaseReport("{")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `release report "{"`)
	_, err = ParseReleaseReport(`{"done":"yes"}`)
	require.Error(t, err)
	_, err = ParseSplitReport(`["0000:9a:00.0"]`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `split report "[\"0000:9a:00.0\"]"`)
}

// TestPermittedAnnotationFormat: the value is the compact JSON of KubeVirt's
// type (a stand-in here: wire never links it), the file's content without
// its indentation, and reads back the same; a value that is no such object
// is an error naming the payload and its size, never quoting it.
func TestPermittedAnnotationFormat(t *testing.T) {
	var p permitted
	p.PCI = append(p.PCI, struct {
		Selector string `json:"pciVendorSelector"`
		Resource string `json:"resourceName"`
	}{"10DE:2236", "nvidia.com/GA102GL_A10"})
	got, err := EncodePermitted(p)
	require.NoError(t, err)
	assert.Equal(t, `{"pciHostDevices":[{"pciVendorSelector":"10DE:2236","resourceName":"nvidia.com/GA102GL_A10"}]}`, got)
	back, err := ParsePermitted[permitted](got)
	require.NoError(t, err)
	assert.Equal(t, p, back)
	_, err = ParsePermitted[permitted](`{"pciHostDevices":"10DE:2236"}`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "permitted host devices (30 bytes)")
	assert.NotContains(t, err.Error(), "10DE:2236", "the value stays out of the error")
	_, err = EncodePermitted(func() {})
	assert.ErrorContains(t, err, "permitted host devices")
}

// FuzzParseReleaseReport: any value parses or is an error, never a panic;
// what parses encodes to a value that parses back the same.
func FuzzParseReleaseReport(f *testing.F) {
	for _, s := range []string{`{"done":true}`, `{"done":false,"reason":"r","left":["0000:3b:00.0"]}`, `{`, `null`, `{"left":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReleaseReport(s)
		if err != nil {
			return
		}
		again, err := ParseReleaseReport(r.Encode())
		require.NoError(t, err)
		assert.Equal(t, normRelease(r), normRelease(again))
	})
}

// FuzzParseSplitReport: as FuzzParseReleaseReport, and an encoded report
// always has vm and container lists.
func FuzzParseSplitReport(f *testing.F) {
	for _, s := range []string{`{"declared":"2","ready":true,"vm":["a"],"container":[]}`, `{"vm":null}`, `{`, `[]`, `{"left":[""]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseSplitReport(s)
		if err != nil {
			return
		}
		enc := r.Encode()
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(enc), &raw))
		assert.NotEqual(t, "null", string(raw["vm"]))
		assert.NotEqual(t, "null", string(raw["container"]))
		again, err := ParseSplitReport(enc)
		require.NoError(t, err)
		assert.Equal(t, normSplit(r), normSplit(again))
	})
}

// normRelease and normSplit make nil and empty lists one (the encoding
// leaves out an empty left, and writes [] for an empty vm).
func normRelease(r ReleaseReport) ReleaseReport {
	if len(r.Left) == 0 {
		r.Left = nil
	}
	return r
}

func normSplit(s SplitReport) SplitReport {
	for _, l := range []*[]string{&s.VM, &s.Container, &s.Left} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return s
}
