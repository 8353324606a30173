"""Every job on every runner of the matrix, output verified (issue 21 item 6): build_index,
reshard, reshard --shuffle, mix, parquet_to_tfrecord, tfrecord_to_parquet and reshard
--skip_corrupt over damaged input. Each output is committed (manifest counts and checksums
match the input, every shard read in full) and nothing else is left beside it; where the job
is deterministic (unshuffled reshard, mix, dead letters) the output equals the FnApiRunner's.

The inputs are written once per place (a local directory, or the runner's S3_PREFIX) and only
read; each job writes to its own directory."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from typing import Dict, List, Tuple

import pyarrow.parquet as pq
import pytest
from helpers import runner_matrix as rm
from helpers.jobs import payloads
from helpers.runner_data import Data

from tfrecord_beam import digest, fs
from tfrecord_beam import manifest as mf
from tfrecord_beam._tfindex import default_index_path
from tfrecord_beam.example import decode_example
from tfrecord_beam.index import verify_index

_DATA: Dict[str, Data] = {}


@pytest.fixture(scope="session")
def data_for(tmp_path_factory):
    def get(runner: rm.Runner) -> Data:
        key = runner.remote_data or "local"
        if key not in _DATA:
            base = tmp_path_factory.mktemp("inputs")
            _DATA[key] = Data(rm.Place.for_runner(runner, base))
        return _DATA[key]

    return get


@pytest.fixture
def place(runner, tmp_path) -> rm.Place:
    return rm.Place.for_runner(runner, tmp_path)


#: what the FnApiRunner produced, per job (its own column fills it; others run it if missing)
_REFERENCE = rm.References()


def _on_fnapi(tmp_path_factory, data_for, job: str, args) -> rm.Place:
    """Where JOB's output is after running it on the FnApiRunner over its local copy of the
    inputs; args(data, place) -> argv."""
    fn = rm.load_runner(rm.FNAPI)
    fn_data = data_for(fn)
    fn_place = rm.Place(str(tmp_path_factory.mktemp(f"fnapi-{job}")))
    _ok(rm.launch(fn, job, args(fn_data, fn_place)))
    return fn_place


def _ok(run: rm.JobRun) -> dict:
    assert run.code == 0, f"exit {run.code}\nstdout:\n{run.out[-2000:]}\nstderr:\n{run.err[-6000:]}"
    return run.summary()


def _check_runner_line(runner: rm.Runner, summary: dict) -> None:
    """The summary names the runner that ran: Prism where Prism was asked for (DirectRunner
    with a Prism binary picks it), the FnApiRunner on fnapi, Flink and Spark behind their job
    services (asked for as PortableRunner)."""
    expected = {
        "fnapi": "FnApiRunner",
        "prism": "PrismRunner",
        "direct-prism": "PrismRunner",
        "flink": "FlinkRunner",
        "spark": "SparkRunner",
    }.get(runner.name)
    if expected:
        assert summary["runner"] == expected, summary


def test_build_index(runner, data_for, place, timed):
    data = data_for(runner)
    run = timed(
        runner,
        "build_index",
        rm.launch(runner, "build_index", ["--input", data.place.path("tf"), "--output_dir", place.path("idx")]),
    )
    summary = _ok(run)
    _check_runner_line(runner, summary)
    names = place.names("idx")
    wanted = sorted(default_index_path(p).rsplit("/", 1)[-1] for p in data.tf)
    assert names == wanted, names  # an index per input, no temporary files
    for path in data.tf:
        verify_index(place.path("idx", default_index_path(path).rsplit("/", 1)[-1]), path)
    assert data.place.names("tf") == sorted(p.rsplit("/", 1)[-1] for p in data.tf)  # nothing written beside the inputs


def _reshard_args(data, place) -> List[str]:
    out = place.path("out", "r")
    return ["--input", data.place.path("tf"), "--output_prefix", out, "--num_shards", "3", "--split_bytes", "9000"]


def _reshard(runner, data, place, *extra) -> Tuple[dict, rm.JobRun]:
    args = _reshard_args(data, place)
    run = rm.launch(runner, "reshard", args + list(extra), {"TFRECORD_BEAM_PROGRESS_INTERVAL": "0.2"})
    return _ok(run), run


def _check_progress(runner: rm.Runner, run: rm.JobRun) -> None:
    """Progress lines on stderr where the workers share the launcher's machine (the FnApiRunner;
    Prism's LOOPBACK workers run in the launching process), else the line saying where to watch."""
    lines = [line for line in run.err.splitlines() if "reshard: " in line]
    if runner.name in ("fnapi", "prism", "direct-prism"):
        assert any(" of " in line and "records" in line for line in lines), run.err[-3000:]
    else:
        assert any("tfrecord_beam.progress" in line and "watch" in line for line in lines), run.err[-3000:]


