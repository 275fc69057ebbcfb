# Two commands on a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
export PYTHONDONTWRITEBYTECODE := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install run test lint format bench bench-gpu migrate bank clean vendor

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: an unpinned torch (also pulled in by sentence-transformers) is a multi-GB CUDA build.
	$(PY) -m pip install -q "torch==$(TORCH_VERSION)" || $(PY) -m pip install -q "torch>=2.6"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

migrate: install
	$(PY) -m manage migrate --noinput

bank: migrate
	$(PY) -m manage load_bank

run: install
	$(PY) -m manage run_all

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: install
	$(PY) -m bench

# On a CUDA machine: logits vs transformers per dtype + the engine bench (--quick), <= 5 min.
# Exits 1 on a mismatch, 2 when there is no CUDA device (DEVICE=cpu runs the same on the CPU).
DEVICE ?= cuda
bench-gpu: install
	$(PY) -m bench.gpu_check --device $(DEVICE)

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache

vendor: install
	$(PY) -m common.vendor
