package vgpuconfig

import _ "embed"

// DefaultName is the config a node without the nvidia.com/vgpu.config
// label gets, unless the policy names another.
const DefaultName = "default"

// DefaultFile names the built-in config in messages.
const DefaultFile = "(built-in default-config.yaml)"

// defaultConfigYAML is default-config.yaml, generated from the catalog (see
// catalog.go): for every data-centre GPU the catalog knows, one config per
// vGPU type (named after it: the GPU filled with that type), and
// `default`, which, as NVIDIA's default does, gives each known GPU two
// vGPUs of half its framebuffer (Q series where the GPU has it, else C).
//
//go:embed default-config.yaml
var defaultConfigYAML string

// DefaultYAML returns the built-in config file's text (the operator puts
// it in a ConfigMap).
func DefaultYAML() []byte { return []byte(defaultConfigYAML) }

// Default parses the built-in config.
func Default() (*Config, error) {
	return Parse(DefaultFile, []byte(defaultConfigYAML))
}
