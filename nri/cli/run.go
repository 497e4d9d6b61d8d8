package cli

import (
	"context"
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostroots"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/nri"
)

// build turns options into the plugin's settings, its CDI resolver and its
// kubelet client (closed by the caller).
func build(o *options, h *host.Host, devRoot string, log logr.Logger) (nri.Options, *nri.Resolver, *nri.KubeletPodResources, error) {
	res, err := nri.NewResolver(o.cdiKind, o.cdiDirs.vals)
	if err != nil {
		return nri.Options{}, nil, nil, err
	}
	pods, err := nri.NewKubeletPodResources(o.podResources, o.podResourcesTimeout)
	if err != nil {
		return nri.Options{}, nil, nil, err
	}
	skip := o.skip.vals
	if o.kata.set && !o.skip.set {
		skip = nil // the Kata handlers are named: no name pattern besides
	}
	no := nri.Options{Resources: o.resources.vals, KataRuntimeHandlers: o.kata.vals, SkipRuntimeHandlers: skip,
		DriverRoots: o.driverRoots.vals, DevRoot: devRoot, CharMajors: h.CharMajors,
		AnnotationNamespaces: o.annotationNS.vals, FailOpen: o.failOpen, StrictPrivileged: o.strictPrivileged, Injection: o.injection, Hooks: o.hooks, Log: log}
	if o.checkpoint != "" {
		no.Checkpoint = &nri.Checkpoint{Path: o.checkpoint}
	}
	return no, res, pods, nil
}

func run(ctx context.Context, env *shell.Env, o *options) error {
	log := env.Log
	opts := hostroots.Options(env.Roots)
	h := host.New(opts)
	no, res, pods, err := build(o, h, opts.DevRoot, log)
	if err != nil {
		return err
	}
	closers := []func() error{pods.Close}
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	p, err := nri.New(no, res, pods, env.Metrics)
	if err != nil {
		return err
	}
	if o.preregistered {
		p.SetReconfigure(func(config string) (nri.Options, *nri.Resolver, nri.PodResources, error) {
			co, err := parseConfig(config)
			if err != nil {
				return nri.Options{}, nil, nil, err
			}
			no, res, pods, err := build(co, h, opts.DevRoot, log)
			if err == nil {
				closers = append(closers, pods.Close)
				log.Info("Configured by the runtime", "podResources", co.podResources, "cdiDirs", co.cdiDirs.vals, "resources", co.resources.vals, "failOpen", co.failOpen)
			}
			return no, res, pods, err
		})
	}
	var connected atomic.Bool
	env.AddReady("nri", func() (bool, any) {
		return connected.Load(), map[string]bool{"connected": connected.Load()}
	})
	log.Info("Starting", "nriSocket", o.nriSocket, "podResources", o.podResources, "cdiDirs", o.cdiDirs.vals,
		"resources", o.resources.vals, "cdiKind", o.cdiKind, "failOpen", o.failOpen, "preregistered", o.preregistered)
	err = p.Run(ctx, nri.RunOptions{Socket: o.nriSocket, Name: o.name, Index: o.index, Preregistered: o.preregistered,
		Connected: connected.Store})
	log.Info("Stopped")
	return err
}
