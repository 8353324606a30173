"""Planned jobs (unshuffled reshard, mix, build_index) run in memory that does not grow with
the data (`helpers.scale`: each job on an input 6x a 32 MiB budget, its runner's process and,
on multi_processing, its SDK workers compared with a run on an input of the budget's size).
Also: exactly-once and order, and corrupt inputs named with record and offset.

The inputs and baselines are the session's (`scale` fixture, shared with
test_pipelines_memory.py): made once, read-only here."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import List

import numpy as np
from helpers.jobs import FAST, entries, run_job, summary_json
from helpers.scale import JOBS, RUNNERS

from pipelines import reshard
from tfrecord_beam.index import build_index as index_of
from tfrecord_beam.index import load_index, verify_index
from tfrecord_beam.records import RecordReader


def _stream_hash(paths, payloads_of=lambda p: RecordReader(str(p))) -> str:
    """A hash of the records of `paths` in order (streamed: constant memory)."""
    h = hashlib.blake2b()
    for p in paths:
        for payload in payloads_of(p):
            h.update(len(payload).to_bytes(8, "little"))
            h.update(payload)
    return h.hexdigest()


@RUNNERS
def test_reshard_streams_in_bounded_memory_and_keeps_order(scale, tmp_path, capsys, runner):
    big = scale.inputs.tfrecords("big")
    main, argv = JOBS["reshard"](scale.inputs, "big", tmp_path / "b")
    scale.bounded("reshard", runner, capsys, lambda: _ok(main, argv + runner, capsys))
    shards = sorted((tmp_path / "b").glob("r-*-of-00004.tfrecord"))
    assert len(shards) == 4
    assert _stream_hash(shards) == _stream_hash(big)  # exactly once, in input order
    counts = [len(load_index(str(s).replace(".tfrecord", ".tfindex"))) for s in shards]
    assert max(counts) - min(counts) <= 1
    verify_index(str(shards[1]).replace(".tfrecord", ".tfindex"), str(shards[1]))


def _ok(main, argv, capsys) -> dict:
    """Run a job here; its summary (it must succeed)."""
    code, out, err = run_job(main, argv, capsys)
    assert code == 0, err[-3000:]
    return summary_json(out)


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


def test_reshard_skip_corrupt_in_bounded_memory(scale, tmp_path, capsys):
    """--skip_corrupt takes the planned path too: no shard is held in memory (compared with
    reshard's baseline: the same stages, the survey reading every byte here)."""
    big = _damaged_copies(scale.inputs.tfrecords("big"), tmp_path / "big_in")
    summary = {}

    def job():
        argv = ["--input", str(big[0].parent / "*.tfrecord"), "--output_prefix", str(tmp_path / "b" / "r")]
        summary.update(_ok(reshard.main, argv + ["--num_shards", "2", "--skip_corrupt"] + FAST, capsys))

    scale.bounded("reshard", FAST, capsys, job)
    assert summary["corrupt_records"] == 2
    shards = sorted((tmp_path / "b").glob("r-*-of-00002.tfrecord"))
    assert _stream_hash(shards) == _skipping_hash(big)  # the intact records, exactly once, in input order


@RUNNERS
def test_build_index_in_bounded_memory(scale, tmp_path, capsys, runner):
    big = scale.inputs.tfrecords("big")
    main, argv = JOBS["build_index"](scale.inputs, "big", tmp_path / "b")
    scale.bounded("build_index", runner, capsys, lambda: _ok(main, argv + runner, capsys))
    for f in big:
        assert np.array_equal(
            load_index(str(tmp_path / "b" / f.name.replace(".tfrecord", ".tfindex"))), index_of(str(f))
        )


@RUNNERS
def test_mix_in_bounded_memory(scale, tmp_path, capsys, runner):
    main, argv = JOBS["mix"](scale.inputs, "big", tmp_path / "b")
    scale.bounded("mix", runner, capsys, lambda: _ok(main, argv + runner, capsys))
    out = sorted((tmp_path / "b").glob("m-*.tfrecord"))
    assert len(out) == 3
    assert sum(len(load_index(str(s).replace(".tfrecord", ".tfindex"))) for s in out) == scale.inputs.tfrecord_count(
        "big"
    )


def test_corrupt_payload_is_named_with_record_and_offset(scale, tmp_path, capsys):
    small = scale.inputs.tfrecords("small")
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


def test_progress_lines_while_a_job_runs(scale, tmp_path, capsys, monkeypatch):
    import re

    from tfrecord_beam.beam import _progress

    monkeypatch.setattr(_progress, "INTERVAL_S", 0.1)
    small = scale.inputs.tfrecords("small")
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
