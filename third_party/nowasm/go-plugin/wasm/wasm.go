// Package wasm is the stand-in for go-plugin's wasm package: the memory
// helpers of NRI's WASM host functions, which never run without a runtime.
package wasm

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// ReadMemory fails: no module memory exists without a runtime.
func ReadMemory(api.Memory, uint32, uint32) ([]byte, error) { return nil, wazero.ErrNoWASM }

// WriteMemory fails: no module memory exists without a runtime.
func WriteMemory(context.Context, api.Module, []byte) (uint64, error) { return 0, wazero.ErrNoWASM }