def test_reshard(runner, data_for, place, timed, tmp_path_factory):
    data = data_for(runner)
    summary, run = _reshard(runner, data, place)
    timed(runner, "reshard", run)
    _check_runner_line(runner, summary)
    _check_progress(runner, run)
    rm.check_committed(place, "out", "r", len(data.tf_payloads), rm.input_digest(data.tf))
    shards = rm.payloads_of(place, "out", "r")
    assert [p for s in shards for p in s] == data.tf_payloads  # unshuffled: the input order

    def fnapi_shards():
        fn_place = _on_fnapi(tmp_path_factory, data_for, "reshard", _reshard_args)
        return rm.payloads_of(fn_place, "out", "r")

    assert shards == _REFERENCE.get("reshard", runner, shards, fnapi_shards)
    assert summary["verified"].startswith("yes")


def test_reshard_shuffle(runner, data_for, place, timed):
    data = data_for(runner)
    summary, run = _reshard(runner, data, place, "--shuffle", "--seed", "3")
    timed(runner, "reshard --shuffle", run)
    _check_runner_line(runner, summary)
    rm.check_committed(place, "out", "r", len(data.tf_payloads), rm.input_digest(data.tf))
    flat = [p for s in rm.payloads_of(place, "out", "r") for p in s]
    assert Counter(flat) == Counter(data.tf_payloads) and flat != data.tf_payloads


def _mix_args(data, place) -> List[str]:
    args = ["--source", data.place.path("tf", "*") + "=0.7", "--source", data.place.path("b", "*") + "=0.3"]
    return args + [
        "--total_records",
        "400",
        "--num_shards",
        "3",
        "--seed",
        "5",
        "--output_prefix",
        place.path("out", "m"),
    ]


def test_mix(runner, data_for, place, timed, tmp_path_factory):
    data = data_for(runner)
    args = _mix_args(data, place)
    summary = _ok(timed(runner, "mix", rm.launch(runner, "mix", args)))
    _check_runner_line(runner, summary)
    rm.check_committed(place, "out", "m", 400, also=["m.manifest.json"])  # mix's own manifest too
    shards = rm.payloads_of(place, "out", "m")
    flat = [p for s in shards for p in s]
    assert Counter(int(decode_example(p)["tag"][0]) for p in flat) == {1: 280, 2: 120}
    assert set(flat) <= set(data.tf_payloads) | set(payloads(40, tag=2))

    def fnapi_shards():
        fn_place = _on_fnapi(tmp_path_factory, data_for, "mix", _mix_args)
        return rm.payloads_of(fn_place, "out", "m")

    # a pure function of the seed and the inputs, on every runner and Beam version
    assert shards == _REFERENCE.get("mix", runner, shards, fnapi_shards)


def test_parquet_to_tfrecord(runner, data_for, place, timed):
    data = data_for(runner)
    args = ["--input", data.parquet, "--output_prefix", place.path("out", "t"), "--num_shards", "2"]
    summary = _ok(timed(runner, "parquet_to_tfrecord", rm.launch(runner, "parquet_to_tfrecord", args)))
    _check_runner_line(runner, summary)
    rm.check_committed(place, "out", "t", len(data.rows["id"]))
    rows = Counter()
    for shard in rm.payloads_of(place, "out", "t"):
        for payload in shard:
            ex = decode_example(payload)
            rows[(int(ex["id"][0]), ex["text"].decode(), float(ex["score"][0]))] += 1  # one bytes value: bytes
    assert rows == Counter(zip(data.rows["id"], data.rows["text"], data.rows["score"]))


def test_tfrecord_to_parquet(runner, data_for, place, timed):
    data = data_for(runner)
    args = ["--input", data.place.path("tf"), "--output_prefix", place.path("out", "p"), "--num_shards", "2"]
    summary = _ok(timed(runner, "tfrecord_to_parquet", rm.launch(runner, "tfrecord_to_parquet", args)))
    _check_runner_line(runner, summary)
    manifest = rm.check_committed(place, "out", "p", len(data.tf_payloads))
    manifest_file = place.path("out", mf.manifest_name("p"))
    got = Counter()
    for path in mf.shard_paths(manifest, manifest_file):
        with fs.open_input(path) as handle:
            table = pq.read_table(handle)
        for i, tag, pad in zip(*(table.column(c).to_pylist() for c in ("i", "tag", "pad"))):
            got[(_scalar(i), _scalar(tag), _scalar(pad))] += 1
    want = Counter()
    for payload in data.tf_payloads:
        ex = decode_example(payload)
        want[(int(ex["i"][0]), int(ex["tag"][0]), ex["pad"])] += 1
    assert got == want


