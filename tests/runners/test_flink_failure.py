"""A TaskManager dies in the middle of a reshard on the Flink cluster (issue 21, item 6): the
job fails (the cluster restarts nothing: restart-strategy none) or recovers, and a re-run of
the same command gives the exact output with nothing else left under the output or beside the
inputs. The killed TaskManager is started again afterwards (`runners/flink.sh start`), so the
tests after this one have two."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from typing import List

import pyarrow.fs as pafs
import pytest
from helpers import runner_matrix as rm

from tfrecord_beam import fs
from tfrecord_beam.example import encode_example
from tfrecord_beam.records import write_records

FLINK = [n for n in rm.runner_names() if n == "flink"]


def _rest(runner: rm.Runner, path: str) -> dict:
    with urllib.request.urlopen(runner.env["FLINK_REST"] + path, timeout=10) as answer:
        return json.load(answer)


def _running_jobs(runner: rm.Runner) -> List[str]:
    return [j["jid"] for j in _rest(runner, "/jobs/overview")["jobs"] if j["state"] == "RUNNING"]


def _flink_sh(runner: rm.Runner, *args: str) -> None:
    bucket = runner.env["S3_PREFIX"].split("/")[2]
    env = dict(os.environ, FLINK_S3_BUCKET=bucket)
    proc = subprocess.run(
        ["bash", str(rm.SCRIPTS / "flink.sh"), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def _all_names(base: str) -> List[str]:
    """Every object under an s3:// prefix, relative to it."""
    filesystem, inner = fs._split_uri(base)
    infos = filesystem.get_file_info(pafs.FileSelector(inner, recursive=True))
    return sorted(i.path[len(inner) + 1 :] for i in infos if i.type == pafs.FileType.File)


@pytest.mark.parametrize("name", FLINK)
def test_taskmanager_killed_mid_reshard(name, tmp_path):
    runner = rm.load_runner(name)
    place = rm.Place.for_runner(runner, tmp_path)
    inputs = [place.path("in", f"x-{k}.tfrecord") for k in range(6)]
    data: List[bytes] = []
    for k, path in enumerate(inputs):
        chunk = [encode_example({"i": i, "pad": bytes([i % 251]) * 16384}) for i in range(1000 * k, 1000 * k + 150)]
        write_records(path, chunk)
        data += chunk
    args = ["--input", place.path("in"), "--output_prefix", place.path("out", "r"), "--num_shards", "4"]
    args += ["--split_bytes", "300000"]
    env = dict(os.environ, PYTHONPATH=str(rm.ROOT))
    env.update({k: v for k, v in runner.env.items() if k.startswith(("AWS_", "S3_"))})
    job = subprocess.Popen(
        [runner.python, "-m", "pipelines.reshard", *args, *runner.flags],
        cwd=rm.ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = False
    try:
        deadline = time.monotonic() + 600
        while not _running_jobs(runner):
            assert job.poll() is None, f"the job ended before Flink ran it:\n{job.communicate()[1][-4000:]}"
            assert time.monotonic() < deadline, "no Flink job RUNNING after 600 s"
            time.sleep(0.2)
        time.sleep(3)  # its tasks deployed and reading
        assert _running_jobs(runner), "the job finished before a TaskManager could be killed"
        _flink_sh(runner, "kill-taskmanager", "1")
        killed = True
        out, err = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
        if killed:
            _flink_sh(runner, "start")  # the killed TaskManager comes back (two again)
    assert killed
    manifest_file = place.path("out", "r.manifest.json")
    if job.returncode != 0:
        # failed: nothing committed
        assert not fs.exists(manifest_file), err[-4000:]
        rerun = rm.launch(runner, "reshard", args)
    else:
        # recovered: its output is exact; the re-run replaces it
        rm.check_committed(place, "out", "r", len(data), rm.input_digest(inputs))
        rerun = rm.launch(runner, "reshard", args + ["--overwrite"])
    assert rerun.code == 0, rerun.err[-6000:]
    rm.check_committed(place, "out", "r", len(data), rm.input_digest(inputs))
    assert [p for s in rm.payloads_of(place, "out", "r") for p in s] == data  # input order, once each
    names = _all_names(place.base)
    outputs = ["out/" + n for n in place.names("out")]
    assert names == sorted([f"in/x-{k}.tfrecord" for k in range(6)] + outputs), names  # no staging, no temp
    assert len(_rest(runner, "/taskmanagers")["taskmanagers"]) == 2
