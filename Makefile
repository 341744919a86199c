# policy-scheduler — the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CLUSTER_FLAGS := $(if $(KWOK),--kwok,) $(if $(CONTROLLER_MANAGER),--controller-manager,) $(if $(GANGS),--gangs,)

.PHONY: help venv build prometheus chromium zsh cluster-up cluster-down cluster-status node-up node-down test typecheck unit e2e demo playground playground-down crd bench-decide bench-load-aware bench bench-client clean

help:
	@echo "make demo          run the scheduler on a local control plane with simulated nodes and print placements"
	@echo "make playground    a local cluster left running: kwok nodes, Prometheus, the operator with its webhooks, every example policy"
	@echo "make playground-down  stop it"
	@echo "make test          create .venv, build the control plane if needed, run the type checker and the whole test suite"
	@echo "make typecheck     mypy on the pure core (TYPECHECK_PACKAGES; settings: pyproject.toml [tool.mypy])"
	@echo "make cluster-up    start etcd + kube-apiserver on loopback (KWOK=1, CONTROLLER_MANAGER=1, GANGS=1 for more)"
	@echo "make cluster-down  stop it"
	@echo "make node-up       a control plane with a real kubelet node (containerd, CNI, kube-proxy) and kwok nodes; root"
	@echo "make node-down     stop it, and remove every process, mount, namespace and interface it made"
	@echo "make build         build the pinned control-plane binaries (cached; see hack/versions.env)"
	@echo "make helm          build the pinned helm from source (cached; HELM_VERSION in hack/versions.env)"
	@echo "make bench-decide  decision time per pod at 1,000 and 5,000 nodes"
	@echo "make bench-load-aware  extra decision time per pod that LoadAware adds at 1,000 nodes"
	@echo "make bench         pods/s against kube-scheduler and a bare binder (BENCH_ARGS=--quick)"
	@echo "make bench-client  Bindings + Events per second and CPU per bind through aiohttp and HTTP/2 clients (CLIENT_ARGS=...)"
	@echo "make lock          regenerate requirements/*.txt, the hash-checked locks (UPGRADE=1: newest releases)"
	@echo "make image         build the image policy-scheduler:<version> with docker, podman or buildah (BASE=official|local|auto)"
	@echo "make images        the image, a pause and a busybox image as archives for containerd (ctr -n k8s.io images import)"
	@echo "make image-verify  load those archives into a throwaway containerd and run them (uid 10001, read-only root)"

# Everything comes from the hash-checked locks: the locked pip first (it installs the rest in about
# half the time the bundled one takes), then requirements/test.txt (the runtime, the test extra, the
# build backend), then the project itself, editable, with nothing more to fetch.
LOCK := requirements/runtime.txt
TEST_LOCK := requirements/test.txt
PIP_LOCK := requirements/pip.txt
$(STAMP): pyproject.toml $(TEST_LOCK) $(PIP_LOCK)
	@command -v $(PYTHON) >/dev/null || { echo "python3 (>= 3.11) is required"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r $(PIP_LOCK)
	$(PY) -m pip install -q --require-hashes -r $(TEST_LOCK)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

venv: $(STAMP)

# `make lock` regenerates the three lock files with uv (a dev tool, installed in .local/ only for this);
# it keeps the pins it can, `make lock UPGRADE=1` moves every pin to the newest release.
.PHONY: lock image
UV_VERSION := 0.13.8
UV := .local/uv-$(UV_VERSION)/bin/uv
LOCK_FLAGS = --python-version 3.11 --python-platform linux --generate-hashes --custom-compile-command 'make lock' \
	--quiet $(if $(UPGRADE),--upgrade,)

$(UV):
	$(PYTHON) -m venv .local/uv-$(UV_VERSION)
	.local/uv-$(UV_VERSION)/bin/pip install -q uv==$(UV_VERSION)

lock: $(UV)
	$(UV) pip compile pyproject.toml $(LOCK_FLAGS) -o $(LOCK)
	$(PYTHON) -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], 'pip', sep='\n')" \
	  | $(UV) pip compile pyproject.toml - --extra test -c $(LOCK) $(LOCK_FLAGS) -o $(TEST_LOCK)
	echo pip | $(UV) pip compile - -c $(TEST_LOCK) $(LOCK_FLAGS) -o $(PIP_LOCK)
	$(UV) pip compile requirements/bench-client.in -c $(LOCK) $(LOCK_FLAGS) -o $(BENCH_CLIENT_LOCK)

# The image, with the first builder found: docker (with a reachable daemon), podman, buildah;
# BUILDER=podman (say) picks one, IMAGE_FLAGS passes options (e.g. --build-arg PYTHON_IMAGE=...).
# BASE=official: the Dockerfile's digest-pinned python:3.11-slim; BASE=local: a Debian 12 base built
# here (hack/image/base.sh, for machines without a registry; buildah or podman); BASE=auto (default):
# official when it is here or can be pulled, else local. See hack/image/build.sh.
IMAGE ?= policy-scheduler:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
BASE ?= auto
.PHONY: images image-verify

