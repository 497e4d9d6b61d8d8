package controllers

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Condition messages, status messages and event notes are sentences that
// name things in prose: "gpu-1, gpu-2 and gpu-3", never a Go list.

// maxNamed is how many names a message lists before "and N more".
const maxNamed = 10

// nameList joins names as prose: "a", "a and b", "a, b and c", or the
// first maxNamed and "N more".
func nameList(items []string) string {
	switch {
	case len(items) == 0:
		return ""
	case len(items) > maxNamed:
		return strings.Join(items[:maxNamed], ", ") + fmt.Sprintf(" and %d more", len(items)-maxNamed)
	case len(items) == 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// plural says "1 GPU pod" or "3 GPU pods".
func plural(n int, singular string) string {
	if n == 1 {
		return "1 " + singular
	}
	return fmt.Sprintf("%d %ss", n, singular)
}

// sentence capitalizes s and ends it with a period (unless it ends with
// punctuation already).
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	r, size := utf8.DecodeRuneInString(s)
	s = string(unicode.ToUpper(r)) + s[size:]
	if !strings.ContainsAny(s[len(s)-1:], ".!?") {
		s += "."
	}
	return s
}

// sentences joins sentences with a space, skipping empty ones.
func sentences(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p = sentence(p); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

// errText is an error's text to put inside a sentence (no final period).
func errText(err error) string {
	return strings.TrimRight(strings.TrimSpace(err.Error()), ".")
}
