// The product module's stand-in for github.com/knqyf263/go-plugin (see ../README.md).
module github.com/knqyf263/go-plugin

go 1.26.0

require github.com/tetratelabs/wazero v1.11.0

replace github.com/tetratelabs/wazero => ../wazero
