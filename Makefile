# policy-scheduler — the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CLUSTER_FLAGS := $(if $(KWOK),--kwok,) $(if $(CONTROLLER_MANAGER),--controller-manager,) $(if $(GANGS),--gangs,)

.PHONY: help venv build prometheus chromium cluster-up cluster-down cluster-status test unit e2e demo playground playground-down crd bench-decide bench-load-aware bench clean

help:
	@echo "make demo          run the scheduler on a local control plane with simulated nodes and print placements"
	@echo "make playground    a local cluster left running: kwok nodes, Prometheus, the operator with its webhooks, every example policy"
	@echo "make playground-down  stop it"
	@echo "make test          create .venv, build the control plane if needed, run the whole test suite"
	@echo "make cluster-up    start etcd + kube-apiserver on loopback (KWOK=1, CONTROLLER_MANAGER=1, GANGS=1 for more)"
	@echo "make cluster-down  stop it"
	@echo "make build         build the pinned control-plane binaries (cached; see hack/versions.env)"
	@echo "make helm          build the pinned helm from source (cached; HELM_VERSION in hack/versions.env)"
	@echo "make bench-decide  decision time per pod at 1,000 and 5,000 nodes"
	@echo "make bench-load-aware  extra decision time per pod that LoadAware adds at 1,000 nodes"
	@echo "make bench         pods/s against kube-scheduler and a bare binder (BENCH_ARGS=--quick)"

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "python3 (>= 3.11) is required"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

venv: $(STAMP)

build:
	bash hack/build.sh >/dev/null

prometheus:  # the e2e tests start their own server; this only makes sure the binary is there
	bash hack/ensure-prometheus.sh

chromium:  # the what-if report test opens the HTML report in headless Chromium
	bash hack/ensure-chromium.sh

.PHONY: helm
helm:  # the chart test (tests/e2e/test_helm.py) lints and renders charts/policy-scheduler
	bash hack/ensure-helm.sh >/dev/null

cluster-up: build
	$(PYTHON) hack/localcluster.py up $(CLUSTER_FLAGS)

cluster-down:
	$(PYTHON) hack/localcluster.py down

cluster-status:
	$(PYTHON) hack/localcluster.py status

test: venv build prometheus chromium helm
	$(PY) -m pytest $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

e2e: venv build prometheus chromium helm
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

clean: cluster-down
	rm -rf .local $(VENV)
