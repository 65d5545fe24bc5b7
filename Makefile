# Cluster API worker providers for KubeVirt: a Kairos kubeadm bootstrap
# provider and a KubeVirt infrastructure provider, plus the WorkerClass API.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

export GOFLAGS ?= -mod=readonly
ROOT := $(abspath .)
CONTROLLER_GEN = $(shell hack/tool.sh controller-gen)
FUZZ_TIME ?= 60s
TEST_FLAGS ?=

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_0-9-]+:.*##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: generate-deepcopy generate-manifests ## Generate deepcopy code, CRDs, RBAC and webhook manifests.

.PHONY: generate-deepcopy
generate-deepcopy:
	for d in exp/workerclass/api bootstrap/api infrastructure/api; do \
		if [ -d $$d ]; then $(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./$$d/...; fi; done

.PHONY: generate-manifests
generate-manifests:
	hack/generate-manifests.sh "$(CONTROLLER_GEN)"

# Per-part generation, for working on one part while others are mid-edit.
.PHONY: generate-workerclass generate-bootstrap generate-infrastructure
generate-workerclass generate-bootstrap generate-infrastructure: generate-%:
	d=$$(case $* in workerclass) echo exp/workerclass;; *) echo $*;; esac); \
		$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./$$d/api/...
	hack/generate-manifests.sh "$(CONTROLLER_GEN)" $*

.PHONY: verify-gen
verify-gen: generate ## Fail when generated files are stale.
	@if [ -n "$$(git status --porcelain -- . ':!*.md')" ]; then \
		git status --porcelain -- . ':!*.md'; git --no-pager diff --stat; \
		echo "generated files are stale: run 'make generate' and commit the result"; exit 1; fi

.PHONY: verify-mod
verify-mod: ## Fail when go.mod or go.sum are not what `go mod tidy` writes.
	go mod tidy -diff

.PHONY: vulncheck
vulncheck: ## Fail when govulncheck finds a known vulnerability on a call path (pinned database snapshot; the release images' Go).
	hack/vulncheck.sh

.PHONY: external-crds
external-crds: ## Regenerate the KubeVirt and CDI CRDs in test/crds and KubeVirt's install manifests in test/kubevirt/manifests (about 10 minutes cold).
	hack/gen-external-crds.sh

.PHONY: verify-external-crds
verify-external-crds: ## Fail when test/crds or test/kubevirt/manifests differ from what the pinned sources generate.
	hack/gen-external-crds.sh --verify

.PHONY: envtest-bins
envtest-bins: ## Build kube-apiserver and etcd from their Go modules into the cache.
	hack/tools-bins.sh envtest

.PHONY: tools-bins
tools-bins: ## Build every binary the tests use (apiserver, etcd, kubeadm, controller-manager, virt-api, virt-controller).
	hack/tools-bins.sh all

.PHONY: lint
lint: ## Run go vet and golangci-lint with Cluster API's linters (.golangci.yml), also on test/qemu's qemu-tagged, test/node's node-tagged and test/kindnode's kind-tagged files.
	go vet ./...
	go vet -tags qemu ./test/qemu/
	go vet -tags node ./test/node/... ./test/cdi/... ./test/kindnode/...
	go vet -tags kind,node ./test/kindnode/...
	golangci_lint=$$(hack/tool.sh golangci-lint); \
		$$golangci_lint run ./... && \
		$$golangci_lint run --build-tags qemu ./test/qemu/... && \
		$$golangci_lint run --build-tags node ./test/node/... ./test/cdi/... ./test/kindnode/... && \
		$$golangci_lint run --build-tags kind,node ./test/kindnode/...

##@ Sandbox

.PHONY: sandbox
sandbox: ## Run the local sandbox: embedded control planes, Cluster API, both providers, KubeVirt's control plane with node, CDI and guest stand-ins, and an example Kairos pool (SANDBOX_FLAGS=--once to exit when joined).
	@echo "sandbox: compiling ./cmd/sandbox (Cluster API, KubeVirt's API, both providers and the simulators); the first time takes minutes on two cores, later runs reuse Go's build cache" >&2
	go run ./cmd/sandbox $(SANDBOX_FLAGS)

##@ Testing

.PHONY: test
test: ## Run unit, fuzz-seed, envtest and real-consumer tests (builds what they need).
	hack/test.sh $(TEST_FLAGS)

FAULT_SEEDS ?= 1,2,3,4,5

.PHONY: faults
faults: ## Fault scenarios (provider kills, apiserver restarts, webhooks down) over FAULT_SEEDS (default "1,2,3,4,5"); FAULT_REPORT=<file> writes the figures, FAULT_ARTIFACTS=<dir> keeps every component's log.
	TEST_PACKAGES=./test/faults FAULT_SEEDS="$(FAULT_SEEDS)" FAULT_REPORT="$(FAULT_REPORT)" FAULT_ARTIFACTS="$(FAULT_ARTIFACTS)" hack/test.sh -run TestFaults -v -timeout 120m

FAULT_RESTARTS ?= 20

.PHONY: faults-restarts
faults-restarts: ## The management apiserver restart alone, FAULT_RESTARTS times (default 20, seeds 1..N: one restart each at a random point); not in CI. FAULT_REPORT, FAULT_ARTIFACTS as for faults.
	TEST_PACKAGES=./test/faults FAULT_SEEDS="$$(seq -s, 1 $(FAULT_RESTARTS))" FAULT_REPORT="$(FAULT_REPORT)" FAULT_ARTIFACTS="$(FAULT_ARTIFACTS)" hack/test.sh -run 'TestFaults/management-apiserver/' -v -timeout 180m

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZ_TIME each (default 60s).
	hack/fuzz.sh $(FUZZ_TIME)

