# smallinit — the three commands a user runs: `make test`, `make figs`, `make bench`.
# Each one creates .venv on first use (the venv is a prerequisite, not rebuilt) and
# installs the project with its dev extra, pinning torch through constraints.txt.

PYTHON  ?= $(shell command -v python3.11 || command -v python3)
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= quick
WORKERS ?=
EXECUTOR ?=
PIP     := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: test figs bench install lint clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

# WORKERS=N: local processes (default every core: cores // threads per run);
# EXECUTOR=ray: one Ray task per run on the cluster at $RAY_ADDRESS (README).
figs: $(STAMP)
	$(BIN)/smallinit figs --profile $(PROFILE) $(if $(WORKERS),--workers $(WORKERS)) \
		$(if $(EXECUTOR),--executor $(EXECUTOR))

bench: $(STAMP)
	mkdir -p bench-results
	$(BIN)/python -m pytest tests -m bench -p no:randomly \
		--benchmark-only --benchmark-json=bench-results/bench.json

lint: $(STAMP)
	$(BIN)/ruff check smallinit theory toy llm kernels paper_figs tests

clean:
	rm -rf $(VENV) build *.egg-info
