# tether: the two commands a fresh machine needs are `make demo` and `make test`.
# Each creates .venv when missing and installs what it needs (pins: constraints/test.txt).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q --disable-pip-version-check -c constraints/test.txt
export PYTHONUNBUFFERED := 1

# torch: always the CPU-only build. The pin names the +cpu local version, so pip can never fall
# back to the default (CUDA, several GB) wheels: it takes the wheel from the CPU index, or from
# a local wheel directory (pip's find-links) where that index cannot be reached, or fails.
# The index is used only when its host resolves (a machine that reaches just PyPI skips it
# instead of retrying it for every dependency of torch).
TORCH_VERSION ?= 2.13.0
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu
TORCH         := torch==$(TORCH_VERSION)+cpu
TORCH_INDEX_ARG = $(shell $(PYTHON) -c "import socket, sys, urllib.parse as u; \
	socket.setdefaulttimeout(5); socket.getaddrinfo(u.urlsplit(sys.argv[1]).hostname, 443)" \
	'$(TORCH_INDEX)' 2>/dev/null && echo '--extra-index-url $(TORCH_INDEX)')

NO_MKDOCS_2_WARNING := 1
export NO_MKDOCS_2_WARNING

.PHONY: demo test test-fast lint docs e2e-infra image bench bench-smoke pipelines clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# core + torch: enough for the embedded default scheduler and the demo
$(VENV)/.core: $(PY) pyproject.toml constraints/test.txt
	@echo "installing $(TORCH) (CPU-only) $(if $(TORCH_INDEX_ARG),from $(TORCH_INDEX),\
	from the configured package sources: $(TORCH_INDEX) is not reachable)"
	$(PIP) $(TORCH_INDEX_ARG) '$(TORCH)'
	$(PIP) -e . numpy
	@touch $@

# everything: every adapter, backend client and the test tools
# (the test plugin in tests/fixtures is never installed: the tests register it for themselves;
# an install left by an older `make test` is removed)
$(VENV)/.all: $(VENV)/.core
	$(PIP) -e '.[all,dev,docs]'
	-@$(PY) -m pip uninstall -y -q tether-test-plugin 2>/dev/null
	@touch $@

## demo: run the distributed training example (2 ranks) on the embedded default scheduler
demo: $(VENV)/.core
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/tether run -s local_cwd \
		dist.ddp -j 1x2 --script examples/apps/train_ddp.py

## lint: ruff and mypy on the packages
lint: $(VENV)/.all
	$(VENV)/bin/ruff check core adapters tests examples dags benchmarks
	$(VENV)/bin/mypy

## docs: build the documentation site (docs/ -> build/site); warnings are errors
docs: $(VENV)/.all
	$(VENV)/bin/mkdocs build --strict

## e2e-infra: build/install the real backends the end-to-end tests start (cached)
e2e-infra: $(VENV)/.all
	bash tests/e2e/infra/setup.sh

## image: the tether runtime/launcher image (Debian base by debootstrap, cached in
## ~/.cache/tether/image; IMAGE defaults to tether's default image; ENGINE=podman|docker)
IMAGE ?=
image: $(PY)
	$(PIP) setuptools wheel
	PYTHON=$(PY) bash images/build.sh $(IMAGE)

## test: lint, then every test including the end-to-end ones against real backends
## (five independent groups in parallel: tests/run_groups.py; logs in build/test-groups/)
test: lint docs e2e-infra
	TETHER_BUILD_KUBE=1 TETHER_BUILD_IMAGE=1 $(PY) tests/run_groups.py

## test-fast: unit and local tests only: no real infrastructure (every e2e test deselected)
test-fast: $(VENV)/.all
	$(PY) -m pytest -q -ra -m "not e2e"

## bench: the benchmark harness against the reference implementation (torchx-nightly)
bench: $(VENV)/.all
	$(PY) benchmarks/run.py

## bench-smoke: the harness in seconds (CI runs it so it cannot rot)
bench-smoke: $(VENV)/.all
	$(PY) benchmarks/run.py --smoke

## pipelines: compile the example KFP pipeline to build/kfp_train.yaml
pipelines: $(VENV)/.all
	$(PY) -m tether.adapters.kfp.compile examples/pipelines/kfp_train.py:train_pipeline build/kfp_train.yaml

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
