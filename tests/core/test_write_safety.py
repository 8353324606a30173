"""Writes never lose or mix data: commit order of data + index, index paths that are data files,
writers that are never closed, and `verify` going on past files it cannot read (issue 10)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers.fixtures import REPO

from tfrecord_beam import fs
from tfrecord_beam.cli import main as cli_main
from tfrecord_beam.compat import TFRecordWriter
from tfrecord_beam.errors import OverwriteRefusedError, UnclosedWriterWarning
from tfrecord_beam.index import create_index, load_index, write_index
from tfrecord_beam.records import RecordReader, RecordWriter, write_records
from tfrecord_beam.tools import tfrecord2idx


def _payloads(n, tag=b"r"):
    return [tag + b"%06d" % i for i in range(n)]


# --- item 4: new data never beside an old index ---------------------------------------------------


def _fail_on(monkeypatch, fail_at: str):
    """Make `close()` fail at one step of its commit (a full disk, a kill)."""
    import tfrecord_beam.fs as fs_module

    real_move = fs_module._Commit.move

    def move(self):
        if self.final.endswith(fail_at):
            raise OSError(28, "No space left on device (test)")
        real_move(self)

    monkeypatch.setattr(fs_module._Commit, "move", move)


@pytest.mark.parametrize("fail_at", [".tfindex", ".tfrecord"])
def test_close_failing_midway_never_pairs_new_data_with_old_index(tmp_path, monkeypatch, fail_at):
    path = tmp_path / "data.tfrecord"
    write_records(str(path), _payloads(30, b"old"), index_path=True)
    _fail_on(monkeypatch, fail_at)
    writer = RecordWriter(str(path), index_path=True)
    writer.write_many(_payloads(15, b"new"))
    with pytest.raises(OSError):
        writer.close()
    monkeypatch.undo()
    index_file = tmp_path / "data.tfindex"
    records = list(RecordReader(str(path))) if path.exists() else []
    if index_file.exists():  # whatever index is there describes the data that is there
        assert path.exists(), "an index was left without data"
        assert len(load_index(str(index_file))) == len(records)
    # the data is whole, old (the failure came before it moved) or new (after): never a mix
    assert records == (_payloads(15, b"new") if fail_at == ".tfindex" else _payloads(30, b"old"))
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p], "temporary files left behind"


def test_rewrite_without_index_removes_the_stale_index(tmp_path):
    path = tmp_path / "data.tfrecord"
    write_records(str(path), _payloads(30), index_path=True)
    write_records(str(path), _payloads(15))
    assert not (tmp_path / "data.tfindex").exists()
    assert len(list(RecordReader(str(path)))) == 15


def test_rewrite_with_index_replaces_both(tmp_path):
    path = tmp_path / "data.tfrecord"
    write_records(str(path), _payloads(30), index_path=True)
    write_records(str(path), _payloads(15), index_path=True)
    assert len(load_index(str(tmp_path / "data.tfindex"))) == 15


# --- item 8: an index is never written over a data file --------------------------------------------


def test_tfrecord2idx_with_two_data_files_refuses_and_keeps_both(tmp_path, capsys):
    a, b = tmp_path / "train-0.tfrecord", tmp_path / "train-1.tfrecord"
    write_records(str(a), _payloads(5))
    write_records(str(b), _payloads(7))
    before = b.read_bytes()
    assert tfrecord2idx.main([str(a), str(b)]) == 2
    assert b.read_bytes() == before
    err = capsys.readouterr().err
    assert str(b) in err and "not a .tfindex" in err and "quote the glob" in err


def test_tfrecord2idx_refuses_data_file_without_tfrecord_name(tmp_path):
    a, b = tmp_path / "a.tfrecord", tmp_path / "b.dat"
    write_records(str(a), _payloads(5))
    write_records(str(b), _payloads(3))
    before = b.read_bytes()
    assert tfrecord2idx.main([str(a), str(b)]) == 2
    assert b.read_bytes() == before


def test_tfrecord2idx_three_or_more_files_index_each_beside_itself(tmp_path):
    files = [tmp_path / f"part-{i}.tfrecord" for i in range(3)]
    for i, f in enumerate(files):
        write_records(str(f), _payloads(i + 2))
    assert tfrecord2idx.main([str(f) for f in files]) == 0
    for i in range(len(files)):
        assert len(load_index(str(tmp_path / f"part-{i}.tfindex"))) == i + 2


def test_tfrecord2idx_replaces_an_existing_index(tmp_path):
    a = tmp_path / "a.tfrecord"
    write_records(str(a), _payloads(4))
    custom = tmp_path / "custom.idx"
    custom.write_text("0 1\n")
    assert tfrecord2idx.main([str(a), str(custom)]) == 0
    assert len(load_index(str(custom))) == 4


def test_index_writers_refuse_data_targets(tmp_path):
    data = tmp_path / "d.tfrecord"
    write_records(str(data), _payloads(3))
    with pytest.raises(OverwriteRefusedError, match="not a .tfindex"):
        write_index(np.zeros((0, 2), np.int64), str(data))
    with pytest.raises(OverwriteRefusedError, match="data file itself"):
        create_index(str(data), str(data))
    with pytest.raises(OverwriteRefusedError):
        RecordWriter(str(tmp_path / "e.tfrecord"), index_path=str(data))
    assert len(list(RecordReader(str(data)))) == 3


# --- item 9: writers that are never closed -------------------------------------------------------


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_unclosed_tfrecord_writer_is_committed_at_exit_with_a_warning(tmp_path):
    done = _run(
        """
        import tfrecord_beam as tfrecord
        w = tfrecord.TFRecordWriter("out.tfrecord", index_path="out.tfindex")
        for i in range(1000):
            w.write({"i": (i, "int")})
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "UnclosedWriterWarning" in done.stderr and "out.tfrecord" in done.stderr
    assert len(list(RecordReader(str(tmp_path / "out.tfrecord")))) == 1000
    assert len(load_index(str(tmp_path / "out.tfindex"))) == 1000


