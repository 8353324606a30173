"""The proof covers what was written: a shard writer that drops or doubles a chunk, or a shard
cut short after it was written, fails the job before its commit, naming the shard, and nothing
is committed; likewise build_index's index stream that drops, doubles or reorders a chunk of
entries, or an index cut short after it was written, fails the job naming the index and its data
file, and that index is not put in place (in-process, FnApiRunner: the patches reach the
workers)."""

import os
import re
from pathlib import Path

import pytest
from helpers.jobs import FAST, entries, write_files

from pipelines import _common, build_index, mix, reshard
from tfrecord_beam import blockgzip
from tfrecord_beam._tfindex import IndexStream
from tfrecord_beam.digest import index_digest, payload_digest
from tfrecord_beam.index import build_index as index_of
from tfrecord_beam.index import verify_index
from tfrecord_beam.jobs import _walk
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


# ---------------------------------------------------------------------------------------------
# build_index: each index holds one entry per record walked, in order, and is the size written

INDEX_LINE = re.compile(r"(a-\d)\.tfindex \(the index of \S*/(a-\d)\.tfrecord\)")


@pytest.fixture(scope="module")
def index_inputs(tmp_path_factory):
    """Two data files, read in several walk blocks each once `_walk.READ_BYTES` is small; the
    indexes go to each test's own --output_dir."""
    directory = tmp_path_factory.mktemp("index_inputs")
    write_files(directory, "a", [300, 200])
    return directory


def _build_index(inputs: Path, out: Path, monkeypatch):
    monkeypatch.setattr(_walk, "READ_BYTES", 4096)  # ~5 blocks a file: ~5 IndexStream.add calls
    return build_index.main(["--input", str(inputs / "*.tfrecord"), "--output_dir", str(out)] + FAST)


def _index_calls(monkeypatch, change):
    """Patch IndexStream.add: `change(original, stream, sizes, call)` per call."""
    original = IndexStream.add
    count = [0]

    def patched(self, sizes):
        count[0] += 1
        change(original, self, sizes, count[0])

    monkeypatch.setattr(IndexStream, "add", patched)


def _index_drops_second(original, stream, sizes, call):
    if call != 2:  # the second chunk of entries is lost (the ones after it shift back)
        original(stream, sizes)


def _index_doubles_first(original, stream, sizes, call):
    original(stream, sizes)
    if call == 1:  # the first chunk of entries is written twice
        original(stream, sizes)


def _index_swaps_second_and_third(original, stream, sizes, call):
    if call == 2:  # held back, written after the third: every entry once, out of order
        stream.held = sizes
        return
    original(stream, sizes)
    if call == 3:
        original(stream, stream.held)


def _build_index_fails_on_one_index(inputs: Path, out: Path, monkeypatch, capsys) -> str:
    """Run build_index, which must exit 1 with an error line naming one index and its own data
    file; that index is not in place, no temporary index is left, and an index the job did put in
    place is right. The error line."""
    code = _build_index(inputs, out, monkeypatch)
    err = capsys.readouterr().err
    assert code == 1, err
    line = [t for t in err.splitlines() if "error:" in t][-1]
    named = INDEX_LINE.search(line)
    assert named and named.group(1) == named.group(2), line
    left = entries(out)
    assert f"{named.group(1)}.tfindex" not in left and not [n for n in left if n.startswith(".")], left
    for name in left:  # the other file's index may have been finished first: it is whole
        verify_index(str(out / name), str(inputs / name.replace(".tfindex", ".tfrecord")))
    return line


@pytest.mark.parametrize(
    "break_",
    [_index_drops_second, _index_doubles_first, _index_swaps_second_and_third],
    ids=["drops", "doubles", "reorders"],
)
def test_an_index_that_loses_doubles_or_reorders_entries_fails_build_index(
    index_inputs, tmp_path, capsys, monkeypatch, break_
):
    _index_calls(monkeypatch, break_)
    line = _build_index_fails_on_one_index(index_inputs, tmp_path / "idx", monkeypatch, capsys)
    meant, wrote = re.search(r"meant to write (\d+) records.*its writer wrote (\d+) records", line).groups()
    expected = {_index_drops_second: int.__lt__, _index_doubles_first: int.__gt__}.get(break_, int.__eq__)
    assert expected(int(wrote), int(meant)), line  # reordered: as many entries, the checksum differs
    assert break_ is not _index_swaps_second_and_third or "checksum" in line


def test_an_index_cut_short_before_its_rename_fails_build_index(index_inputs, tmp_path, capsys, monkeypatch):
    original = IndexStream.finish

    def finish_then_truncate(self, members=None):
        commit = original(self, members)
        with open(commit.temp, "r+b") as handle:  # the disk lost its tail after the stream closed it
            handle.truncate(os.path.getsize(commit.temp) - 5)
        return commit

    monkeypatch.setattr(IndexStream, "finish", finish_then_truncate)
    line = _build_index_fails_on_one_index(index_inputs, tmp_path / "idx", monkeypatch, capsys)
    size, wrote = re.search(r"(\d+) bytes on disk, its writer wrote (\d+)", line).groups()
    assert int(size) == int(wrote) - 5, line


@pytest.mark.parametrize("kind", [None, "gzip"])  # gzip: block-gzip, its member table after the entries
def test_index_stream_digest_and_file_bytes_are_of_what_it_wrote(tmp_path, kind):
    path = str(tmp_path / "x.tfrecord")
    with RecordWriter(path, kind, index_path=True) as writer:
        writer.write_many([bytes([i % 251]) * (i * 37 % 3000) for i in range(300)])
    entries_ = index_of(path, kind)
    stream = IndexStream(str(tmp_path / "y.tfindex"))
    stream.add(entries_[:100, 1])
    stream.add(entries_[100:, 1])
    with open(path, "rb") as raw:
        table = blockgzip.scan_members(raw) if kind else None
    stream.finish(table).move()
    assert stream.digest == index_digest(entries_[:, 0], entries_[:, 1])
    assert stream.file_bytes == os.path.getsize(tmp_path / "y.tfindex")
    assert (tmp_path / "y.tfindex").read_bytes() == (tmp_path / "x.tfindex").read_bytes()
