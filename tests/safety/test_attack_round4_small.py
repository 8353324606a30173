"""The smaller findings of the attacker's round 4 (issue 34 items 10-15), each fixed: the CLI's
help about streams, a writer's temporary name within NAME_MAX, a failed close or write that
says so every time and counts once, `head`'s file lines, `--compression` with blanks."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.full_disk import fill_disk

from tfrecord_beam.errors import WriterFailedError
from tfrecord_beam.records import RecordWriter, read_records, write_records

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, stdin=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return subprocess.run(
        [sys.executable, "-m", "tfrecord_beam.cli", *args], env=env, capture_output=True, timeout=120, stdin=stdin
    )


def test_the_help_says_what_streams_get_and_stdin_is_refused_in_one_line(tmp_path):
    helped = _cli("--help").stdout.decode()
    assert "read as streams" not in helped and "Standard input (-) and FIFOs are refused" in helped
    assert "read as streams" not in (ROOT / "docs" / "cli.md").read_text()
    for command in ("count", "head", "inspect", "schema"):
        done = _cli(command, "--", "-", stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and b"standard input is not read" in done.stderr, (command, done.stderr)
    fifo = tmp_path / "f.tfrecord"
    os.mkfifo(fifo)
    done = _cli("count", str(fifo))
    assert done.returncode == 2 and b"not a regular file" in done.stderr


@pytest.mark.parametrize("index", [False, True])
def test_a_writer_writes_a_file_of_a_legal_240_byte_name(tmp_path, index):
    name = "a" * 231 + ".tfrecord"
    assert len(name) == 240
    write_records(str(tmp_path / name), [b"x", b"y"], index_path=True if index else None)
    assert list(read_records(str(tmp_path / name))) == [b"x", b"y"]
    long_utf8 = "é" * 115 + ".tfrecord"  # 239 bytes, 124 characters
    write_records(str(tmp_path / long_utf8), [b"z"])
    assert list(read_records(str(tmp_path / long_utf8))) == [b"z"]
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_a_failed_close_says_so_on_every_later_close_and_write(tmp_path, monkeypatch):
    fill_disk(monkeypatch, 10)
    writer = RecordWriter(str(tmp_path / "x.tfrecord"))
    writer.write(b"r" * 100)  # buffered: the disk is found full on close
    with pytest.raises(OSError) as first:
        writer.close()
    assert first.value.errno == errno.ENOSPC
    with pytest.raises(WriterFailedError, match="an earlier (write|close) failed"):
        writer.close()
    with pytest.raises(WriterFailedError, match="not committed"):
        writer.write(b"more")
    assert not (tmp_path / "x.tfrecord").exists()


def test_a_failed_write_counts_its_records_once_in_the_digest(tmp_path, monkeypatch):
    fill_disk(monkeypatch, 1 << 16)
    writer = RecordWriter(str(tmp_path / "x.tfrecord"))
    with pytest.raises(OSError):
        for i in range(20000):
            writer.write(b"new-record-%06d" % i + bytes(100))
    assert writer.digest[0] == writer.records_written
    writer.abort()


def test_head_names_files_as_json_does(tmp_path):
    names = [os.fsencode(str(tmp_path)) + b"/bad\xff.tfrecord", os.fsencode(str(tmp_path)) + b"/ok.tfrecord"]
    for name in names:
        write_records(os.fsdecode(name), [b"x"])
    done = _cli("head", "-q", str(tmp_path))
    assert (
        b"\xff" not in done.stdout and b"==> " + os.fsencode(str(tmp_path)) + b"/bad\\xff.tfrecord <==" in done.stdout
    )


@pytest.mark.parametrize("value", [" gzip", "gzip ", "\tzlib"])
def test_a_compression_with_blanks_is_refused_like_an_empty_one(tmp_path, value):
    write_records(str(tmp_path / "x.tfrecord.gz"), [b"x"], compression="gzip")
    done = _cli("count", "--compression", value, str(tmp_path / "x.tfrecord.gz"))
    assert done.returncode == 2, done.stderr
    assert _cli("count", "--compression", "GZIP", str(tmp_path / "x.tfrecord.gz")).returncode == 0
