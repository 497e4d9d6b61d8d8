# sandbox-gpu: run `make help` for the targets.
SHELL := /bin/bash
GO            ?= go
# The go command never downloads a toolchain: every go.mod pins the one this repository is built with
# (toolchain line, TestToolchainPinned), and the Go on PATH is used as it is.
export GOTOOLCHAIN ?= local
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Tests build simulated sysfs trees: tmpfs makes them ~20x faster than ext4.
TEST_TMPDIR   ?= $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm || echo /tmp)
# A count, not a duration: Go 1.26's fuzz coordinator can fail a target with "context deadline
# exceeded" when a duration -fuzztime ends while a worker is busy (go.dev/issue/75804, fixed in 1.27).
FUZZTIME      ?= 50000x
BENCHTIME     ?= 1s
# Every test run goes through hack/noskip: a skipped test fails make test (a missing peer must never
# make a suite vanish from CI), and the output stays short (results, failures in full).
NOSKIP        := $(CURDIR)/.cache/tools/noskip
# The shipped binaries: one per folder under cmd/ (the demo is an application of its own, in demo/).
BINARIES      := $(notdir $(wildcard cmd/*))
# Each phase of make test and lint says when it starts, so a CI log shows where the time went.
STAMP         = @echo "== make $@ $$(date -u +%T)"

.PHONY: e2e-cluster images push images-test help build test check unit fuzz e2e test-deps envtest-assets envtest-compat generate check-generated check-fmt bench lint fmt demo demo-status clean

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

CGO_BINARIES  := nri-gpu-plugin vgpu-device-manager
export CGO_CFLAGS ?= -Wno-deprecated-declarations

build: ## Build every binary into bin/: static, except nri-gpu-plugin and vgpu-device-manager (cgo: NVML is loaded with dlopen)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/ $(addprefix ./cmd/,$(filter-out $(CGO_BINARIES),$(BINARIES)))
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags "-s -w" -o bin/ $(addprefix ./cmd/,$(CGO_BINARIES))

test: test-deps check unit fuzz images-test e2e e2e-cluster ## What CI runs: format and generated-file checks, unit tests (race), fuzzing, the end-to-end suites; any skip fails
	$(STAMP) done

$(NOSKIP): hack/noskip/main.go
	$(GO) build -o $@ ./hack/noskip

check: check-fmt check-generated ## gofmt and generated files (deepcopy, CRDs, RBAC, the chart's CRDs) are current

check-fmt: ## Fail when a Go file is not gofmt-formatted
	$(STAMP)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "check-fmt: run make fmt:"; echo "$$out"; exit 1; fi; echo "check-fmt: every Go file is formatted"

check-generated: ## Fail when make generate would change a generated file
	$(STAMP)
	./hack/check-generated.sh

test-deps: ## Install QEMU and the Debian kernel, containerd and runc, build envtest's kube-apiserver and etcd (all cached)
	$(STAMP)
	./hack/fetch-kernel.sh
	GO=$(GO) ./hack/fetch-containerd.sh >/dev/null
	GO=$(GO) ./hack/envtest-assets.sh >/dev/null
	./hack/images.sh deps
	GO=$(GO) ./hack/fetch-cluster.sh >/dev/null

envtest-assets: ## Build kube-apiserver and etcd for envtest into .cache/envtest-bin (cached; cold ~5 min, ~2 GB RAM)
	GO=$(GO) ./hack/envtest-assets.sh

COMPAT_K8S    ?= 1.32.13 1.37.2

envtest-compat: ## The operator's envtest suites and the Helm dry run against the oldest and newest supported Kubernetes (COMPAT_K8S; cold ~12 min, not in CI)
	set -e -o pipefail; for v in $(COMPAT_K8S); do \
	  assets=$$(GO=$(GO) ./hack/envtest-assets-version.sh $$v | tail -1); \
	  echo "== Kubernetes $$v ($$assets)"; \
	  KUBEBUILDER_ASSETS=$$assets KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=60s TMPDIR=$(TEST_TMPDIR) $(GO) test -count=1 ./operator/... ./validator/; \
	  (cd test && KUBEBUILDER_ASSETS=$$assets $(GO) test -count=1 ./helm/); \
	done

generate: ## Regenerate deepcopy code, CRDs (and the Helm chart's copy) and RBAC (controller-gen through the module proxy)
	$(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object paths=./operator/api/... crd output:crd:artifacts:config=manifests/crds
	$(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 rbac:roleName=sandbox-gpu-operator paths=./operator/controllers/... output:rbac:artifacts:config=manifests/rbac
	cp manifests/crds/*.yaml manifests/helm/sandbox-gpu/crds/
	sed 's/namespace: sandbox-gpu$$/namespace: {{ .Values.operator.namespace }}/' manifests/rbac/role.yaml > manifests/helm/sandbox-gpu/templates/rbac.yaml

unit: $(NOSKIP)
unit: ## Unit and integration tests of the product module (envtest included), with the race detector
	$(STAMP)
	set -o pipefail; assets=$$(GO=$(GO) ./hack/envtest-assets.sh | tail -1) && \
	KUBEBUILDER_ASSETS=$$assets KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=$${KUBEBUILDER_CONTROLPLANE_START_TIMEOUT:-60s} \
	TMPDIR=$(TEST_TMPDIR) $(GO) test -json -race -count=1 ./... | $(NOSKIP)

fuzz: ## Run every fuzz target of the product module, found by name (FUZZTIME executions each, 2-15 s)
	$(STAMP)
	@set -e -o pipefail; for dir in $$($(GO) list -f '{{.Dir}}' ./...); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $${dir#$(CURDIR)/} $$f"; \
	    TMPDIR=$(TEST_TMPDIR) $(GO) test ./$${dir#$(CURDIR)/} -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME); \
	  done; \
	done

e2e: $(NOSKIP)
e2e: ## End-to-end suites of the test/ module (real kernel under QEMU, kubelet device manager, real containerd, Helm); a missing peer fails
	$(STAMP)
	set -o pipefail; assets=$$(GO=$(GO) ./hack/envtest-assets.sh | tail -1) && cd test && \
	KUBEBUILDER_ASSETS=$$assets KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=$${KUBEBUILDER_CONTROLPLANE_START_TIMEOUT:-60s} \
	$(GO) test -json -count=1 -v $$($(GO) list ./... | grep -v '/test/cluster$$') | $(NOSKIP)

e2e-cluster: $(NOSKIP) images
e2e-cluster: ## The one-node cluster of real parts (test/cluster): etcd, kube-apiserver, controller-manager, scheduler, containerd + runc + bridge CNI, kubelet, the images and the Helm chart (root; warm ~2 min)
	$(STAMP)
	set -o pipefail; cd test && $(GO) test -json -count=1 -v -timeout 20m ./cluster/ | $(NOSKIP)

bench: ## Benchmarks (performance targets live here; the operator's 5,000-node one takes minutes)
	set -o pipefail; assets=$$(GO=$(GO) ./hack/envtest-assets.sh | tail -1) && \
	KUBEBUILDER_ASSETS=$$assets KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=$${KUBEBUILDER_CONTROLPLANE_START_TIMEOUT:-60s} \
	TMPDIR=$(TEST_TMPDIR) $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 30m ./...

lint: ## go vet and staticcheck over both modules
	$(STAMP)
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd test && $(GO) run $(STATICCHECK) ./...
	cd hack/imagebuild && GOWORK=off $(GO) vet ./...
	cd hack/imagebuild && GOWORK=off $(GO) run $(STATICCHECK) ./...

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

REGISTRY      ?= ghcr.io/sandbox-gpu
VERSION       ?= v0.1.0
INSECURE      ?= 0

images: ## One OCI image archive per shipped binary in bin/images/<binary>.tar, no container daemon, same sources same digests (REGISTRY, VERSION)
	$(STAMP)
	GO=$(GO) REGISTRY=$(REGISTRY) VERSION=$(VERSION) CGO_BINARIES="$(CGO_BINARIES)" ./hack/images.sh build

push: images ## Push bin/images/*.tar to REGISTRY (INSECURE=1: plain HTTP, no TLS verification)
	GO=$(GO) REGISTRY=$(REGISTRY) VERSION=$(VERSION) INSECURE=$(INSECURE) ./hack/images.sh push

images-test: $(NOSKIP)
images-test: ## hack/imagebuild's tests: reproducible digests, layer contents, the NRI image's glibc and dlopen, push/pull through Debian's docker-registry
	$(STAMP)
	set -o pipefail; cd hack/imagebuild && GOWORK=off GOFLAGS=-mod=readonly $(GO) test -json -count=1 ./... | $(NOSKIP)

demo: ## The whole story on an embedded default: envtest's kube-apiserver, the operator, and the real operands on simulated GPU hosts (no cluster, no GPU)
	set -o pipefail; assets=$$(GO=$(GO) ./hack/envtest-assets.sh | tail -1) && \
	CGO_ENABLED=0 $(GO) run ./demo --assets $$assets

demo-status: ## The VFIO manager's status and plan on the bundled simulated HGX H100 host
	$(GO) run ./demo simulate hgx-h100 vfio-manager status
	$(GO) run ./demo simulate hgx-h100 vfio-manager plan --all --nvswitches

clean: ## Remove build outputs (the kernel cache in .cache/ stays)
	rm -rf bin/
