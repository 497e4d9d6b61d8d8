// Package wasi_snapshot_preview1 is the stand-in for wazero's WASI import.
package wasi_snapshot_preview1

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Instantiate fails: there is no runtime to instantiate WASI in.
func Instantiate(context.Context, wazero.Runtime) (api.Closer, error) {
	return nil, wazero.ErrNoWASM
}