def test_unclosed_writer_is_discarded_when_the_program_fails(tmp_path):
    done = _run(
        """
        import tfrecord_beam as tfrecord
        w = tfrecord.TFRecordWriter("out.tfrecord")
        w.write({"i": (1, "int")})
        raise RuntimeError("boom")
        """,
        tmp_path,
    )
    assert done.returncode == 1
    assert "uncaught exception" in done.stderr and "discarded" in done.stderr
    assert os.listdir(tmp_path) == []


def test_dropped_tfrecord_writer_commits_on_garbage_collection(tmp_path):
    path = tmp_path / "gc.tfrecord"
    writer = TFRecordWriter(str(path))
    writer.write({"i": (1, "int")})
    with pytest.warns(UnclosedWriterWarning, match="committing its 1 records"):
        del writer
    assert len(list(RecordReader(str(path)))) == 1


def test_dropped_record_writer_discards_with_a_warning(tmp_path):
    path = tmp_path / "gc.tfrecord"
    writer = RecordWriter(str(path))
    writer.write(b"x")
    with pytest.warns(UnclosedWriterWarning, match="discarded"):
        del writer
    assert not path.exists() and os.listdir(tmp_path) == []


def test_with_block_exiting_on_an_exception_commits_nothing(tmp_path):
    path = tmp_path / "w.tfrecord"
    with pytest.raises(ValueError):
        with TFRecordWriter(str(path)) as writer:
            writer.write({"i": (1, "int")})
            raise ValueError("stop")
    assert os.listdir(tmp_path) == []


# --- item 2: verify checks every file, whatever it meets ------------------------------------------