image:
	@IMAGE='$(IMAGE)' BASE='$(BASE)' BUILDER='$(BUILDER)' IMAGE_FLAGS='$(IMAGE_FLAGS)' bash hack/image/build.sh

# The product, pause and busybox images as archives for a node's containerd (ctr -n k8s.io images
# import), built first where needed; prints "NAME ARCHIVE" per image. image-verify loads them into
# a throwaway containerd and runs them (uid 10001, read-only root).
images:
	@BASE='$(BASE)' BUILDER='$(BUILDER)' IMAGE_FLAGS='$(IMAGE_FLAGS)' bash hack/image/export.sh

image-verify: images
	bash hack/image/verify.sh

build:
	bash hack/build.sh >/dev/null

prometheus:  # the e2e tests start their own server; this only makes sure the binary is there
	bash hack/ensure-prometheus.sh

zsh:  # the completion test runs a real interactive zsh
	bash hack/ensure-deb.sh zsh zsh

chromium:  # the what-if report test opens the HTML report in headless Chromium
	bash hack/ensure-chromium.sh

.PHONY: kueue
kueue:  # the Kueue tests (tests/e2e/test_kueue.py) run Kueue's manager, built from its pinned module
	bash hack/ensure-kueue.sh >/dev/null

.PHONY: helm
helm:  # the chart test (tests/e2e/test_helm.py) lints and renders charts/policy-scheduler
	bash hack/ensure-helm.sh >/dev/null

cluster-up: build
	$(PYTHON) hack/localcluster.py up $(CLUSTER_FLAGS)

# A real node (hack/realnode.py) beside kwok's, on a control plane that pods can reach, with the
# images (hack/image/export.sh) imported into its containerd: what tests/e2e/test_real_node.py runs
NODE_STATE := .local/node-cluster
node-up: build
	$(PYTHON) hack/localcluster.py up --state-dir $(NODE_STATE) --kubeconfig .local/node-kubeconfig --kwok --controller-manager --kube-scheduler \
	  --node-address $$($(PYTHON) -c 'import sys; sys.path.insert(0, "hack"); import realnode; print(realnode.HOST_ADDRESS)')
	$(PYTHON) hack/realnode.py up --kubeconfig $(NODE_STATE)/admin.kubeconfig \
	  --images $$(bash hack/image/export.sh | cut -d' ' -f2 | paste -sd,)
	@echo "export KUBECONFIG=$$PWD/.local/node-kubeconfig; then: helm install policy-scheduler charts/policy-scheduler -n policy-scheduler-system --create-namespace"

node-down:
	$(PYTHON) hack/realnode.py down
	$(PYTHON) hack/localcluster.py down --state-dir $(NODE_STATE)

cluster-down:
	$(PYTHON) hack/localcluster.py down

cluster-status:
	$(PYTHON) hack/localcluster.py status

# mypy on the pure core: the packages of TYPECHECK_PACKAGES that exist (its settings: pyproject.toml
# [tool.mypy]); incremental, with its cache in .mypy_cache/. `make test` runs it first.
TYPECHECK_PACKAGES := framework cache plugins scheduler policy remedies
TYPECHECK_ARGS = $(foreach p,$(TYPECHECK_PACKAGES),\
	$(if $(wildcard operator/policy_scheduler/$(p)/__init__.py),-p policy_scheduler.$(p)))

typecheck: venv
	$(PY) -m mypy $(TYPECHECK_ARGS)

test: venv typecheck build prometheus chromium helm zsh kueue
	$(PY) -m pytest $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

e2e: venv build prometheus chromium helm kueue
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

playground: venv build prometheus
	$(PY) hack/playground.py up

playground-down:
	$(PYTHON) hack/playground.py down

demo: venv build
	$(PY) hack/demo.py

crd: venv
	$(VENV)/bin/policy-scheduler crd > crds/schedulingpolicies.yaml

bench-decide: venv
	$(PY) bench/decide.py --plugin-timing

bench-load-aware: venv
	$(PY) bench/load_aware.py

bench: venv build
	$(PY) bench/throughput.py $(BENCH_ARGS)

# bench/client.py compares HTTP clients that are not the operator's dependencies: they get a virtual
# environment of their own (niquests brings urllib3-future, which takes over the urllib3 name).
BENCH_CLIENT_LOCK := requirements/bench-client.txt
BENCH_CLIENT_VENV := .local/bench-client-venv
$(BENCH_CLIENT_VENV)/.installed: $(BENCH_CLIENT_LOCK) $(PIP_LOCK)
	$(PYTHON) -m venv $(BENCH_CLIENT_VENV)
	$(BENCH_CLIENT_VENV)/bin/python -m pip install -q --require-hashes -r $(PIP_LOCK)
	$(BENCH_CLIENT_VENV)/bin/python -m pip install -q --require-hashes -r $(BENCH_CLIENT_LOCK)
	@touch $@

bench-client: build $(BENCH_CLIENT_VENV)/.installed
	$(BENCH_CLIENT_VENV)/bin/python bench/client.py $(CLIENT_ARGS)

clean: cluster-down
	rm -rf .local $(VENV)
