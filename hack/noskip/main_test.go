package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSkipsAndFailuresFailTheRun(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: KUBEBUILDER_ASSETS is unset\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- PASS: TestB (0.10s)\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Output":"ok  \tp\t0.2s\n"}`,
		`{"Action":"skip","Package":"q"}`,
	}, "\n")
	var out bytes.Buffer
	if code := run(strings.NewReader(in), &out); code != 1 {
		t.Fatalf("a skipped test must fail the run, got %d:\n%s", code, out.String())
	}
	for _, want := range []string{"--- PASS: TestB", "ok  \tp", "1 tests skipped", "p TestA: a_test.go:9: KUBEBUILDER_ASSETS is unset"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	pass := `{"Action":"output","Package":"p","Test":"TestB","Output":"--- PASS: TestB (0.10s)\n"}` + "\n" + `{"Action":"skip","Package":"q"}`
	if code := run(strings.NewReader(pass), &out); code != 0 {
		t.Fatalf("passing tests and packages without tests: want 0, got %d:\n%s", code, out.String())
	}

	out.Reset()
	fail := `{"Action":"output","Package":"p","Test":"TestC","Output":"    boom\n"}` + "\n" + `{"Action":"fail","Package":"p","Test":"TestC"}`
	if code := run(strings.NewReader(fail), &out); code != 1 || !strings.Contains(out.String(), "boom") {
		t.Fatalf("a failed test fails the run and shows its output: %d\n%s", code, out.String())
	}
}
