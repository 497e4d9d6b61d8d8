// The product module's stand-in for github.com/tetratelabs/wazero (see ../README.md): the API that
// github.com/containerd/nri/pkg/api compiles against, without a WebAssembly runtime.
module github.com/tetratelabs/wazero

go 1.26.0
