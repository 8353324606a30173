"""The Beam side's file layer (Beam FileSystems): read, size, glob, atomic write."""

import os

from tfrecord_beam.beam import _fs


def test_atomic_output_appears_only_on_commit(tmp_path):
    target = str(tmp_path / "out.bin")
    with _fs.atomic_output(target) as (handle, commit):
        handle.write(b"payload")
        assert not os.path.exists(target)
        commit()
    assert _fs.open_input(target).read() == b"payload"
    assert _fs.file_size("file://" + target) == 7
    with _fs.atomic_output(target) as (handle, _commit):
        handle.write(b"never committed")
    assert _fs.open_input(target).read() == b"payload"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_expand_sorts_matches_and_keeps_plain_paths(tmp_path):
    for name in ("b.tfrecord", "a.tfrecord", "c.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert _fs.expand(str(tmp_path / "*.tfrecord")) == [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    assert _fs.expand(["file://" + str(tmp_path / "c.txt")]) == [str(tmp_path / "c.txt")]
    assert _fs.exists(str(tmp_path / "c.txt")) and not _fs.exists(str(tmp_path / "d.txt"))


def test_open_input_seeks(tmp_path):
    path = tmp_path / "d.bin"
    path.write_bytes(b"0123456789")
    with _fs.open_input(str(path)) as handle:
        handle.seek(4)
        assert handle.read(3) == b"456"


def test_open_input_names_the_file_as_given(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"0123456789")
    for name in (str(path), "file://" + str(path)):
        with _fs.open_input(name) as handle:
            assert handle.name == name
            handle.seek(4)
            assert handle.read(3) == b"456"
        assert handle.closed


def test_file_size_of_a_missing_file_names_it(tmp_path):
    """As the core's `fs.file_size`: FileNotFoundError naming the file (Beam's match answers an
    empty list, which read as an IndexError)."""
    import pytest

    for name in ("nope.tfrecord", "no[pe].tfrecord"):
        with pytest.raises(FileNotFoundError, match="no.*pe.*tfrecord: no such file"):
            _fs.file_size(str(tmp_path / name))
