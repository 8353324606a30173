"""`tfrecord-beam` on names and files at the edges (issue 34 item 10): --json output stays
valid UTF-8 JSON for a file name that is not UTF-8, an empty --compression is a usage error,
and a file whose stat size is 0 while it holds bytes (/proc) is read to its end by every
command, so they agree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfrecord_beam import cli
from tfrecord_beam.cli import _json
from tfrecord_beam.records import write_records

RAW_NAME = b"x\xff\xfe.tfrecord"


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def odd_name(tmp_path) -> str:
    """A data file (2 records) whose name holds bytes that are not UTF-8."""
    path = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(RAW_NAME))
    try:
        write_records(path, [b"a", b"bc"])
    except (OSError, UnicodeEncodeError):
        pytest.skip("this filesystem refuses names that are not UTF-8")
    return path


@pytest.mark.parametrize("command", ["count", "inspect", "verify"])
def test_json_output_of_a_non_utf8_name_is_utf8_json(capsys, odd_name, command):
    code, out, _ = _run(capsys, command, "--json", "-q", odd_name)
    assert code == 0
    data = out.encode("utf-8")  # strict: a surrogate escape left in the text raises here
    parsed = json.loads(data)
    files = parsed["files"]
    expected = str(Path(os.fsdecode(bytes(Path(odd_name).parent)))) + "/x\\xff\\xfe.tfrecord"
    assert files[0]["path"] == expected
    assert "\\udc" not in data.decode("utf-8")


def test_json_error_message_naming_a_non_utf8_file_is_utf8(capsys, tmp_path):
    path = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"bad\xff.tfrecord"))
    try:
        Path(path).write_bytes(b"\x01\x02\x03")  # too short for a header
    except (OSError, UnicodeEncodeError):
        pytest.skip("this filesystem refuses names that are not UTF-8")
    code, out, err = _run(capsys, "count", "--json", "-q", "--no-index", path)
    assert code == 3, err
    row = json.loads(out.encode("utf-8"))["files"][0]
    assert "bad\\xff.tfrecord" in row["error"] and row["records"] is None
    assert "bad\\xff.tfrecord, record 0" in err.encode("utf-8").decode("utf-8")  # the same words on stderr


def test_json_text_keeps_utf8_and_escapes_only_undecodable_bytes():
    assert _json.text("données.tfrecord") == "données.tfrecord"
    assert _json.text(os.fsdecode(b"a\xffb")) == "a\\xffb"
    assert _json.text("\ud800") == "\\ud800"  # no byte stands for it: its code point, as text
    assert json.loads(_json.dumps({os.fsdecode(b"k\xff"): [os.fsdecode(b"v\xfe")]})) == {"k\\xff": ["v\\xfe"]}


@pytest.mark.parametrize("value", ["", " "])
@pytest.mark.parametrize("command", ["count", "inspect", "head", "verify", "schema"])
def test_an_empty_compression_is_a_usage_error(capsys, tmp_path, command, value):
    path = tmp_path / "d.tfrecord"
    write_records(str(path), [b"a"])
    code, out, err = _run(capsys, command, "--compression", value, path)
    assert code == 2, (out, err)
    assert "--compression" in err and f"invalid choice: {value!r}" in err
    assert out == ""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="no /proc")
@pytest.mark.parametrize("command", ["count", "inspect", "verify"])
def test_a_proc_file_is_read_to_its_end_by_every_command(capsys, command):
    """stat says 0 bytes; the file holds the environment: not TFRecord data, exit 3 with the
    file's first bytes named, never "0 records"."""
    assert os.stat("/proc/self/environ").st_size == 0  # what the walk must not trust
    code, out, err = _run(capsys, command, "-q", "/proc/self/environ")
    assert code == 3, (out, err)
    assert "/proc/self/environ, record 0, byte offset 0" in err + out
    assert "does not start with a valid TFRecord header" in err + out
    if command == "count":
        assert out == ""  # no count line for a file that could not be counted


def test_an_empty_regular_file_still_counts_zero_by_the_walk(capsys, tmp_path):
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    code, out, _ = _run(capsys, "count", "-q", "--no-index", path)
    assert code == 0 and out.split()[:1] == ["0"]
