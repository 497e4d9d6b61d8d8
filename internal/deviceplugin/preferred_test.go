package deviceplugin

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPreferNUMA(t *testing.T) {
	numa := map[string]int{"a": 0, "b": 1, "c": 1, "d": 0, "e": 1, "f": NoNUMA}
	cases := []struct {
		name            string
		available, must []string
		size            int
		want            []string
	}{
		{"fills the node with most devices", []string{"a", "b", "c", "d", "e"}, nil, 2, []string{"b", "c"}},
		{"follows the must-include device's node", []string{"a", "b", "c", "d", "e"}, []string{"a"}, 2, []string{"a", "d"}},
		{"spills over to the next node", []string{"a", "b", "c", "d", "e"}, []string{"a"}, 3, []string{"a", "d", "b"}},
		{"tie goes to the lower node", []string{"b", "a"}, nil, 2, []string{"a", "b"}},
		{"unknown NUMA last", []string{"f", "a"}, nil, 1, []string{"a"}},
		{"must larger than size", []string{"a", "b"}, []string{"a", "b"}, 1, []string{"a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, preferNUMA(tc.available, tc.must, tc.size, numa))
		})
	}
}
