# One venv, everything installed from nothing: `make test` is what CI runs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: install lint test test-pure demo bench clean runners runners-stop test-runners

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

# The runner matrix (issue 21). `make runners` builds (into $${TFRB_CACHE:-~/.cache/tfrecord_beam})
# and starts, in the background on loopback, every service whose script is in runners/ (s3 first:
# the others keep their job data there), then prints one line per runner: `NAME: FLAGS`.
# State and logs: .runners/. `make test-runners` runs tests/runners (marker `runners`) on them.
RUNNER_SCRIPTS := $(wildcard runners/s3.sh runners/prism.sh runners/flink.sh runners/spark.sh)
RUNNERS_ENV := TFRB_PYTHON=$(abspath $(PY))

runners: install
	@set -e; for s in $(RUNNER_SCRIPTS); do $(RUNNERS_ENV) $$s build; $(RUNNERS_ENV) $$s start; done
	@for s in $(RUNNER_SCRIPTS); do $(RUNNERS_ENV) $$s flags; done

runners-stop:
	@status=0; for s in $(RUNNER_SCRIPTS); do $(RUNNERS_ENV) $$s stop || status=1; done; exit $$status

test-runners: install
	$(PY) -m pytest -m runners tests/runners -q -p no:cacheprovider

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
