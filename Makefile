# The cluster-provider operator. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Pinned versions. The Kubernetes minor matches the k8s.io/* libraries in go.mod (v0.37); etcd is
# the version k8s.io/kubernetes v$(K8S_VERSION) itself requires.
K8S_VERSION            ?= 1.37.1
ETCD_VERSION           ?= 3.7.0
CONTROLLER_GEN_VERSION ?= v0.23.0
# The etcd of the other release lines a served Kubernetes version may bring (3.5 up to 1.33, 3.6
# for 1.34 to 1.36): backend/local's TestEtcdLines starts a cluster with each. Built from the Go
# module proxy (under a minute each), cached outside the clone.
ETCD_LINES             ?= 3.5.35 3.6.6
CACHE                  ?= $(HOME)/.cache/cluster-provider
# The previous Kubernetes minor and the etcd it ships with: backend/local's
# TestUpgradePreviousMinor upgrades a real cluster from it to K8S_VERSION in place. Built from the
# Go module proxy like envtest's (about 17 CPU-minutes cold), cached outside the clone; .ci/run
# builds it in the background while make verify and make envtest run.
PREV_K8S_VERSION       ?= 1.36.3
PREV_ETCD_VERSION      ?= 3.6.6

# SeaweedFS, the real S3-compatible server the object-store tests run (backend/objectstore,
# backend/local): its `weed`, built by hack/build-s3server.sh from the Go module proxy at the
# version hack/tools/s3server/go.mod pins, cached outside the clone.
S3SERVER_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/seaweedfs/seaweedfs" {print substr($$3, 2)}' hack/tools/s3server/go.mod)
S3SERVER         := $(CACHE)/s3/$(S3SERVER_VERSION)/weed

ROOT   := $(abspath .)
BIN    := $(ROOT)/bin
export GOBIN := $(BIN)

# envtest binaries live in a folder named after their versions, so a version bump rebuilds them
# and an unchanged one never does.
ENVTEST_ASSETS := $(BIN)/k8s/$(K8S_VERSION)-etcd$(ETCD_VERSION)
KUBE_APISERVER := $(ENVTEST_ASSETS)/kube-apiserver
KUBE_CONTROLLER_MANAGER := $(ENVTEST_ASSETS)/kube-controller-manager
ETCD           := $(ENVTEST_ASSETS)/etcd
# etcdctl takes the local backend's snapshots, etcdutl checks and restores them (backups).
ETCD_TOOLS     := $(ENVTEST_ASSETS)/etcdctl $(ENVTEST_ASSETS)/etcdutl
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
ETCD_LINE_BINS := $(foreach v,$(ETCD_LINES),$(CACHE)/etcd/$(v)/etcd)
PREV_ASSETS    := $(CACHE)/k8s/$(PREV_K8S_VERSION)-etcd$(PREV_ETCD_VERSION)
empty :=
space := $(empty) $(empty)

GO_TEST_FLAGS ?= -race -timeout 30m
BENCH         ?= .
BENCHTIME     ?= 1x
BENCH_PKGS    ?= ./...
# LINE_LIMIT_STRICT=1 makes `make verify` fail on a non-generated Go file over 500 lines; with 0
# it lists them only (hack/check-file-sizes.sh). A tracked file over 1 MiB always fails it.
LINE_LIMIT_STRICT ?= 1

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-12s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

# The CRDs whose reference page hack/crdref writes into docs/reference/<kind>.md, from their field
# docs; what make verify checks for drift after make generate.
REFERENCE_CRDS := $(addprefix deploy/crds/,providers.clusters.openmcp.cloud_providerconfigs.yaml \
  clusters.openmcp.cloud_clusters.yaml clusters.openmcp.cloud_accessrequests.yaml \
  clusters.openmcp.cloud_clusterrequests.yaml)
GENERATED      := api deploy/crds deploy/rbac docs/reference

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code, CRDs (deploy/crds), RBAC (deploy/rbac) and the API reference (docs/reference).
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=deploy/crds
	$(CONTROLLER_GEN) rbac:roleName=cluster-provider paths=./cmd/... paths=./controllers/... paths=./providerconfig/... output:rbac:artifacts:config=deploy/rbac
	go run -race ./hack/crdref -out docs/reference $(REFERENCE_CRDS)

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: verify
verify: generate ## gofmt, go vet, no tracked file over 1 MiB nor Go file over 500 lines, docs' links, and fail if generated files are out of date.
	@LINE_LIMIT_STRICT=$(LINE_LIMIT_STRICT) hack/check-file-sizes.sh
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	go vet -race ./...
	go run -race ./hack/doclinks
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
	  echo "generated files are out of date; run 'make generate' and commit:"; \
	  git status --porcelain -- $(GENERATED); git diff --stat -- $(GENERATED); exit 1; fi