.PHONY: bench
bench: ## Run the Go benchmarks and print their figures.
	go test -run '^$$' -bench . -benchmem ./...

##@ Release

.PHONY: release-manifests
release-manifests: ## Write components, metadata and cluster templates to RELEASE_DIR (default out/).
	hack/release-manifests.sh

.PHONY: release-binaries
release-binaries: ## Write the workerclass command (the restore interface, resolve --legacy) as static linux amd64 and arm64 binaries with SHA-256 sums to RELEASE_DIR (default out/).
	hack/release-binaries.sh

##@ Benchmarks (not part of CI)

.PHONY: bench-imports
bench-imports: ## Own imports against the shared import, in the harness: requests, MiB fetched and time to Running for N machines (IMPORT_BENCH_MACHINES="10 100", IMPORT_BENCH_UPLINK_MBPS).
	TEST_PACKAGES=./test/bench/imports/ hack/test.sh -run '^$$' -bench Imports -benchtime 1x -timeout 90m

.PHONY: bench-scale
bench-scale: ## Side by side, Kairos, the contract-floor providers and the kubeadm peer from 0 to N machines in the harness, providers as processes, the floor and Cluster API alone (N="10 100", BOOT_DELAY, IDLE, PEER_IDLE, TIMEOUT, SETTLE, UPSTREAM, FLOOR_PROVIDERS, PEER, OUT); writes a report.
	hack/bench-scale.sh

##@ Real guests (needs root; .ci/run runs test-qemu after test)

.PHONY: worker-disk
worker-disk: ## Build the Debian worker test disk (debootstrap, kubelet/kubeadm/yip from source) into the cache.
	hack/worker-disk/build.sh

.PHONY: test-qemu
test-qemu: ## Real-guest scenarios under QEMU in the harness: join, replacement, scale from zero, failed joins (14m39s on 2026-12-03; QEMU_ARTIFACTS=<dir> keeps guest logs; docs/real-guests.md).
	go test -tags qemu ./test/qemu/ -v -count=1 -timeout 45m

.PHONY: kairos-disk
kairos-disk: ## Build the Kairos worker disk from Kairos's components (kairos-init, kairos-agent, immucore from Go modules; Debian packages) into the cache; over an hour the first time (docs/real-guests.md).
	hack/kairos-disk/build.sh

.PHONY: test-qemu-kairos
test-qemu-kairos: ## The QEMU tier's Kairos scenarios alone: a pool machine boots the Kairos disk (SeaBIOS, then the grub Kairos installs) and joins with the Stages rendering; one with its own kernel settings reboots, with its seed and without (QEMU_KAIROS_DISK=1; builds the disk first; QEMU_RUN=<regexp> picks one; docs/real-guests.md).
	QEMU_KAIROS_DISK=1 go test -tags qemu ./test/qemu/ -v -count=1 -timeout 60m -run '$(or $(QEMU_RUN),TestKairosDisk)'

.PHONY: test-kind
test-kind: ## A kind cluster with kind's podman provider (root), from kind v0.33.0 and a node image built here (hack/kind/node-image.sh: kind's base files on a Debian root, containerd v2, the control-plane images from binaries built here); a Pod on it resolves and reaches the API server's Service; cert-manager v1.21.2's controller and cainjector (built from its module, hack/certmanager; the chart's objects rendered by Helm's engine) issue a CA and a serving certificate and inject the CA into a webhook configuration; KubeVirt v1.7.0 installed by virt-operator from images built here becomes Available; the real node's worker container disk, loaded by digest, boots as a VM and runs its cloud-config (docs/testing.md, "kind with podman here").
	go test -tags kind,node ./test/kindnode/ -v -count=1 -timeout 30m

.PHONY: test-node
test-node: ## A real node on this machine (root): containerd v2 (built from the Go module proxy), Debian's runc and CNI plugins and the kubelet register with an envtest apiserver and run a Pod from an image built here; a node with kube-proxy and CoreDNS resolves a Service's name and reaches it through its ClusterIP; then KubeVirt's node side on it (virt-handler, virt-launcher, libvirt and QEMU images built by hack/node/kubevirt.sh); then a Kairos pool machine joins through virt-launcher from the worker disk as a container disk (hack/node/worker-containerdisk.sh), with a NoCloud and a ConfigDrive seed, a VM whose preference asks for SCSI disks boots from sda, a machine whose QEMU or launcher Pod is killed is remediated by the MachineHealthCheck, a pool scaled from zero boots from a claim the CDI stand-in imported into a local volume, and so does one on real CDI (cdi-controller v1.65.0 built by hack/node/cdi.sh, its importer, upload server and cloner Pods on the node; a first HTTP import over TLS alone too; clones from another namespace authorized as the tenant with cdi-apiserver's webhooks, and refused), and a drain under eviction strategy External ends and the machine is replaced; Stop leaves nothing; opt-in (NODE_KAIROS_DISK=1), a Kairos pool machine joins from the Kairos disk of hack/kairos-disk as a container disk, booted through SeaBIOS and its grub (NODE_RUN=<regexp> picks scenarios; NODE_ARTIFACTS=<dir> keeps the logs; docs/testing.md).
	hack/node/bins.sh >/dev/null
	hack/node/kubevirt.sh >/dev/null
	hack/node/worker-containerdisk.sh >/dev/null
	go test -p 1 -tags node ./test/node/ ./test/cdi/ -v -count=1 -timeout 90m $(if $(NODE_RUN),-run '$(NODE_RUN)')
