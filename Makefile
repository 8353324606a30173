# One venv, everything installed from nothing: `make test` is what CI runs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: install lint test test-pure demo bench clean

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: a bare `torch` would resolve to a multi-GB CUDA build
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[all,test,lint]"
	$(PY) setup.py -q build_ext --inplace
	touch $@

install: $(VENV)/.installed

# ruff (lint rules and formatting, configured in pyproject.toml) and mypy on the package
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: install
	$(PY) -m pytest -q

test-pure: install
	TFRECORD_BEAM_PURE=1 $(PY) -m pytest -q

demo: install
	$(PY) -m pipelines.demo

bench: install
	$(PIP) install -q "tfrecord==1.14.6"
	TFX_PYTHON=$(if $(wildcard $(TFX_VENV)/bin/python),$(TFX_VENV)/bin/python,) $(PY) -m bench

# tfx_bsl (the Parquet -> Example peer) lives in its own venv: it brings TensorFlow and its own
# pins. `make bench-tfx` makes it; `make bench` then measures tfx_bsl beside our jobs.
TFX_VENV ?= .bench_venvs/tfx
$(TFX_VENV)/bin/python:
	$(PYTHON) -m venv $(TFX_VENV)
	$(TFX_VENV)/bin/python -m pip install -q "tfx-bsl==1.21.0"
bench-tfx: $(TFX_VENV)/bin/python
.PHONY: bench-tfx

clean:
	rm -rf build *.egg-info tfrecord_beam/_native/*.so .pytest_cache

# Bounded libFuzzer run (ASan+UBSan) over the compiled core's plain-C layer; needs clang.
FUZZ_SECONDS ?= 60
fuzz:
	PYTHON=$(PYTHON) fuzz/run_fuzz.sh $(FUZZ_SECONDS)
.PHONY: fuzz
