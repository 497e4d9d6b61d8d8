package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// syntheticFindings parses header and body as one file, a/x.go, applies
// check, and returns each finding as rule:line, the line counted from the
// body's first: what a rule's table test compares.
func syntheticFindings(t *testing.T, header, body string, check func(*token.FileSet, string, *ast.File) []finding) []string {
	t.Helper()
	src := header + body + "\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, src)
	}
	offset := strings.Count(header, "\n")
	var got []string
	for _, fd := range check(fset, "a/x.go", f) {
		got = append(got, fd.rule+":"+strconv.Itoa(fd.line-offset))
	}
	return got
}

// writeTreeFile writes content to rel under root, making its folders: a
// synthetic tree for a rule's tree walk.
func writeTreeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// findingFiles is the sorted files of findings, one per finding.
func findingFiles(findings []finding) []string {
	var files []string
	for _, f := range findings {
		files = append(files, f.file)
	}
	slices.Sort(files)
	return files
}
