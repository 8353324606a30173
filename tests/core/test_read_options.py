"""ReadOptions: one validated value for the reading settings of the torch datasets and the
`tfrecord`-package loaders; None compression per edge; the drop-in signatures unchanged."""

from __future__ import annotations

import dataclasses
import gzip
import inspect
import pickle

import pytest

import tfrecord_beam as tfb
from tfrecord_beam import compat
from tfrecord_beam._read_options import ReadOptions, dropin_compression
from tfrecord_beam.errors import CorruptRecordError, TFRecordError
from tfrecord_beam.records import RecordReader


def _write(path, n=5, **kw):
    with tfb.TFRecordWriter(str(path), **kw) as writer:
        for i in range(n):
            writer.write({"id": (i, "int"), "name": (b"r%d" % i, "byte")})
    return str(path)


# -- construction: normalised once, validated with errors that say which setting -------------
def test_descriptions_are_normalised_once_and_frozen():
    options = ReadOptions(description={"id": "int64 ", "name": "bytes"}, sequence_description=["s"])
    assert options.description == {"id": "int", "name": "byte"}
    assert options.sequence_description == {"s": None} and options.sequence is True
    assert ReadOptions(description=["id"]).sequence is False
    # an empty sequence description still means SequenceExamples (every feature list)
    assert ReadOptions(sequence_description=[]).sequence is True and ReadOptions().sequence is False
    again = dataclasses.replace(options)  # normalising a normalised description is a no-op
    assert again.description is options.description
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strict = True  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(options)) == options


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"description": {"id": "double"}}, ValueError, "description: feature 'id': unknown kind 'double'"),
        ({"description": "id"}, TypeError, "description: description must be a list or dict"),
        ({"sequence_description": {"s": "text"}}, ValueError, "sequence_description: feature 's'"),
        ({"compression": "lz4"}, ValueError, "unknown compression 'lz4'"),
        ({"strict": "false"}, TypeError, "strict must be True or False, not 'false'"),
        ({"skip_corrupt": None}, TypeError, "skip_corrupt must be True or False"),
        ({"verify": 1.5}, TypeError, "verify must be True or False"),
        ({"sequence": False, "sequence_description": ["s"]}, ValueError, "sequence=False with a sequence_description"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs, error, words):
    with pytest.raises(error) as caught:
        ReadOptions(**kwargs)
    assert words in str(caught.value)