.PHONY: docs-check
docs-check: ## Check every relative link (file and #anchor) of README.md and docs/ (hack/doclinks).
	go run ./hack/doclinks

.PHONY: test
test: envtest envtest-prev $(ETCD_LINE_BINS) $(S3SERVER) ## Run all tests with the race detector against envtest (deploy-check among them).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) LOCAL_ETCD_BINARIES=$(subst $(space),:,$(ETCD_LINE_BINS)) \
	  LOCAL_PREV_BINARIES=$(PREV_ASSETS) S3_SERVER_BINARY=$(S3SERVER) go test $(GO_TEST_FLAGS) ./...

.PHONY: test-stress
test-stress: envtest envtest-prev $(ETCD_LINE_BINS) ## make test on a busy machine on purpose: STRESS_RUNS (3) runs in a row, the test cache off, beside STRESS_BURNERS (one per core) CPU burners.
	hack/test-stress.sh

.PHONY: deploy-check
deploy-check: envtest ## kustomize build every base and overlay of deploy/, server-side dry-run apply against envtest; the hosted host-access policy.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test ./deploy/... ./test/api/ -run 'TestKustomizations|TestDeployment|TestStateVolume|TestNetworkPolicy|TestOperatorScope|TestOwnedNamespaces|TestSamples|TestKustomizationListsEveryCRD|TestPoliciesTwoAppliers|TestInitRoleNamesEveryPolicy|TestHostedReads' -v

.PHONY: bench
bench: envtest ## Run the benchmarks (BENCH, BENCH_PKGS, BENCHTIME; see docs/benchmarks.md).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem $(BENCH_PKGS)

.PHONY: fuzz
fuzz: ## Run every Go fuzz target (the parsers and validators of user input), FUZZTIME each (default 30s).
	@git grep -l --untracked '^func Fuzz' -- '*_test.go' | while read -r f; do \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
	    echo "go test ./$$(dirname "$$f") -run '^$$' -fuzz '^$$t$$' -fuzztime $${FUZZTIME:-30s}"; \
	    go test ./$$(dirname "$$f") -run '^$$' -fuzz "^$$t\$$" -fuzztime $${FUZZTIME:-30s} || exit 1; \
	  done; \
	done

E2E_TEST := $(ENVTEST_ASSETS)/e2e.test
GINKGO   := $(ENVTEST_ASSETS)/ginkgo

.PHONY: conformance
conformance: envtest $(E2E_TEST) $(GINKGO) ## Upstream [Conformance] tests against a local cluster of the operator (docs/conformance.md).
	ENVTEST_ASSETS=$(ENVTEST_ASSETS) E2E_TEST=$(E2E_TEST) GINKGO=$(GINKGO) hack/conformance.sh

.PHONY: run
run: envtest ## Run the operator locally: a control plane in .run/ (or $KUBECONFIG's), CRDs, samples.
	ENVTEST_ASSETS=$(ENVTEST_ASSETS) hack/run.sh

##@ Build

.PHONY: build
build: ## Build bin/cluster-provider.
	go build -o $(BIN)/cluster-provider ./cmd/cluster-provider

IMAGE ?= cluster-provider:dev

.PHONY: image
image: docker-check envtest ## Build the operator image $(IMAGE) FROM scratch, nothing pulled (needs a Docker engine).
	ENVTEST_ASSETS=$(ENVTEST_ASSETS) hack/image.sh $(IMAGE)

CONTROLPLANE_IMAGE ?= cluster-provider/controlplane:v$(K8S_VERSION)

.PHONY: controlplane-image
controlplane-image: docker-check envtest ## Build the hosted backend's control-plane image $(CONTROLPLANE_IMAGE) FROM scratch, nothing pulled.
	ENVTEST_ASSETS=$(ENVTEST_ASSETS) hack/controlplane-image.sh $(CONTROLPLANE_IMAGE)

# The previous minor's control-plane image: make e2e-kind upgrades a hosted Cluster from it.
CONTROLPLANE_PREV_IMAGE ?= cluster-provider/controlplane:v$(PREV_K8S_VERSION)

.PHONY: controlplane-image-prev
controlplane-image-prev: docker-check envtest-prev ## Build $(CONTROLPLANE_PREV_IMAGE) from the previous minor's binaries (make envtest-prev), nothing pulled.
	ENVTEST_ASSETS=$(PREV_ASSETS) hack/controlplane-image.sh $(CONTROLPLANE_PREV_IMAGE)

KIND_NODE_IMAGE ?= cluster-provider/kind-node:v$(K8S_VERSION)

.PHONY: kind-image
kind-image: docker-check envtest ## Build the kind node image $(KIND_NODE_IMAGE) offline (cached in ~/.cache/cluster-provider/kind).
	K8S_VERSION=$(K8S_VERSION) ENVTEST_ASSETS=$(ENVTEST_ASSETS) KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) hack/kind-image.sh

