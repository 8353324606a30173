"""Planned jobs (unshuffled reshard, mix, build_index) run in memory that does not grow with
the data: each runs on an input several times larger than a budget, and the peak RSS of the
largest process of the tree (sampled from /proc; main and multi_processing workers alike) may
exceed that of a run on an input of the budget's size by less than the budget (a job that held its data would grow by 4x the budget at least). Also: exactly-once and order, and corrupt inputs named with record and offset.

The baseline (the small-input run) is one per runner for the module (`baseline`), from mix, the
job that keeps the most fixed-size buffers: Beam, the runner's workers and the buffers cost
the same whatever the input, and multi_processing start-ups are the slow part (as in
test_pipelines_memory.py). Each measurement starts from a trimmed heap, so memory an earlier
test's job left free in this process does not count as growth."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from helpers.jobs import FAST, MULTI, entries, run_job, summary_json
from helpers.rss import MiB, largest_while

from pipelines import build_index, mix, reshard
from tfrecord_beam.index import build_index as index_of
from tfrecord_beam.index import load_index, verify_index
from tfrecord_beam.records import RecordReader, RecordWriter

BUDGET = 32 * MiB
BIG_BYTES = 5 * BUDGET  # the input is 5x the budget
SMALL_BYTES = BUDGET  # the baseline: big enough for every fixed-size buffer, so only growth is left
RUNNERS = pytest.mark.parametrize("runner", [FAST, MULTI], ids=["fnapi", "multi"])


def _write_inputs(directory: Path, total: int, files: int, seed: int, max_payload: int = 32 << 10) -> List[Path]:
    """`files` files of random payloads (1 B .. max_payload) adding up to about `total` bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for k in range(files):
        path = directory / f"in-{k}.tfrecord"
        written = 0
        with RecordWriter(str(path)) as writer:
            while written < total // files:
                sizes = rng.integers(1, max_payload, 256)
                blob = rng.bytes(int(sizes.sum()))
                ends = np.cumsum(sizes)
                writer.write_many([blob[e - s : e] for s, e in zip(sizes.tolist(), ends.tolist())])
                written += int(sizes.sum())
        out.append(path)
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounded")
    big = _write_inputs(root / "big", BIG_BYTES, 3, 1)
    small = _write_inputs(root / "small", SMALL_BYTES, 3, 2)
    yield big, small
    shutil.rmtree(root, ignore_errors=True)  # ~190 MB: not left in the temp dir if another test fails


def _mix_job(files, out_dir: Path, total: int, runner, capsys) -> dict:
    """mix of `files` (1 part the first file, 2 parts the others) into 3 shards under `out_dir`."""
    code, out, err = run_job(
        mix.main,
        [
            "--source",
            f"{files[0]}=1",
            "--source",
            f"{files[1].parent}/in-[12].tfrecord=2",
            "--total_records",
            str(total),
            "--output_prefix",
            str(out_dir / "m"),
            "--num_shards",
            "3",
            "--seed",
            "4",
            "--shuffle_buffer_bytes",  # runs and buckets of 4 MiB: well under the budget
            str(4 * MiB),
        ]
        + runner,
        capsys,
    )
    assert code == 0, err
    return summary_json(out)


@pytest.fixture(scope="module")
def baseline(inputs, tmp_path_factory):
    """`baseline(runner, capsys)`: the largest process's peak RSS of mix on the small input on
    that runner, run once per runner for the module."""
    _, small = inputs
    root = tmp_path_factory.mktemp("baseline")
    n_small = sum(len(index_of(str(f))) for f in small)
    peaks: Dict[str, int] = {}

    def measure(runner, capsys) -> int:
        key = " ".join(runner)
        if key not in peaks:
            out_dir = root / f"run-{len(peaks)}"
            peaks[key] = largest_while(lambda: _mix_job(small, out_dir, n_small, runner, capsys))
            shutil.rmtree(out_dir, ignore_errors=True)
        return peaks[key]

    yield measure
    shutil.rmtree(root, ignore_errors=True)


def _growth(baseline, runner, capsys, run_big) -> int:
    """How much higher the largest process peaks while `run_big` runs than in the baseline."""
    small = baseline(runner, capsys)
    return largest_while(run_big) - small


def _stream_hash(paths, payloads_of=lambda p: RecordReader(str(p))) -> str:
    """A hash of the records of `paths` in order (streamed: constant memory)."""
    h = hashlib.blake2b()
    for p in paths:
        for payload in payloads_of(p):
            h.update(len(payload).to_bytes(8, "little"))
            h.update(payload)
    return h.hexdigest()


@RUNNERS
def test_reshard_streams_in_bounded_memory_and_keeps_order(inputs, baseline, tmp_path, capsys, runner):
    big, _ = inputs

    def job(files, name):
        code, out, err = run_job(
            reshard.main,
            [
                "--input",
                str(files[0].parent / "*.tfrecord"),
                "--output_prefix",
                str(tmp_path / name / "r"),
                "--num_shards",
                "4",
            ]
            + runner,
            capsys,
        )
        assert code == 0, err
        return summary_json(out)

    growth = _growth(baseline, runner, capsys, lambda: job(big, "b"))
    assert growth < BUDGET, f"peak RSS grew by {growth / MiB:.0f} MiB on a {BIG_BYTES / MiB:.0f} MiB input"
    shards = sorted((tmp_path / "b").glob("r-*-of-00004.tfrecord"))
    assert len(shards) == 4
    assert _stream_hash(shards) == _stream_hash(big)  # exactly once, in input order
    counts = [len(load_index(str(s).replace(".tfrecord", ".tfindex"))) for s in shards]
    assert max(counts) - min(counts) <= 1
    verify_index(str(shards[1]).replace(".tfrecord", ".tfindex"), str(shards[1]))


