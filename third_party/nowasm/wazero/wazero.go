// Package wazero stands in for github.com/tetratelabs/wazero in the product
// module (its go.mod replaces the real one with this folder): it has the API
// github.com/containerd/nri/pkg/api compiles against, and no WebAssembly
// runtime. containerd/nri's pkg/api holds the host side of WASM plugins,
// which the NRI plugin (an NRI plugin itself, over ttrpc) never uses, yet
// importing the package linked wazero's compiler and interpreter into it.
// Every entry point fails with ErrNoWASM; nothing here runs code.
package wazero

import (
	"context"
	"errors"

	"github.com/tetratelabs/wazero/api"
)

// ErrNoWASM is what every entry point returns.
var ErrNoWASM = errors.New("WebAssembly is not built into sandbox-gpu: github.com/tetratelabs/wazero is replaced by a stand-in without a runtime")

// Runtime compiles and runs WebAssembly modules; this one never does.
type Runtime interface {
	NewHostModuleBuilder(moduleName string) HostModuleBuilder
	CompileModule(ctx context.Context, binary []byte) (CompiledModule, error)
	InstantiateModule(ctx context.Context, compiled CompiledModule, config ModuleConfig) (api.Module, error)
	Close(ctx context.Context) error
}

// HostModuleBuilder defines a module of Go functions.
type HostModuleBuilder interface {
	NewFunctionBuilder() HostFunctionBuilder
	Instantiate(ctx context.Context) (api.Module, error)
}

// HostFunctionBuilder defines one Go function of a host module.
type HostFunctionBuilder interface {
	WithGoModuleFunction(fn api.GoModuleFunction, params, results []api.ValueType) HostFunctionBuilder
	WithParameterNames(names ...string) HostFunctionBuilder
	Export(name string) HostModuleBuilder
}

// CompiledModule is a compiled WebAssembly module.
type CompiledModule interface {
	Close(ctx context.Context) error
}

// ModuleConfig configures a module's instantiation.
type ModuleConfig interface {
	WithStartFunctions(names ...string) ModuleConfig
}

// RuntimeConfig configures a Runtime.
type RuntimeConfig interface {
	WithCloseOnContextDone(bool) RuntimeConfig
}

type moduleConfig struct{}

func (c moduleConfig) WithStartFunctions(...string) ModuleConfig { return c }

// NewModuleConfig returns a ModuleConfig, which nothing can use.
func NewModuleConfig() ModuleConfig { return moduleConfig{} }

type runtimeConfig struct{}

func (c runtimeConfig) WithCloseOnContextDone(bool) RuntimeConfig { return c }

// NewRuntimeConfig returns a RuntimeConfig, which nothing can use.
func NewRuntimeConfig() RuntimeConfig { return runtimeConfig{} }

// runtime is the Runtime of the stand-in: every call fails.
type runtime struct{}

func (runtime) NewHostModuleBuilder(string) HostModuleBuilder { return hostModuleBuilder{} }
func (runtime) CompileModule(context.Context, []byte) (CompiledModule, error) {
	return nil, ErrNoWASM
}
func (runtime) InstantiateModule(context.Context, CompiledModule, ModuleConfig) (api.Module, error) {
	return nil, ErrNoWASM
}
func (runtime) Close(context.Context) error { return nil }

type hostModuleBuilder struct{}

func (b hostModuleBuilder) NewFunctionBuilder() HostFunctionBuilder { return hostFunctionBuilder{b} }
func (hostModuleBuilder) Instantiate(context.Context) (api.Module, error) {
	return nil, ErrNoWASM
}

type hostFunctionBuilder struct{ m hostModuleBuilder }

func (f hostFunctionBuilder) WithGoModuleFunction(api.GoModuleFunction, []api.ValueType, []api.ValueType) HostFunctionBuilder {
	return f
}
func (f hostFunctionBuilder) WithParameterNames(...string) HostFunctionBuilder { return f }
func (f hostFunctionBuilder) Export(string) HostModuleBuilder                  { return f.m }

// NewRuntime returns a Runtime whose every compile and instantiation fails
// with ErrNoWASM.
func NewRuntime(context.Context) Runtime { return runtime{} }

// NewRuntimeWithConfig is NewRuntime.
func NewRuntimeWithConfig(ctx context.Context, _ RuntimeConfig) Runtime { return NewRuntime(ctx) }
