package ownnode

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/client-go/kubernetes/fake"
)

func TestCheckNamesWhatIsMissing(t *testing.T) {
	cs := fake.NewClientset()
	assert.NoError(t, Check("validator", "node-1", cs))
	assert.EqualError(t, Check("validator", "", cs), "validator: no node name (set --node-name or NODE_NAME)")
	assert.EqualError(t, Check("discovery", "node-1", nil), "discovery: no Kubernetes client")
}
