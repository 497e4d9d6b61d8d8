// Package api is the stand-in for wazero's api package: the types
// github.com/containerd/nri/pkg/api names. No value of them is ever made:
// every constructor of the stand-in wazero fails first.
package api

import "context"

// ValueType is a WebAssembly value type.
type ValueType = byte

// The value types NRI's host functions take and return.
const (
	ValueTypeI32 ValueType = 0x7f
	ValueTypeI64 ValueType = 0x7e
)

// Module is an instantiated WebAssembly module.
type Module interface {
	Memory() Memory
	ExportedFunction(name string) Function
	Close(ctx context.Context) error
}

// Memory is a module's linear memory.
type Memory interface {
	Size() uint32
	Read(offset, byteCount uint32) ([]byte, bool)
	Write(offset uint32, v []byte) bool
}

// Function is an exported WebAssembly function.
type Function interface {
	Call(ctx context.Context, params ...uint64) ([]uint64, error)
}

// GoModuleFunction is a host function written in Go.
type GoModuleFunction interface {
	Call(ctx context.Context, mod Module, stack []uint64)
}

// GoModuleFunc is a GoModuleFunction from a func.
type GoModuleFunc func(ctx context.Context, mod Module, stack []uint64)

// Call calls f.
func (f GoModuleFunc) Call(ctx context.Context, mod Module, stack []uint64) { f(ctx, mod, stack) }

// Closer closes what was instantiated.
type Closer interface {
	Close(ctx context.Context) error
}
