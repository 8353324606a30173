"""Issue 22 item 8: every exception class of the package survives pickling and torch's
one-message rebuild (`exc_type(msg)` in the DataLoader's main process), keeping its type,
message and (for TFRecordError) path, offset, record number and reason."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import sys
import traceback

import pytest

import tfrecord_beam
from tfrecord_beam.errors import CorruptRecordError, TFRecordError

FIELDS = {"path": "s3://bkt/data, 2/t-00001.tfrecord", "offset": 4096, "record_number": 17, "reason": "bad: CRC"}


def _exception_classes():
    """Every public exception (and warning) class defined in a module of the package."""
    found = {}
    for info in pkgutil.walk_packages(tfrecord_beam.__path__, "tfrecord_beam."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("tfrecord_beam")
                and not name.startswith("_")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


CLASSES = _exception_classes()


def _make(cls):
    """An instance built the way the package builds it."""
    if issubclass(cls, TFRecordError):
        params = inspect.signature(cls.__init__).parameters
        return cls(**{name: FIELDS[name] for name in params if name in FIELDS})
    return cls(f"{cls.__name__}: something went wrong with s3://bkt/x")


def _same_fields(got, want):
    if isinstance(want, TFRecordError):
        for name in ("path", "offset", "record_number", "reason"):
            assert getattr(got, name) == getattr(want, name), name


def test_the_walk_finds_the_package_errors():
    names = {c.__name__ for c in CLASSES}
    assert {"TFRecordError", "CorruptRecordError", "ManifestError", "OutputError", "MissingExtraError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_pickling_keeps_type_message_and_fields(cls):
    error = _make(cls)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and str(again) == str(error)
    _same_fields(again, error)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_one_message_rebuild_keeps_type_message_and_fields(cls):
    """What torch does in the main process: the worker's formatted traceback, then exc_type(msg)."""
    error = _make(cls)
    try:
        raise error
    except BaseException:
        text = "".join(traceback.format_exception(*sys.exc_info()))
    assert not getattr(cls, "message", None)  # torch would call exc_type(message=msg) instead
    msg = f"Caught {cls.__name__} in DataLoader worker process 0.\nOriginal {text}"
    rebuilt = cls(msg)
    assert type(rebuilt) is cls and str(error) in str(rebuilt) and "worker process 0" in str(rebuilt)
    _same_fields(rebuilt, error)
    again = pickle.loads(pickle.dumps(rebuilt))  # a rebuilt error crosses processes again
    assert str(again) == str(rebuilt)
    _same_fields(again, error)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_torch_exception_wrapper_reraises_the_same_class(cls):
    torch_utils = pytest.importorskip("torch._utils")
    error = _make(cls)
    try:
        raise error
    except BaseException:
        wrapper = torch_utils.ExceptionWrapper(sys.exc_info(), where="in DataLoader worker process 1")
    with pytest.raises(cls) as info:
        wrapper.reraise()
    assert type(info.value) is cls
    _same_fields(info.value, error)


def test_fields_read_back_from_messages_without_a_path():
    assert CorruptRecordError("record 3, byte offset 40: payload CRC mismatch").record_number == 3
    rebuilt = CorruptRecordError("byte offset 40: payload CRC mismatch")
    assert (rebuilt.path, rebuilt.offset, rebuilt.reason) == (None, 40, "payload CRC mismatch")
    plain = TFRecordError("no location at all")
    assert (plain.path, plain.offset, plain.record_number, plain.reason) == (None, None, None, "no location at all")


def test_except_corrupt_record_error_fires_with_dataloader_workers(tmp_path):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from tfrecord_beam.example import encode_example
    from tfrecord_beam.records import RecordReader, write_records
    from tfrecord_beam.torch import TFRecordDataset

    path = str(tmp_path / "f.tfrecord")
    write_records(path, [encode_example({"id": i}) for i in range(50)])
    offset = [o for o, _ in RecordReader(path).records_with_offsets()][30]
    with open(path, "r+b") as handle:
        handle.seek(offset + 14)  # a payload byte: payload CRC mismatch
        handle.write(b"\xff")
    dataset = TFRecordDataset(path, None, {"id": "int"})
    batches = iter(DataLoader(dataset, batch_size=None, num_workers=2))
    try:
        with pytest.raises(CorruptRecordError) as info:
            for _ in batches:
                pass
    finally:
        # The error's traceback holds the iterator, in a reference cycle (the frame that raised
        # it holds the error) that only a garbage collection frees, after multiprocessing's
        # finalizers closed the iterator's queues: its shutdown could not tell the workers to
        # stop, and waited 5 s on each (in whatever test that collection fell). Stopped here.
        batches._shutdown_workers()
    assert type(info.value) is CorruptRecordError
    assert info.value.path == path and info.value.offset == offset
    assert "payload CRC mismatch" in info.value.reason and "worker process" in str(info.value)


@pytest.mark.parametrize("path", ["/d/x: y.tfrecord", "s3://b/k: v/a.tfrecord", "/d/a, record 1.tfrecord"])
def test_a_path_holding_colon_space_reads_back_with_its_position(path):
    """A file name may hold ': ' (Linux allows it); a one-message rebuild of an error with a
    record or offset must still give that path, record, offset and reason back."""
    err = CorruptRecordError(path, 10, 3, "crc mismatch: length")
    back = CorruptRecordError(str(err))
    assert (back.path, back.record_number, back.offset, back.reason) == (path, 3, 10, "crc mismatch: length")
    err = CorruptRecordError(path, 10, None, "bad")
    back = CorruptRecordError(str(err))
    assert (back.path, back.record_number, back.offset, back.reason) == (path, None, 10, "bad")