def _scalar(value):
    """A Parquet cell of an Example feature: a scalar, or a one-element list."""
    return value[0] if isinstance(value, list) else value


def _dead_letters(place: rm.Place, out: str, name: str) -> List[tuple]:
    with fs.open_input(place.path(out, mf.dead_letter_name(name))) as handle:
        lines = handle.read().decode().splitlines()
    return sorted((e["file"].rsplit("/", 1)[-1], e["offset"], e["reason"]) for e in map(json.loads, lines))


def _skip_args(data, place) -> List[str]:
    return ["--input", data.bad_dir, "--output_prefix", place.path("out", "s"), "--num_shards", "2", "--skip_corrupt"]


def test_reshard_skip_corrupt(runner, data_for, place, timed, tmp_path_factory):
    data = data_for(runner)
    args = _skip_args(data, place)
    summary = _ok(timed(runner, "reshard --skip_corrupt", rm.launch(runner, "reshard", args)))
    _check_runner_line(runner, summary)
    manifest = rm.check_committed(place, "out", "s", len(data.bad_kept), digest.payload_digest(data.bad_kept))
    assert [p for s in rm.payloads_of(place, "out", "s") for p in s] == data.bad_kept
    letters = _dead_letters(place, "out", "s")
    assert len(letters) == manifest.corrupt_records == summary["corrupt_records"] >= 2

    def fnapi_letters():
        fn_place = _on_fnapi(tmp_path_factory, data_for, "reshard", _skip_args)
        return _dead_letters(fn_place, "out", "s")

    assert letters == _REFERENCE.get("skip_corrupt", runner, letters, fnapi_letters)


def test_launcher_terminated_mid_job_leaves_nothing(runner, data_for, place):
    """SIGTERM to the launcher while its job runs (a scheduler's timeout, a cancelled CI run):
    exit 143 with one line, the job cancelled on the runner's job service, and nothing under
    the output, then or after the runner let go of the job: no manifest, no shard, no staging."""
    data = data_for(runner)
    args = _reshard_args(data, place)
    local = runner.name in ("fnapi", "prism", "direct-prism")
    with rm.launching(runner, "reshard", args, {"TFRECORD_BEAM_PROGRESS_INTERVAL": "0.1"}) as (cmd, env, _):
        job = subprocess.Popen(cmd, cwd=rm.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err: List[str] = []
        reader = threading.Thread(target=lambda: err.extend(job.stderr), daemon=True)
        reader.start()
        deadline = time.monotonic() + 600
        # running: a progress line (in-process workers), else the line saying where to watch, then a while
        while not any(("reshard: " in line and (" of " in line if local else "watch" in line)) for line in err):
            assert job.poll() is None, "".join(err)[-3000:]
            assert time.monotonic() < deadline, "the job never started: " + "".join(err)[-3000:]
            time.sleep(0.05)
        if not local:
            time.sleep(15)  # submitted and running on the cluster
        assert job.poll() is None, "the job ended before it could be stopped"
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=300)
        reader.join(10)
    lines = [line.rstrip("\n") for line in err]
    assert code == 143, lines[-20:]
    assert lines[-1] == "reshard: terminated (SIGTERM); the output was not committed", lines[-5:]
    assert place.names("out") == []
    if "FLINK_REST" in runner.env:  # the job was cancelled, not left running
        deadline = time.monotonic() + 120
        while _flink_jobs_running(runner):
            assert time.monotonic() < deadline, "the Flink job still runs 120 s after its launcher stopped"
            time.sleep(1)
        assert place.names("out") == []  # nothing written by a worker after the launcher left


def _flink_jobs_running(runner: rm.Runner) -> List[str]:
    with urllib.request.urlopen(runner.env["FLINK_REST"] + "/jobs/overview", timeout=10) as answer:
        return [j["jid"] for j in json.load(answer)["jobs"] if j["state"] in ("RUNNING", "CANCELLING", "CREATED")]
