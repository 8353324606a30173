"""A writer whose write failed (issue 34 item 13): a full disk mid-file leaves a temporary file
that may end mid-record and lacks the rest, so it must never be committed: not by `close()`,
not when the writer is dropped, not at interpreter exit (the `tfrecord` package's writer
commits unclosed writers there). The file there before stays as it was; one warning names
the file."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from helpers.full_disk import fill_disk

from tfrecord_beam import TFRecordWriter
from tfrecord_beam.errors import UnclosedWriterWarning, WriterFailedError
from tfrecord_beam.index import load_index
from tfrecord_beam.records import RecordReader, RecordWriter, write_records

REPO = Path(__file__).resolve().parents[2]
OLD = [b"old-%05d" % i for i in range(50)]


def _old_files(tmp_path: Path, compression=None, suffix=".tfrecord"):
    """A complete file and its index, written before the failing writer (what must survive)."""
    path = tmp_path / f"data{suffix}"
    write_records(str(path), OLD, compression=compression, index_path=True)
    index = Path(str(path)[: -len(".tfrecord")] + ".tfindex") if suffix == ".tfrecord" else Path(f"{path}.tfindex")
    return path, index, path.read_bytes(), index.read_bytes()


def _write_until_full(writer, n: int = 20000) -> OSError:
    with pytest.raises(OSError) as info:
        for i in range(n):
            writer.write(b"new-record-%06d" % i + bytes(100))
    assert info.value.errno == errno.ENOSPC
    return info.value


@pytest.mark.parametrize(
    "kind",
    ["plain", "plain_index_full", "zlib", "block_gzip", "block_gzip_index_full"],
)
def test_a_failed_writer_never_commits_and_leaves_the_old_file(tmp_path, monkeypatch, kind):
    compression = {"zlib": "zlib", "block_gzip": "gzip", "block_gzip_index_full": "gzip"}.get(kind)
    suffix = {"zlib": ".tfrecord.zlib", "block_gzip": ".tfrecord.gz", "block_gzip_index_full": ".tfrecord.gz"}
    path, index, data_before, index_before = _old_files(tmp_path, compression, suffix.get(kind, ".tfrecord"))
    index_full = kind.endswith("index_full")
    fill_disk(monkeypatch, 1 << 16, lambda p: p.endswith(".tfindex") == index_full)
    writer = RecordWriter(
        str(path), compression, index_path=True, block_bytes=1 << 12 if compression == "gzip" else None
    )
    first = _write_until_full(writer)
    with pytest.raises(WriterFailedError, match="an earlier write failed") as again:
        writer.write(b"more")
    assert str(path) in str(again.value) and again.value.__cause__ is first
    with pytest.raises(WriterFailedError, match="not committed"):
        writer.close()
    assert path.read_bytes() == data_before and index.read_bytes() == index_before
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, index.name])  # no temporary left
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # closed by now: nothing more to say when dropped
        del writer


def test_a_dropped_tfrecord_writer_whose_write_failed_warns_once_and_commits_nothing(tmp_path, monkeypatch):
    path, index, data_before, index_before = _old_files(tmp_path)
    fill_disk(monkeypatch, 1 << 15, lambda p: not p.endswith(".tfindex"))
    writer = TFRecordWriter(str(path), index_path=str(index))
    failed = False
    try:
        for i in range(20000):
            writer.write({"i": (i, "int"), "pad": (b"x" * 100, "byte")})
    except OSError:  # caught and gone: its traceback no longer holds the writer
        failed = True
    assert failed
    with pytest.warns(UnclosedWriterWarning) as caught:
        del writer
        gc.collect()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and str(path) in messages[0] and "a write failed" in messages[0]
    assert "left as it was" in messages[0] and "committing" not in messages[0]
    assert path.read_bytes() == data_before and index.read_bytes() == index_before


def test_flush_after_a_failed_write_raises_and_a_failed_flush_fails_the_writer(tmp_path, monkeypatch):
    path = tmp_path / "f.tfrecord"
    fill_disk(monkeypatch, 10)
    writer = RecordWriter(str(path))
    writer.write(b"x" * 100)  # buffered: nothing handed to the file yet
    with pytest.raises(OSError):
        writer.flush()
    with pytest.raises(WriterFailedError):
        writer.flush()
    with pytest.raises(WriterFailedError):
        writer.close()
    assert os.listdir(tmp_path) == []


def test_a_caught_full_disk_is_not_committed_at_interpreter_exit(tmp_path):
    """The issue's case: the program catches the write's error and goes on to exit normally;
    the unclosed TFRecordWriter used to commit its partial file then ("committing its 16384
    records now"), replacing the complete old file with one that looks whole."""
    path, index, data_before, index_before = _old_files(tmp_path)
    script = f"""
        import pytest
        from helpers.full_disk import fill_disk
        import tfrecord_beam as tfrecord

        class Patch:
            def setattr(self, owner, name, value):
                setattr(owner, name, value)

        fill_disk(Patch(), 1 << 16, lambda p: not p.endswith(".tfindex"))
        w = tfrecord.TFRecordWriter({str(path)!r}, index_path={str(index)!r})
        try:
            for i in range(20000):
                w.write({{"i": (i, "int"), "pad": (b"x" * 100, "byte")}})
        except OSError as exc:
            print("caught", exc.errno)
        """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"caught {errno.ENOSPC}"
    assert done.stderr.count("UnclosedWriterWarning") == 1, done.stderr
    assert "a write failed" in done.stderr and str(path) in done.stderr and "committing" not in done.stderr
    assert path.read_bytes() == data_before and index.read_bytes() == index_before
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, index.name])
    assert len(list(RecordReader(str(path)))) == len(OLD) and len(load_index(str(index))) == len(OLD)