@pytest.mark.parametrize("damage", ["garbage_tail", "flipped_byte"])
def test_verify_goes_on_past_a_damaged_compressed_file(tmp_path, capsys, damage):
    good = tmp_path / "good.tfrecord"
    write_records(str(good), _payloads(10))
    raw = good.read_bytes()
    if damage == "garbage_tail":
        compressed = gzip.compress(raw) + b"GARBAGE-GARBAGE"
    else:
        buf = bytearray(gzip.compress(raw, 1))
        buf[len(buf) // 2] ^= 0xFF
        compressed = bytes(buf)
    bad = tmp_path / "bad.tfrecord.gz"
    bad.write_bytes(compressed)
    assert cli_main(["verify", str(bad), str(good)]) == 3
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert f"FAIL  {bad}" in out.out and f"OK    {good}: 10 records" in out.out
    assert "2 files" in out.out + out.err and "1 with problems" in out.out + out.err


def test_verify_reports_an_unreadable_file_and_goes_on(tmp_path, capsys):
    good = tmp_path / "good.tfrecord"
    write_records(str(good), _payloads(3))
    missing = tmp_path / "gone.tfrecord"
    odd = tmp_path / "odd.tfrecord.zlib"
    odd.write_bytes(b"\x00" * 40)
    assert cli_main(["verify", str(odd), str(missing), str(good)]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert f"OK    {good}: 3 records" in out.out
    assert str(odd) in out.out
    assert fs.exists(str(good))


# --- issue 34 item 14: an index is told by its bytes, not its name ------------------------------


@pytest.mark.parametrize("name", ["x.tfrecord.idx", "x.tfrecord.tfindex.txt", "x.tfrecords-index"])
def test_reindexing_replaces_its_own_index_whatever_its_name(tmp_path, name):
    """`create_index("x.tfrecord", "x.tfrecord.idx")` (the DALI naming) works twice: the second
    call finds index text there, its own, and replaces it (the name holding `.tfrecord` made
    it refuse with "it is not a .tfindex file")."""
    data, index = tmp_path / "x.tfrecord", tmp_path / name
    write_records(str(data), _payloads(4))
    create_index(str(data), str(index))
    write_records(str(data), _payloads(9))  # the data changes: the index is rebuilt over the old one
    create_index(str(data), str(index))
    assert len(load_index(str(index))) == 9
    assert tfrecord2idx.main([str(data), str(index)]) == 0
    assert len(load_index(str(index))) == 9


@pytest.mark.parametrize("name", ["data.idx", "data.tfindex", "plain"])
@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_a_data_file_is_refused_as_an_index_target_whatever_its_name(tmp_path, name, compression):
    data, target = tmp_path / "d.tfrecord", tmp_path / name
    write_records(str(data), _payloads(3))
    write_records(str(target), _payloads(5), compression=compression)
    before = target.read_bytes()
    with pytest.raises(OverwriteRefusedError, match="not a .tfindex"):
        create_index(str(data), str(target))
    assert target.read_bytes() == before


@pytest.mark.parametrize("name", ["b.tfrecord", "b.tfrecords", "b.tfrecord.gz", "b.tfrecord.zst"])
def test_an_empty_data_file_is_not_taken_for_an_empty_index(tmp_path, name):
    """Empty bytes say nothing: an empty shard named as data (an unquoted glob's second match)
    is left alone; an empty file under any other name is an (empty) index and is replaced."""
    a, b = tmp_path / "a.tfrecord", tmp_path / name
    write_records(str(a), _payloads(5))
    b.write_bytes(b"")
    assert tfrecord2idx.main([str(a), str(b)]) == 2
    assert b.read_bytes() == b""
    idx = tmp_path / "a.tfrecord.idx"
    idx.write_bytes(b"")
    create_index(str(a), str(idx))
    assert len(load_index(str(idx))) == 5


@pytest.mark.parametrize(
    "name",
    ["b.TFRecord-00001-of-00002", "b.tfrec", "b.records", "part.tfrecord.gz-00001-of-00002", "b.tfrecords-00000"],
)
def test_an_empty_file_whose_name_holds_a_data_word_anywhere_is_left_alone(tmp_path, name):
    a, b = tmp_path / "a.tfrecord", tmp_path / name
    write_records(str(a), _payloads(5))
    b.write_bytes(b"")
    with pytest.raises(OverwriteRefusedError):
        create_index(str(a), str(b))
    assert b.read_bytes() == b""


@pytest.mark.parametrize("name", ["a.tfrecord.idx", "a.tfindex", "a.tfrecords-index", "a.TFRECORD.IDX"])
def test_an_empty_index_named_after_its_data_is_a_failed_index_and_is_rebuilt(tmp_path, name):
    a, idx = tmp_path / "a.tfrecord", tmp_path / name
    write_records(str(a), _payloads(5))
    idx.write_bytes(b"")
    create_index(str(a), str(idx))
    assert len(load_index(str(idx))) == 5
