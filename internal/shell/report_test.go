package shell

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReportJSONOrTableAndRefusals(t *testing.T) {
	type rep struct {
		Refused []string `json:"refused"`
	}
	var out bytes.Buffer
	env := &Env{Stdout: &out}
	table := func(w io.Writer) error { _, err := io.WriteString(w, "TABLE\n"); return err }

	require.NoError(t, env.Report("table", rep{}, table, 0))
	assert.Equal(t, "TABLE\n", out.String())

	out.Reset()
	err := env.Report("json", rep{Refused: []string{"0000:3b:00.0"}}, table, 1)
	assert.Equal(t, "{\n  \"refused\": [\n    \"0000:3b:00.0\"\n  ]\n}\n", out.String())
	assert.True(t, errors.Is(err, ErrRefused), "a refusal exits 2: %v", err)

	failing := func(io.Writer) error { return errors.New("stdout closed") }
	assert.EqualError(t, env.Report("table", rep{}, failing, 1), "stdout closed", "a write error wins over the refusal")
}