def test_public_edges_validate_before_reading(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    with pytest.raises(ValueError, match="description: feature 'id'"):
        compat.example_loader(path, None, {"id": "double"})  # at the call, not at the first record
    with pytest.raises(ValueError, match="unknown compression"):
        compat.tfrecord_iterator(path, compression_type="lz4")
    with pytest.raises(TypeError, match="strict must be True or False"):
        compat.tfrecord_loader(path, None, strict="no")


# -- what None means, edge by edge: one translation ------------------------------------------
def test_none_compression_per_edge():
    assert ReadOptions().compression is None  # core: uncompressed
    assert ReadOptions(compression="GZIP").compression == "gzip"
    assert ReadOptions.dropin(compression_type=None).compression == "auto"  # drop-ins: from the name
    assert ReadOptions.dropin(compression_type="none").compression is None
    assert [dropin_compression(c) for c in (None, "gzip", "ZLIB", "", "auto")] == ["auto", "gzip", "zlib", None, "auto"]


def test_none_reads_gzip_by_name_at_drop_in_edges_only(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz")  # the drop-in writer: None = from the name: gzip
    with open(path, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    assert len(gzip.decompress(open(path, "rb").read())) > 0
    with pytest.raises(TFRecordError):  # the core: None = uncompressed, so gzip bytes are not frames
        list(RecordReader(path, None))
    assert len(list(RecordReader(path, "auto"))) == 5
    assert len(list(compat.tfrecord_iterator(path, None, None, None))) == 5
    assert [int(r["id"][0]) for r in compat.tfrecord_loader(path, None, ["id"], None, None, None)] == list(range(5))


# -- signatures: the `tfrecord` package's positional order, our additions keyword-only ---------
def _positional(fn):
    return [
        (p.name, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self"
    ]


def _keyword_only(fn):
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY}


def test_loader_signatures_match_the_tfrecord_package():
    import tfrecord.reader as theirs

    for name in ("tfrecord_iterator", "example_loader", "sequence_loader", "tfrecord_loader", "multi_tfrecord_loader"):
        assert _positional(getattr(compat, name)) == _positional(getattr(theirs, name)), name
    assert _keyword_only(compat.tfrecord_iterator) == {"verify"}
    assert _keyword_only(compat.tfrecord_loader) == _keyword_only(compat.example_loader) == {"strict"}
    assert _keyword_only(compat.sequence_loader) == {"strict"}
    assert _keyword_only(compat.multi_tfrecord_loader) == {"seed"}


def test_dataset_signatures_match_the_tfrecord_package():
    pytest.importorskip("torch")
    import tfrecord.torch.dataset as theirs

    from tfrecord_beam.torch import IndexedTFRecordDataset, MultiTFRecordDataset, TFRecordDataset

    for ours, peer in ((TFRecordDataset, theirs.TFRecordDataset), (MultiTFRecordDataset, theirs.MultiTFRecordDataset)):
        assert _positional(ours.__init__) == _positional(peer.__init__), ours.__name__
        assert {"seed", "batch_size", "rank", "world_size", "skip_corrupt", "strict"} <= _keyword_only(ours.__init__)
    assert [n for n, _ in _positional(IndexedTFRecordDataset.__init__)] == [
        "data_path",
        "index_path",
        "description",
        "transform",
        "sequence_description",
        "compression_type",
    ]
    remote = {"cache_dir", "cache_limit", "readahead_bytes", "request_timeout", "request_attempts"}
    assert _keyword_only(IndexedTFRecordDataset.__init__) == {"verify", "skip_corrupt"} | remote


def test_datasets_positionally_as_the_tfrecord_package_calls_them(tmp_path):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import IndexedTFRecordDataset, MultiTFRecordDataset, TFRecordDataset

    _write(tmp_path / "a.tfrecord.gz")
    _write(tmp_path / "b.tfrecord.gz", n=3)
    path = str(tmp_path / "a.tfrecord.gz")
    # data_path, index_path, description, shuffle_queue_size, transform, sequence_description, compression_type
    ds = TFRecordDataset(path, None, {"id": "int"}, None, None, None, None)
    assert [int(r["id"][0]) for r in ds] == list(range(5))  # None = gzip from the name
    assert ds.options.compression == "auto" and ds.compression_type is None and ds.description == {"id": "int"}
    assert ds.options.description == {"id": "int"} and ds.strict is False and ds.skip_corrupt is False
    assert [int(r["id"][0]) for r in TFRecordDataset(path, None, ["id"], None, None, None, "gzip")] == list(range(5))
    # + splits before description; infinite last
    multi = MultiTFRecordDataset(
        str(tmp_path / "{}.tfrecord.gz"), None, {"a": 1.0, "b": 1.0}, ["id"], None, None, None, None, False
    )
    assert sorted(int(r["id"][0]) for r in multi) == sorted(list(range(5)) + list(range(3)))
    plain = _write(tmp_path / "c.tfrecord")
    indexed = IndexedTFRecordDataset(plain, None, ["id"], None, None, None, verify=False)
    assert [int(indexed[i]["id"][0]) for i in range(len(indexed))] == list(range(5)) and indexed.verify is False
    with pytest.raises(TypeError):
        IndexedTFRecordDataset(plain, None, ["id"], None, None, None, False)  # verify is keyword-only


def test_datasets_build_their_options_once_and_validate_them(tmp_path):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import IndexedTFRecordDataset, TFRecordDataset

    path = _write(tmp_path / "a.tfrecord")
    with pytest.raises(ValueError, match="description: feature 'id': unknown kind"):
        TFRecordDataset(path, None, {"id": "double"})
    with pytest.raises(TypeError, match="skip_corrupt must be True or False"):
        TFRecordDataset(path, None, skip_corrupt="yes")
    with pytest.raises(ValueError, match="unknown compression"):
        IndexedTFRecordDataset(path, None, compression_type="lz4")
    ds = TFRecordDataset(path, None, {"id": "int"}, sequence_description=None, strict=True)
    copy = pickle.loads(pickle.dumps(ds))  # what a spawned DataLoader worker gets
    assert copy.options == ds.options and copy.strict is True
    with pytest.raises(AttributeError):
        ds.strict = False  # the options are fixed at construction: no silent no-op
    assert [int(r["id"][0]) for r in copy] == list(range(5))


def test_skip_corrupt_reaches_the_reader(tmp_path):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    path = _write(tmp_path / "a.tfrecord")
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0xFF  # the last record's payload CRC
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptRecordError):
        list(TFRecordDataset(path, None, ["id"]))
    ds = TFRecordDataset(path, None, ["id"], skip_corrupt=True)
    assert [int(r["id"][0]) for r in ds] == list(range(4)) and ds.corrupt_records == 1


def test_normalised_descriptions_are_read_only_and_travel():
    import copy

    options = ReadOptions(description={"id": "int"})
    for change in (
        lambda d: d.__setitem__("x", None),
        lambda d: d.update(x=None),
        lambda d: d.pop("id"),
        lambda d: d.clear(),
        lambda d: d.setdefault("x"),
        lambda d: d.__delitem__("id"),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change(options.description)
    assert options.description == {"id": "int"}
    for twin in (pickle.loads(pickle.dumps(options.description)), copy.deepcopy(options.description)):
        assert twin == {"id": "int"} and type(twin) is type(options.description)
    assert dict(options.description) | {"x": None} == {"id": "int", "x": None}  # a copy is a plain dict
