package jsonout

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteIndentsAndListsNeverNull(t *testing.T) {
	type report struct {
		Actions []string `json:"actions"`
		Refused []int    `json:"refused"`
	}
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, report{Actions: List([]string{"bind"}), Refused: List[int](nil)}))
	assert.Equal(t, "{\n  \"actions\": [\n    \"bind\"\n  ],\n  \"refused\": []\n}\n", buf.String())

	buf.Reset()
	require.NoError(t, Write(&buf, report{}))
	assert.Contains(t, buf.String(), `"refused": null`, "without List a nil list is null: what List is for")
}