# Checked before the other prerequisites: without a Docker engine, the Docker targets say so at
# once instead of after the envtest build (17 minutes cold).
.PHONY: docker-check
docker-check:
	@hack/need-docker.sh "make $(MAKECMDGOALS)"

.PHONY: kind-smoke
kind-smoke: ## Check that the Docker engine runs systemd as PID 1 in a container (issue 17, step 1).
	@hack/need-docker.sh "make kind-smoke"
	hack/kind-smoke.sh

.PHONY: e2e-kind
e2e-kind: docker-check kind-image image controlplane-image controlplane-image-prev $(S3SERVER) ## kind platform from the offline node image, deploy, scenario suite; the hosted backend (an upgrade among its tests, a node lost last); then the kind backend (needs a Docker engine).
	IMAGE=$(IMAGE) KIND_NODE_IMAGE=$(KIND_NODE_IMAGE) CONTROLPLANE_IMAGE=$(CONTROLPLANE_IMAGE) CONTROLPLANE_PREV_IMAGE=$(CONTROLPLANE_PREV_IMAGE) \
	  KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) S3_SERVER_BINARY=$(S3SERVER) hack/e2e-kind.sh

##@ Tools

.PHONY: envtest
envtest: $(KUBE_APISERVER) $(KUBE_CONTROLLER_MANAGER) $(ETCD) $(ETCD_TOOLS) $(ENVTEST_ASSETS)/kubectl ## Build kube-apiserver, kube-controller-manager, etcd, etcdctl and etcdutl (cached in bin/k8s).
	@echo "KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS)"

# One `go build` makes both Kubernetes binaries: they share most packages.
$(KUBE_APISERVER) $(KUBE_CONTROLLER_MANAGER) &:
	hack/build-envtest.sh kubernetes $(K8S_VERSION) $(ENVTEST_ASSETS)

$(ETCD):
	hack/build-envtest.sh etcd $(ETCD_VERSION) $@

$(ETCD_TOOLS):
	hack/build-envtest.sh $(notdir $@) $(ETCD_VERSION) $@

$(CACHE)/etcd/%/etcd:
	hack/build-envtest.sh etcd $* $@

$(CACHE)/etcd/%/etcdctl:
	hack/build-envtest.sh etcdctl $* $@

$(CACHE)/etcd/%/etcdutl:
	hack/build-envtest.sh etcdutl $* $@

.PHONY: s3server
s3server: $(S3SERVER) ## Build SeaweedFS's weed, the S3-compatible server of the object-store tests (cached in ~/.cache/cluster-provider/s3).
	@echo "S3_SERVER_BINARY=$(S3SERVER)"

$(S3SERVER):
	hack/build-s3server.sh $@

.PHONY: envtest-prev
envtest-prev: $(PREV_ASSETS)/kube-apiserver $(PREV_ASSETS)/etcd $(PREV_ASSETS)/etcdctl $(PREV_ASSETS)/etcdutl ## Build the previous minor's kube-apiserver, kube-controller-manager, etcd, etcdctl and etcdutl (cached in ~/.cache/cluster-provider/k8s).
	@echo "LOCAL_PREV_BINARIES=$(PREV_ASSETS)"

$(PREV_ASSETS)/kube-apiserver $(PREV_ASSETS)/kube-controller-manager &:
	hack/build-envtest.sh kubernetes $(PREV_K8S_VERSION) $(PREV_ASSETS)

$(PREV_ASSETS)/etcd $(PREV_ASSETS)/etcdctl $(PREV_ASSETS)/etcdutl: $(PREV_ASSETS)/%: $(CACHE)/etcd/$(PREV_ETCD_VERSION)/%
	mkdir -p $(PREV_ASSETS)
	cp $< $@.tmp && mv $@.tmp $@

# The upstream e2e suite of the served version, for `make conformance` only (not in `make test`).
$(E2E_TEST):
	hack/build-envtest.sh e2e.test $(K8S_VERSION) $@

# The ginkgo CLI of the version k8s.io/kubernetes requires: it runs e2e.test in parallel processes.
$(GINKGO):
	@v=$$(go mod download -json k8s.io/kubernetes@v$(K8S_VERSION) | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' | xargs awk '$$1 == "github.com/onsi/ginkgo/v2" {print $$2}'); \
	  mkdir -p $(ENVTEST_ASSETS) && GOBIN=$(ENVTEST_ASSETS) go install github.com/onsi/ginkgo/v2/ginkgo@$$v

# envtest only needs kubectl for its optional helpers; link the one on the PATH when present.
$(ENVTEST_ASSETS)/kubectl:
	@mkdir -p $(ENVTEST_ASSETS)
	@if k=$$(command -v kubectl); then ln -sf "$$k" $@; else echo "kubectl not on PATH; envtest runs without it"; fi

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN)/.tmp go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/.tmp/controller-gen $@ && rmdir $(BIN)/.tmp
