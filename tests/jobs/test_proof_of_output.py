"""The proof covers what was written: a shard writer that drops or doubles a chunk, or a shard
cut short after it was written, fails the job before its commit, naming the shard, and nothing
is committed (in-process, FnApiRunner: the patches reach the workers)."""

import os
import re
from pathlib import Path

import pytest
from helpers.jobs import FAST, entries, write_files

from pipelines import _common, mix, reshard
from tfrecord_beam.digest import payload_digest
from tfrecord_beam.records import RecordWriter

SHARD = re.compile(r"part-0000\d-of-00002\.tfrecord")


def _reshard(tmp_path, *extra):
    return reshard.main(
        ["--input", str(tmp_path / "in" / "*.tfrecord"), "--output_prefix", str(tmp_path / "out" / "part")]
        + ["--num_shards", "2", *extra]
        + FAST
    )


def _mix(tmp_path):
    return mix.main(
        ["--source", f"{tmp_path / 'in'}/*.tfrecord=1", "--total_records", "60"]
        + ["--output_prefix", str(tmp_path / "out" / "part"), "--num_shards", "2"]
        + FAST
    )


def _committed_nothing(out: Path) -> None:
    left = entries(out)
    assert not [n for n in left if SHARD.fullmatch(n) or n.startswith("_MANIFEST")], left
    assert not [n for n in left if n.startswith(".")], left  # the staging is gone too


def _calls(monkeypatch, change):
    """Patch RecordWriter.write_framed: `change(original, writer, framed, sizes, call)` per call."""
    original = RecordWriter.write_framed
    count = [0]

    def patched(self, framed, sizes):
        count[0] += 1
        change(original, self, framed, sizes, count[0])

    monkeypatch.setattr(RecordWriter, "write_framed", patched)


def _drop_second(original, writer, framed, sizes, call):
    if call != 2:  # the second chunk handed to any writer is lost
        original(writer, framed, sizes)


def _double_first(original, writer, framed, sizes, call):
    original(writer, framed, sizes)
    if call == 1:  # the first chunk is written twice
        original(writer, framed, sizes)


JOBS = {
    "reshard": lambda tmp_path: _reshard(tmp_path),
    "reshard --shuffle": lambda tmp_path: _reshard(tmp_path, "--shuffle", "--seed", "3"),
    "mix": _mix,
}


@pytest.mark.parametrize("break_", [_drop_second, _double_first], ids=["drops", "doubles"])
@pytest.mark.parametrize("job", sorted(JOBS))
def test_a_writer_that_loses_or_doubles_a_chunk_fails_the_job(tmp_path, capsys, monkeypatch, job, break_):
    write_files(tmp_path / "in", "a", [40, 20, 30])  # three files: three pieces / chunks per job
    _calls(monkeypatch, break_)
    code = JOBS[job](tmp_path)
    err = capsys.readouterr().err
    assert code == 1, err
    line = [t for t in err.splitlines() if "error:" in t][-1]
    assert SHARD.search(line), line  # the shard is named
    meant, wrote = re.search(r"meant to write (\d+) records.*its writer wrote (\d+) records", line).groups()
    assert (int(wrote) < int(meant)) if break_ is _drop_second else (int(wrote) > int(meant)), line
    _committed_nothing(tmp_path / "out")


def test_a_shard_cut_short_before_the_commit_is_not_committed(tmp_path, capsys, monkeypatch):
    write_files(tmp_path / "in", "a", [40, 20])
    original = _common.commit_shards

    def truncate_then_commit(staged, spec, results, *args, **kwargs):
        victim = spec.path(results[1]["name"])
        with open(victim, "r+b") as handle:
            handle.truncate(os.path.getsize(victim) - 5)  # the disk lost its tail after the writer closed
        return original(staged, spec, results, *args, **kwargs)

    monkeypatch.setattr(_common, "commit_shards", truncate_then_commit)
    code = _reshard(tmp_path)
    err = capsys.readouterr().err
    assert code == 1, err
    line = [t for t in err.splitlines() if "error:" in t][-1]
    assert "part-00001-of-00002.tfrecord" in line and "not committed" in line, line
    size, wrote = re.search(r"(\d+) bytes in staging, its writer wrote (\d+) bytes", line).groups()
    assert int(size) == int(wrote) - 5, line
    _committed_nothing(tmp_path / "out")


@pytest.mark.parametrize("kind", [None, "gzip", "zlib", "zstd"])
@pytest.mark.parametrize("index", [False, True])  # gzip with an index: block-gzip
def test_writer_digest_and_file_bytes_are_of_what_it_wrote(tmp_path, kind, index):
    data = [bytes([i % 251]) * (i * 37 % 3000) for i in range(300)]
    path = str(tmp_path / "x.tfrecord")
    writer = RecordWriter(path, kind, index_path=index or None)
    for p in data[:100]:
        writer.write(p)
    assert writer.digest == payload_digest(data[:100])  # buffered frames count too
    writer.write_many(data[100:200])
    for p in data[200:]:
        writer.write(p)
    writer.close()
    assert writer.digest == payload_digest(data)
    assert writer.file_bytes == os.path.getsize(path) > 0
