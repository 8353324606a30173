"""The `tfrecord-beam` entry keeps OpenBLAS to one thread: no command does linear algebra, and
OpenBLAS's threads (one per core, started at numpy's import) spun beside inspect's own. A real
interpreter: the setting only counts before numpy is imported, which a zygote child has done."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.fixtures import REPO

from tfrecord_beam.records import write_records

_SHOW = "import os, sys; from tfrecord_beam.cli import main; main(sys.argv[1:]); print(os.environ.get('OPENBLAS_NUM_THREADS'))"


def _entry_setting(path, env_extra) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", _SHOW, "count", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[-1]


def test_the_entry_sets_one_openblas_thread_unless_told_otherwise(tmp_path):
    path = tmp_path / "few.tfrecord"
    write_records(str(path), [b"a", b"b"])
    assert _entry_setting(path, {}) == "1"
    assert _entry_setting(path, {"OPENBLAS_NUM_THREADS": "3"}) == "3"  # the user's choice stays
