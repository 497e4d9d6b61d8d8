// Command noskip reads `go test -json` on stdin and prints what a person
// wants to see (package results, each test's --- PASS/FAIL/SKIP line, the
// full output of failed tests); it exits 1 when a test failed or was
// skipped. `make test` runs every suite through it, so a suite whose peer
// is missing can never vanish from CI as a skip.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

var resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP)`)

func main() { os.Exit(run(os.Stdin, os.Stdout)) }

func run(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	buffered := map[string][]string{} // package/test -> output
	var skipped, failed []string
	for sc.Scan() {
		line := sc.Text()
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			fmt.Fprintln(out, line) // build errors and the like come as plain text
			continue
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "output":
			switch {
			case e.Test == "":
				fmt.Fprint(out, e.Output)
			case resultLine.MatchString(e.Output):
				fmt.Fprint(out, e.Output)
			default:
				buffered[key] = append(buffered[key], e.Output)
			}
		case "skip":
			if e.Test != "" {
				skipped = append(skipped, e.Package+" "+e.Test+": "+skipReason(buffered[key]))
			}
			delete(buffered, key)
		case "fail":
			if e.Test != "" {
				failed = append(failed, e.Package+" "+e.Test)
				fmt.Fprintf(out, "=== output of %s %s\n%s", e.Package, e.Test, strings.Join(buffered[key], ""))
			}
			delete(buffered, key)
		case "pass":
			delete(buffered, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "noskip: reading go test -json:", err)
		return 1
	}
	code := 0
	if len(skipped) > 0 {
		fmt.Fprintf(out, "\nnoskip: %d tests skipped; a suite must not skip here (install the missing peer: make test-deps):\n  %s\n",
			len(skipped), strings.Join(skipped, "\n  "))
		code = 1
	}
	if len(failed) > 0 {
		fmt.Fprintf(out, "\nnoskip: %d tests failed:\n  %s\n", len(failed), strings.Join(failed, "\n  "))
		code = 1
	}
	return code
}

// skipReason is the last non-result line a skipped test printed.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !resultLine.MatchString(lines[i]) {
			return l
		}
	}
	return "no reason given"
}
