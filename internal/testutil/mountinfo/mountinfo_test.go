package mountinfo

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestUnescape(t *testing.T) {
	assert.Equal(t, "/tmp/a b\tc", Unescape(`/tmp/a\040b\011c`))
	assert.Equal(t, "/plain", Unescape("/plain"))
}
