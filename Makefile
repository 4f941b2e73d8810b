# swefleet: the two commands are `make run` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup engine base-image vllm-src run test test-unit lint bench clean

setup: $(VENV)/.installed

# The virtual environment is reused; it is refreshed when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

engine:
	bash docker/ensure-engine.sh

base-image: setup engine
	$(VENV)/bin/swefleet images build-base

run: base-image
	$(VENV)/bin/swefleet demo --config configs/quickstart.toml

# vLLM's own source (its wheel, unpacked, never installed) lets the tests check every `vllm serve`
# flag swefleet emits against vLLM 0.26.0's argument parser; without it those tests skip.
vllm-src: setup
	bash scripts/fetch_vllm_source.sh || echo "vLLM source unavailable: its flag checks will skip"

test: base-image vllm-src
	$(VENV)/bin/pytest -m "not gpu" tests $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/pytest -m unit tests $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

bench: base-image
	$(PY) benchmarks/sandbox.py
	$(PY) benchmarks/fleet_client.py

clean:
	-$(VENV)/bin/swefleet clean
