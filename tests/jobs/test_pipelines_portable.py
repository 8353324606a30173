"""reshard end to end on PortableRunner: Beam's job service + an EXTERNAL worker pool.

The services fixture is the Beam IO tests' (`tests/beam/test_beam_runners.py`, from the beam
branch); this module skips only where that file is absent.
"""

import os
import sys
from collections import Counter

import pytest

runners = pytest.importorskip("test_beam_runners", reason="the PortableRunner fixture comes with the beam IO tests")
portable_services = runners.portable_services

# Beam's worker pool starts each SDK worker with the `python` found on PATH: make that this
# interpreter (a venv's python is often not on PATH, e.g. under `make test`).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

from helpers.jobs import entries, read_shards, run_job, summary_json, write_files  # noqa: E402

from pipelines import reshard  # noqa: E402


@pytest.mark.slow
def test_reshard_on_portable_runner(tmp_path, portable_services, capsys):
    job_port, pool_port = portable_services
    data = write_files(tmp_path / "in", "a", [300, 200])
    beam_flags = [
        "--runner=PortableRunner",
        f"--job_endpoint=localhost:{job_port}",
        "--environment_type=EXTERNAL",
        f"--environment_config=localhost:{pool_port}",
    ]
    code, out, err = run_job(
        reshard.main,
        [
            "--input",
            str(tmp_path / "in" / "*"),
            "--output_prefix",
            str(tmp_path / "out" / "p"),
            "--num_shards",
            "2",
            "--split_bytes",
            "8000",
            "--shuffle",
        ]
        + beam_flags,
        capsys,
    )
    assert code == 0, err
    assert Counter(p for s in read_shards(tmp_path / "out", "p-*.tfrecord") for p in s) == Counter(data)
    assert summary_json(out)["verified"].startswith("yes")
    assert not [e for e in entries(tmp_path / "out") if e.startswith(".")]


@pytest.mark.slow
def test_planned_reshard_on_portable_runner(tmp_path, portable_services, capsys):
    """The unshuffled (planned) reshard: surveys, plans and copies run in the worker pool; the
    job prints where to watch progress instead of progress lines."""
    job_port, pool_port = portable_services
    data = write_files(tmp_path / "in", "a", [300, 200])
    beam_flags = [
        "--runner=PortableRunner",
        f"--job_endpoint=localhost:{job_port}",
        "--environment_type=EXTERNAL",
        f"--environment_config=localhost:{pool_port}",
    ]
    code, out, err = run_job(
        reshard.main,
        ["--input", str(tmp_path / "in" / "*"), "--output_prefix", str(tmp_path / "out" / "p"), "--num_shards", "3"]
        + beam_flags,
        capsys,
    )
    assert code == 0, err
    assert [p for s in read_shards(tmp_path / "out", "p-*.tfrecord") for p in s] == data
    assert summary_json(out)["verified"].startswith("yes")
    assert "tfrecord_beam.progress" in err
