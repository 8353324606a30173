"""The shell blocks of docs/runners.md marked `<!-- run by: tests/runners/test_doc_blocks.py (NAME) -->`
run here as written, on the services `make runners` started (issue 37 item 2: the Flink recipe
failed as written), under `bash -euo pipefail` from a copy of the checkout's root (the block's
`.runners/state` and `runners/` are the checkout's, through links): its `make runners ...` line
checks that the services it names are running (the matrix started them; a second start is
`make runners`' own business), `make runners-stop` and `make test-runners` are left to the
matrix (they would stop the services, or run this very test), every other line runs as a user
types it, `python` being the venv's. tests/docs/test_docs_pages.py checks that every shell
block of the docs runs or says why not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import runner_matrix as rm
from helpers.doc_blocks import block_run_by

import tfrecord_beam as tfb

_MAKE = """#!/usr/bin/env bash
# the doc block's `make`: services are the matrix's (see tests/runners/test_doc_blocks.py)
case "$1" in
runners)
    for arg in "$@"; do
        case $arg in RUNNERS=*) wanted=${arg#RUNNERS=} ;; esac
    done
    for name in ${wanted:-s3 prism flink spark}; do
        [[ -f .runners/state/$name.env ]] || { echo "make runners: $name is not started (run make runners)" >&2; exit 1; }
        [[ $name == prism ]] && runners/prism.sh flags || "runners/$name.sh" flags
    done ;;
runners-stop | test-runners) echo "make $1: left to the matrix" ;;
*) echo "make $*: not expected in a doc block" >&2; exit 2 ;;
esac
"""


def _wanted(name: str) -> None:
    if name not in rm.runner_names():
        pytest.skip(f"the {name} column is not selected (TFRB_RUNNERS)")


def _workdir(tmp_path: Path) -> Path:
    """A directory like the checkout's root for the block: runners/, the code and .runners/state
    linked, nothing else."""
    work = tmp_path / "work"
    work.mkdir()
    for part in ("runners", "pipelines", "tfrecord_beam"):
        (work / part).symlink_to(rm.ROOT / part)
    (work / ".runners").mkdir()
    (work / ".runners" / "state").symlink_to(rm.ROOT / ".runners" / "state")
    return work


def _run(block, work: Path) -> subprocess.CompletedProcess:
    bin_dir = work.parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(_MAKE)
    (bin_dir / "make").chmod(0o755)
    env = dict(os.environ, PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]))
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=rm.JOB_TIMEOUT_S * 2,
    )


def test_the_prism_block_runs_as_written(tmp_path):
    _wanted("prism")
    block = block_run_by("docs/runners.md", "prism")
    work = _workdir(tmp_path)
    (work / "data").mkdir()
    for f in range(3):  # the README tour's data/
        with tfb.TFRecordWriter(str(work / "data" / f"part-{f}.tfrecord")) as writer:
            for i in range(1000):
                writer.write({"id": (f * 1000 + i, "int"), "score": (i / 1000, "float")})
    done = _run(block, work)
    assert done.returncode == 0, f"{block.id}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    assert "verified: yes: 3,000 records" in done.stdout and "runner: PrismRunner" in done.stdout, done.stdout[-3000:]
    assert "--s3_secret_access_key=***" in done.stdout  # make runners' lines, secrets masked


def test_the_flink_block_runs_as_written(tmp_path):
    _wanted("flink")
    block = block_run_by("docs/runners.md", "flink")
    done = _run(block, _workdir(tmp_path))
    assert done.returncode == 0, f"{block.id}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    assert "verified: yes: 1,000 records" in done.stdout and "runner: FlinkRunner" in done.stdout, done.stdout[-3000:]
