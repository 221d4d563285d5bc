# smallinit — the three commands a user runs: `make test`, `make figs`, `make bench`.
# Each one creates .venv on first use (the venv is a prerequisite, not rebuilt) and installs
# the tested versions from requirements.lock (the dev extra, hashed wheels only), then the
# project itself. `make lock` refreshes the lock (docs/usage.md: "The lock").

PYTHON  ?= $(shell command -v python3.11 || command -v python3)
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= quick
WORKERS ?=
EXECUTOR ?=
PIP     := $(BIN)/python -m pip --disable-pip-version-check
LOCK    := requirements.lock
# Where pip finds the CPU wheel of torch 2.13.0: this folder where the wheel lies there (this
# project's machines and CI: no network call), else PyTorch's CPU index page for torch.
TORCH_INDEX  := https://download.pytorch.org/whl/cpu/torch/
TORCH_WHEELS ?= $(if $(wildcard /opt/wheels/torch-2.13.0+cpu-cp311-*.whl),/opt/wheels,$(TORCH_INDEX))
UV_VERSION := 0.13.9
# the build backend of pyproject's [build-system], locked beside the dev extra
BUILD_REQUIRES = $(PYTHON) -c "import tomllib; \
	print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')"

.PHONY: test figs bench install extra lint lock clean

install: $(STAMP)

# Two steps, since pip's hash-checking mode refuses an editable install: every dependency
# from the lock (hashes required, wheels only), then the project alone with the locked
# setuptools (no build isolation, no index: nothing more is fetched).
$(STAMP): pyproject.toml constraints.txt $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -c "import sys; sys.exit(sys.version_info[:2] != \
		(3, 11) and '$(LOCK) is for Python 3.11; run make PYTHON=/path/to/python3.11')"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --require-hashes --only-binary :all: --find-links $(TORCH_WHEELS) \
		-r $(LOCK)
	$(PIP) install -q --no-deps --no-build-isolation --no-index -e .
	touch $(STAMP)

# An optional extra of pyproject beside the lock (`make extra EXTRA=ray`): the locked versions
# and constraints.txt constrain it, so it adds packages and moves none of the locked ones.
extra: $(STAMP)
	@test -n "$(EXTRA)" || { echo "make extra: name one with EXTRA=NAME (pyproject's optional extras)" >&2; exit 2; }
	sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\) .*/\1/p' $(LOCK) > $(VENV)/lock-constraints.txt
	$(PIP) install -q -c $(VENV)/lock-constraints.txt -c constraints.txt --no-build-isolation \
		-e '.[$(EXTRA)]'

test: $(STAMP)
	$(BIN)/python -m pytest

# WORKERS=N: local processes (default every core: cores // threads per run);
# EXECUTOR=ray: one Ray task per run on the cluster at $RAY_ADDRESS (docs/gpu.md).
figs: $(STAMP)
	$(BIN)/smallinit figs --profile $(PROFILE) $(if $(WORKERS),--workers $(WORKERS)) \
		$(if $(EXECUTOR),--executor $(EXECUTOR))

bench: $(STAMP)
	mkdir -p bench-results
	$(BIN)/python -m pytest tests -m bench -p no:randomly \
		--benchmark-only --benchmark-json=bench-results/bench.json

# Lint, types, format: ruff's rules, mypy on the packages of pyproject's [tool.mypy] (the
# ground floor), then ruff's formatter as a check (`ruff format` applies it), over every source
# folder (pyproject's package-dir: each folder X is smallinit.X) and tests/. mypy cannot see the
# editable install's import hook, so it reads smallinit.X through links smallinit/X -> X/ under
# $(TYPE_ROOT), made afresh each run.
SOURCES = $(shell $(PYTHON) -c "import tomllib; print(*tomllib.load(open('pyproject.toml', \
	'rb'))['tool']['setuptools']['package-dir'].values())") tests
TYPE_ROOT := $(VENV)/mypy-path

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	rm -rf $(TYPE_ROOT) && mkdir -p $(TYPE_ROOT)/smallinit
	ln -s $(CURDIR)/smallinit/*.py $(CURDIR)/smallinit/py.typed $(TYPE_ROOT)/smallinit/
	for d in $(filter-out smallinit tests,$(SOURCES)); do \
		ln -s $(CURDIR)/$$d $(TYPE_ROOT)/smallinit/$$d; done
	MYPYPATH=$(TYPE_ROOT) $(BIN)/mypy
	$(BIN)/ruff format --check --output-format concise $(SOURCES)

# The newest versions within pyproject's ranges for Python 3.11 on Linux x86-64, wheels only,
# with hashes, under constraints.txt; uv runs from its own venv.
lock:
	test -x $(VENV)-lock/bin/uv || ($(PYTHON) -m venv $(VENV)-lock && \
		$(VENV)-lock/bin/python -m pip install -q uv==$(UV_VERSION))
	$(BUILD_REQUIRES) | $(VENV)-lock/bin/uv pip compile pyproject.toml - --extra dev \
		-c constraints.txt --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --no-build --upgrade -q \
		--find-links $(TORCH_WHEELS) -o $(LOCK)

clean:
	rm -rf $(VENV) $(VENV)-lock build *.egg-info