def _damaged_copies(files, directory: Path) -> List[Path]:
    """Copies of `files` with a corrupt payload in the middle of the first and garbage between
    two records in the middle of the second (the rest as they are)."""
    directory.mkdir()
    out = []
    for k, f in enumerate(files):
        raw = bytearray(f.read_bytes())
        offsets = index_of(str(f))[:, 0]
        middle = int(offsets[len(offsets) // 2])
        if k == 0:
            raw[middle + 20] ^= 0x40
        elif k == 1:
            raw[middle:middle] = b"garbage between records"
        (directory / f.name).write_bytes(bytes(raw))
        out.append(directory / f.name)
    return out


def _skipping_hash(paths) -> str:
    """`_stream_hash` of what a streaming reader with skipping reads."""
    from tfrecord_beam.records import ReadSpan
    from tfrecord_beam.skipping import SkippingReader

    def payloads_of(p):
        reader = SkippingReader(str(p), ReadSpan(None), open_file=lambda: open(p, "rb"), skip_corrupt=True)
        return (payload for chunk in reader.chunks() for payload in chunk.payloads())

    return _stream_hash(paths, payloads_of)


def test_reshard_skip_corrupt_in_bounded_memory(inputs, baseline, tmp_path, capsys):
    """--skip_corrupt takes the planned path too: no shard is held in memory."""
    big = _damaged_copies(inputs[0], tmp_path / "big_in")

    def job(files, name):
        code, out, err = run_job(
            reshard.main,
            [
                "--input",
                str(files[0].parent / "*.tfrecord"),
                "--output_prefix",
                str(tmp_path / name / "r"),
                "--num_shards",
                "2",
                "--skip_corrupt",
            ]
            + FAST,
            capsys,
        )
        assert code == 0, err
        assert summary_json(out)["corrupt_records"] == 2
        return summary_json(out)

    growth = _growth(baseline, FAST, capsys, lambda: job(big, "b"))
    assert growth < BUDGET, f"peak RSS grew by {growth / MiB:.0f} MiB on a {BIG_BYTES / MiB:.0f} MiB input"
    shards = sorted((tmp_path / "b").glob("r-*-of-00002.tfrecord"))
    assert _stream_hash(shards) == _skipping_hash(big)  # the intact records, exactly once, in input order


@RUNNERS
def test_build_index_in_bounded_memory(inputs, baseline, tmp_path, capsys, runner):
    big, _ = inputs

    def job(files, out_dir):
        code, out, err = run_job(
            build_index.main,
            ["--input", str(files[0].parent / "*.tfrecord"), "--output_dir", str(out_dir)] + runner,
            capsys,
        )
        assert code == 0, err

    growth = _growth(baseline, runner, capsys, lambda: job(big, tmp_path / "b"))
    assert growth < BUDGET, f"peak RSS grew by {growth / MiB:.0f} MiB on a {BIG_BYTES / MiB:.0f} MiB input"
    for f in big:
        assert np.array_equal(
            load_index(str(tmp_path / "b" / f.name.replace(".tfrecord", ".tfindex"))), index_of(str(f))
        )


@RUNNERS
def test_mix_in_bounded_memory(inputs, baseline, tmp_path, capsys, runner):
    big, _ = inputs
    n_big = sum(len(index_of(str(f))) for f in big)
    growth = _growth(baseline, runner, capsys, lambda: _mix_job(big, tmp_path / "b", n_big, runner, capsys))
    assert growth < BUDGET, f"peak RSS grew by {growth / MiB:.0f} MiB on a {BIG_BYTES / MiB:.0f} MiB input"
    out = sorted((tmp_path / "b").glob("m-*.tfrecord"))
    assert sum(len(load_index(str(s).replace(".tfrecord", ".tfindex"))) for s in out) == n_big


def test_corrupt_payload_is_named_with_record_and_offset(inputs, tmp_path, capsys):
    _, small = inputs
    data = tmp_path / "in"
    data.mkdir()
    raw = bytearray(small[0].read_bytes())
    index = index_of(str(small[0]))
    victim = len(index) // 2
    raw[int(index[victim, 0]) + 20] ^= 0x40  # inside its payload: only the copy's CRC check sees it
    (data / "bad.tfrecord").write_bytes(bytes(raw))
    (data / "good.tfrecord").write_bytes(small[1].read_bytes())
    out = tmp_path / "out"
    code, _, err = run_job(
        reshard.main,
        ["--input", str(data / "*.tfrecord"), "--output_prefix", str(out / "r"), "--num_shards", "3"] + FAST,
        capsys,
    )
    assert code == 1
    assert "bad.tfrecord" in err and f"record {victim}" in err and f"byte offset {index[victim, 0]}" in err
    assert "payload CRC" in err
    assert entries(out) == []


def test_progress_lines_while_a_job_runs(inputs, tmp_path, capsys, monkeypatch):
    import re

    from tfrecord_beam.beam import _progress

    monkeypatch.setattr(_progress, "INTERVAL_S", 0.1)
    _, small = inputs
    code, _, err = run_job(
        reshard.main,
        [
            "--input",
            str(small[0].parent / "*.tfrecord"),
            "--output_prefix",
            str(tmp_path / "o" / "r"),
            "--num_shards",
            "2",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    lines = re.findall(
        r"reshard: (?:surveying the inputs|writing 2 shards): [\d.,]+ \w?B of [\d.,]+ \w?B .*records, .*/s", err
    )
    assert lines, err
