"""helpers/sdk_workers.py: the SDK workers of a multi_processing job run in the test process are
forked from the zygote (helpers/zygote.py) and do the job's work; Beam's own handling of a worker
(its wait, the RuntimeError of a non-zero exit, where its output goes) is unchanged; a test
marked `fresh_sdk_workers` gets Beam's fresh interpreters (proven where the marker is used:
tests/beam/test_beam_runners.py's multi_processing test, which runs 2 fresh workers anyway);
`helpers.rss.job_peaks` finds the forked workers."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from helpers import sdk_workers, zygote
from helpers.fixtures import REPO
from helpers.jobs import MULTI

beam = pytest.importorskip("apache_beam")


def _run_pipeline(out: Path) -> None:
    """A multi_processing job of 40 elements on 2 workers: each element leaves a file named for
    it that holds the pid of the process that handled it and its parent's."""
    from apache_beam.options.pipeline_options import PipelineOptions

    out.mkdir()
    where = str(out)

    def mark(x):
        import os

        with open(os.path.join(where, str(x)), "w") as f:
            f.write(f"{os.getpid()} {os.getppid()}")
        return x

    with beam.Pipeline(options=PipelineOptions(MULTI)) as p:
        _ = p | beam.Create(list(range(40)), reshuffle=True) | beam.Map(mark)


def _handlers(out: Path) -> dict:
    """{element: (pid, parent pid)} of the elements handled."""
    return {int(f.name): tuple(int(n) for n in f.read_text().split()) for f in out.iterdir()}


def test_a_multi_processing_jobs_workers_are_forked_and_do_the_work(tmp_path, monkeypatch):
    from helpers.rss import job_peaks

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    before = sdk_workers.forked()
    peaks = job_peaks(lambda: _run_pipeline(tmp_path / "out"))
    forked = sdk_workers.forked() - before
    handled = _handlers(tmp_path / "out")
    assert sorted(handled) == list(range(40))  # every element, once
    pids = {pid for pid, _ in handled.values()}
    assert len(forked) == 2 and pids <= forked, (forked, pids)  # the work ran in the forked workers
    assert {parent for _, parent in handled.values()} == {zygote.zygote_pid()}  # the zygote's children
    # job_peaks finds them though they are the zygote's children: 2 workers, both forked
    assert peaks.workers == peaks.forked == 2 and peaks.worker > 0


def _worker(plugin: str) -> object:
    """Beam's SubprocessSdkWorker for the multi_processing command, with `plugin` as a beam
    plugin (imported by the worker before it connects anywhere)."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability import local_job_service
    from google.protobuf import struct_pb2

    options = struct_pb2.Struct()
    options.update({"beam:option:beam_plugins:v1": [plugin]})
    info = types.SimpleNamespace(provision_info=beam_provision_api_pb2.ProvisionInfo(pipeline_options=options))
    return local_job_service.SubprocessSdkWorker(sdk_workers.COMMAND.encode(), "localhost:1", info, "worker-7")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_a_worker_that_fails_raises_as_beams_would(fork, tmp_path, monkeypatch, capfd):
    """The worker's exit code is Beam's RuntimeError either way, and its output goes to this
    process's stdout and stderr (capfd reads the fds), as an inherited worker's does."""
    (tmp_path / "quit7.py").write_text(
        "import os, sys\n"
        "print('out of', os.environ['WORKER_ID'], flush=True)\n"
        "print('err of', os.environ['WORKER_ID'], file=sys.stderr, flush=True)\n"
        "sys.exit(7)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(sdk_workers, "enabled", fork)
    before = sdk_workers.forked()
    with pytest.raises(RuntimeError, match="^Worker subprocess exited with return code 7$"):
        _worker("quit7").run()  # type: ignore[attr-defined]
    assert len(sdk_workers.forked() - before) == (1 if fork else 0)
    out, err = capfd.readouterr()
    assert "out of worker-7\n" in out and "err of worker-7\n" in err


def test_a_startup_variable_falls_back_to_beams_popen(tmp_path, monkeypatch):
    """An environment the zygote cannot give (a start-up variable differs) gets Beam's own worker."""
    (tmp_path / "quit7.py").write_text("import sys\nsys.exit(7)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTHONHASHSEED", "3")
    before, fallbacks = sdk_workers.forked(), sdk_workers.fallbacks
    with pytest.raises(RuntimeError, match="return code 7"):
        _worker("quit7").run()  # type: ignore[attr-defined]
    assert sdk_workers.forked() == before and sdk_workers.fallbacks == fallbacks + 1
