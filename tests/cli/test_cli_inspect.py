"""The modules under the command: record-type detection, statistics, description and Arrow schema
inference (`tfrecord_beam.cli.inspection`), and the text helpers (`tfrecord_beam.cli._format`)."""

from __future__ import annotations

import gzip
import io
import struct

import numpy as np
import pyarrow as pa
import pytest
from helpers.inspect_stats import batched_stats_of, stats_of

from tfrecord_beam.cli import _format as fmt
from tfrecord_beam.cli._images import image_info
from tfrecord_beam.cli.inspection import (
    EXAMPLE,
    INVALID,
    SEQUENCE_EXAMPLE,
    SchemaInferenceError,
    collect_stats,
    count_records,
    index_status,
    infer_arrow_schema,
    infer_description,
    infer_schema,
    parse_record,
)
from tfrecord_beam.example import decode_example, decode_sequence_example, encode_example, encode_sequence_example
from tfrecord_beam.index import create_index, default_index_path
from tfrecord_beam.records import write_records

# -- record type -------------------------------------------------------------------------------


def test_parse_record_types():
    example = encode_example({"a": (1, "int")})
    assert parse_record(example)[0] == EXAMPLE
    assert (
        parse_record(encode_sequence_example({"a": (1, "int")}, {"t": ([[1], [2, 3]], "int")}))[0] == SEQUENCE_EXAMPLE
    )
    assert parse_record(b"")[0] == EXAMPLE  # an empty Example
    assert parse_record(b"\xff\xff\xff")[0] == INVALID
    # field 2 that is no FeatureLists: still an Example with an unknown field
    rtype, features, lists = parse_record(example + b"\x12\x03\xff\xff\xff")
    assert rtype == EXAMPLE and list(features) == ["a"] and lists is None


def test_sequence_dataset_counts_context_only_records():
    stats = stats_of(
        [
            encode_sequence_example({"n": (1, "int")}, {"t": ([[1], [2]], "int")}),
            encode_example({"n": (2, "int")}),  # a SequenceExample with only a context is the same bytes
        ]
    )
    assert stats.record_type == SEQUENCE_EXAMPLE and stats.feature_section == "context"
    assert stats.features["n"].records == 2 and stats.feature_lists["t"].records == 1
    assert stats.feature_lists["t"].steps == (2, 2)


def test_invalid_and_empty_datasets():
    assert stats_of([]).record_type == "empty"
    assert stats_of([b"\xff\xff"]).record_type == INVALID


# -- statistics --------------------------------------------------------------------------------


def test_feature_statistics():
    stats = stats_of(
        [
            encode_example(
                {"x": ([1.0, float("nan"), -2.5], "float"), "i": ([5, -7], "int"), "b": (b"\x89PNGjunk", "byte")}
            ),
            encode_example({"x": ([4.0], "float"), "b": ([b"hello", b""], "byte")}),
        ]
    )
    x, i, b = stats.features["x"], stats.features["i"], stats.features["b"]
    assert (x.records, x.values, x.values_mean) == (2, (1, 3), 2.0)
    assert x.float_range == (-2.5, 4.0) and x.nan_count == 1
    assert (i.records, i.int_range) == (1, (-7, 5))
    assert b.bytes_count == 3 and b.bytes_length == (0, 8) and b.non_utf8 == 1
    assert b.sample == b"\x89PNGjunk"
    d = x.to_dict()
    assert d["min"] == -2.5 and d["max"] == 4.0 and d["nan_count"] == 1


def _varied_examples(n: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        features = {"id": (i, "int")}
        if i % 3:
            features["score"] = (
                [float(v) for v in rng.normal(size=i % 4)] + ([float("nan")] if i % 7 == 0 else []),
                "float",
            )
        if i % 5 != 1:
            features["name"] = ([f"n{i}".encode(), b"\xff\xfe" if i % 11 == 0 else b""], "byte")
        if i % 13 == 0:
            features["img"] = (b"\x89PNG\r\n\x1a\n" + bytes(20), "byte")
        if i % 17 == 0:
            features[f"rare{i % 2}"] = ([-(2**63), 2**63 - 1], "int")
        if i % 19 == 0:
            features["empty"] = ([], "float")
        out.append(encode_example(features))
    return out


def _kindless(name: str, value: bytes = b"") -> bytes:
    """An Example whose feature `name` has no kind set (an empty Feature message)."""
    entry = b"\x0a" + bytes([len(name)]) + name.encode() + b"\x12\x00"
    return b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry + value


@pytest.mark.parametrize("batch", [1, 7, 500])
def test_batched_statistics_equal_the_per_record_ones(batch, engine):
    """The batched decoder's statistics are those of the per-record parse, whatever the data:
    features that come and go, kind-less and mixed-kind features, NaN, non-UTF-8 bytes, images,
    an unusual encoding (unpacked ints), SequenceExamples and invalid records in between."""
    examples = _varied_examples(300, seed=batch)
    unpacked_int = b"\x0a\x0e\x0a\x0c\x0a\x02id\x12\x06\x1a\x04\x08\x05\x08\x06"  # id: [5, 6], unpacked
    assert decode_example(unpacked_int)["id"].tolist() == [5, 6]
    mixed_kind = encode_example({"id": (1.5, "float")})
    sequence = encode_sequence_example({"id": (3, "int")}, {"steps": ([[1, 2], [3]], "int")})
    data = examples[:100] + [_kindless("id"), _kindless("ghost"), unpacked_int, mixed_kind] + examples[100:200]
    for extra in ([], [b"\xff\xff\xff"], [sequence]):
        payloads = data + extra + examples[200:]
        assert batched_stats_of(payloads, batch).to_dict() == stats_of(payloads).to_dict()


def test_batched_statistics_of_plain_examples_take_the_batched_way(monkeypatch, engine):
    """Regular Example data goes the batched way: the compiled statistics take every record;
    on the pure engine the per-record parse only learns features for the batched decoder."""
    from tfrecord_beam.cli import _stats

    parsed = []
    real = _stats.parse_record
    monkeypatch.setattr(_stats, "parse_record", lambda p: parsed.append(p) or real(p))
    payloads = _varied_examples(2000, seed=1)
    batched = batched_stats_of(payloads, 1000)
    # pure: one record per new feature at most (id, score, name, img, rare0/1, empty)
    assert len(parsed) <= (0 if engine == "native" else 8)
    monkeypatch.setattr(_stats, "parse_record", real)
    assert batched.to_dict() == stats_of(payloads).to_dict()


@pytest.mark.parametrize("corrupt_at, limit", [(None, None), (1200, None), (None, 700)])
def test_scan_file_decoding_ahead_takes_the_per_record_statistics(tmp_path, monkeypatch, engine, corrupt_at, limit):
    """scan_file decodes the next chunk in a thread while it takes this one's statistics. Over
    many small chunks whose features come and go (a decode started before the chunk ahead
    taught a feature is made again), the statistics are the per-record parse's; a corrupt
    record after many chunks leaves every record before it counted, and the error names it; a
    limit inside a chunk counts just that many."""
    import functools

    from tfrecord_beam.cli import _scan
    from tfrecord_beam.records import RecordReader

    payloads = _varied_examples(1500, seed=3)
    path = tmp_path / "varied.tfrecord"
    write_records(str(path), payloads)
    if corrupt_at is not None:
        data = bytearray(path.read_bytes())
        at = sum(16 + len(p) for p in payloads[:corrupt_at]) + 12  # the record's first payload byte
        data[at] ^= 0xFF
        path.write_bytes(bytes(data))
    monkeypatch.setattr(_scan, "RecordReader", functools.partial(RecordReader, chunk_size=4096))
    chunks = []  # one progress call per chunk accounted
    stats = collect_stats([str(path)], limit=limit, progress=lambda *done: chunks.append(done))
    info = stats.files[0]
    counted = corrupt_at or limit or len(payloads)
    assert info.records == counted and info.complete == (counted == len(payloads))
    if corrupt_at is not None:
        assert f"record {corrupt_at}" in info.error and str(path) in info.error, info.error
    got, want = stats.to_dict(), stats_of(payloads[:counted]).to_dict()
    got.pop("files"), want.pop("files")
    assert got == want
    assert len(chunks) >= 10  # many chunks went through the look-ahead


# -- description and Arrow schema ---------------------------------------------------------------


def rows_for(payloads, schema):
    """Rows as a converter following the documented rules would build them."""
    rows = []
    for payload in payloads:
        rtype, features, lists = parse_record(payload)
        row = {}
        for field in schema:
            source = lists if field.metadata[b"tfrecord.section"] == b"feature_lists" else features
            if source is None or field.name not in source:
                row[field.name] = None
            elif field.metadata[b"tfrecord.section"] == b"feature_lists":
                _, steps = decode_sequence_example(payload)
                row[field.name] = [np.atleast_1d(s).tolist() for s in steps[field.name]]
            else:
                value = decode_example(payload)[field.name]
                values = [] if value is None else np.atleast_1d(value).tolist()
                row[field.name] = values if pa.types.is_list(field.type) else values[0]
        rows.append(row)
    return rows


def test_arrow_schema_rules_and_it_holds_the_data():
    payloads = [
        encode_example(
            {
                "scalar": (1, "int"),
                "opt": (0.5, "float"),
                "vary": ([1, 2], "int"),
                "fixed": ([1.0, 2.0, 3.0], "float"),
                "text": ("héllo", "byte"),
                "blob": (b"\xff", "byte"),
            }
        ),
        encode_example(
            {
                "scalar": (2, "int"),
                "vary": ([3], "int"),
                "fixed": ([4.0, 5.0, 6.0], "float"),
                "text": ("x", "byte"),
                "blob": (b"\x00", "byte"),
            }
        ),
    ]
    stats = stats_of(payloads)
    schema = infer_arrow_schema(stats)
    types = {f.name: f.type for f in schema}
    assert types == {
        "blob": pa.binary(),
        "fixed": pa.list_(pa.float32()),
        "opt": pa.float32(),
        "scalar": pa.int64(),
        "text": pa.binary(),
        "vary": pa.list_(pa.int64()),
    }
    assert all(f.nullable for f in schema)
    assert schema.metadata[b"tfrecord.record_type"] == b"Example"
    assert infer_arrow_schema(stats, strings=True).field("text").type == pa.string()
    assert infer_arrow_schema(stats, strings=True).field("blob").type == pa.binary()
    table = pa.Table.from_pylist(rows_for(payloads, schema), schema=schema)
    assert table.column("opt").to_pylist() == [0.5, None]
    assert table.column("vary").to_pylist() == [[1, 2], [3]]


def test_arrow_schema_sequence_example():
    payloads = [
        encode_sequence_example({"len": (2, "int")}, {"tok": ([[1], [2, 3]], "int"), "w": ([b"a", b"b"], "byte")}),
        encode_sequence_example({"len": (0, "int")}, {"tok": ([], "int")}),
    ]
    stats = stats_of(payloads)
    schema = infer_arrow_schema(stats)
    assert schema.field("len").type == pa.int64()
    assert schema.field("tok").type == pa.list_(pa.list_(pa.int64()))
    assert schema.field("w").type == pa.list_(pa.list_(pa.binary()))
    assert schema.field("tok").metadata[b"tfrecord.section"] == b"feature_lists"
    assert schema.field("len").metadata[b"tfrecord.section"] == b"context"
    table = pa.Table.from_pylist(rows_for(payloads, schema), schema=schema)
    assert table.column("tok").to_pylist() == [[[1], [2, 3]], []]
    described = infer_description(stats)
    assert described.description == {"len": "int"}
    assert described.sequence_description == {"tok": "int", "w": "byte"}


def test_no_kind_mixed_kinds_and_name_clash():
    no_kind = b"\n\x0b\n\t\n\x07no_kind\x12\x00"  # Features{feature{"no_kind": Feature{}}}
    stats = stats_of([no_kind])
    assert stats.features["no_kind"].kind is None
    assert infer_arrow_schema(stats).field("no_kind").type == pa.list_(pa.null())
    assert infer_description(stats).description == {} and "never has a kind" in infer_description(stats).notes[0]

    mixed = stats_of([encode_example({"m": (1, "int")}), encode_example({"m": (1.0, "float")})])
    with pytest.raises(SchemaInferenceError, match="'m' has mixed kinds"):
        infer_arrow_schema(mixed)
    assert "m" not in infer_description(mixed).description

    clash = stats_of([encode_sequence_example({"x": (1, "int")}, {"x": ([[1]], "int")})])
    with pytest.raises(SchemaInferenceError, match="both as context feature and feature list"):
        infer_arrow_schema(clash)


def test_infer_schema_from_files(tmp_path):
    for shard in range(2):
        write_records(str(tmp_path / f"part-{shard}.tfrecord"), [encode_example({"v": ([shard] * (shard + 1), "int")})])
    schema = infer_schema(str(tmp_path / "part-*.tfrecord"))
    assert schema.field("v").type == pa.list_(pa.int64())  # 1 value in one shard, 2 in the other
    assert infer_schema(str(tmp_path / "part-0.tfrecord")).field("v").type == pa.int64()
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes((tmp_path / "part-1.tfrecord").read_bytes()[:-3])
    with pytest.raises(Exception, match="bad.tfrecord"):
        infer_schema(str(bad))


# -- index status and counting --------------------------------------------------------------------


def test_index_status_and_count(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    write_records(path, [encode_example({"i": (i, "int")}) for i in range(5)])
    assert index_status(path).state == "absent"
    assert count_records(path) == (5, "scan")
    create_index(path)
    assert index_status(path).state == "valid"
    assert count_records(path) == (5, "index")
    old_index = open(default_index_path(path), "rb").read()
    write_records(path, [encode_example({"i": (i, "int")}) for i in range(6)])  # drops the old index ...
    with open(default_index_path(path), "wb") as handle:  # ... put it back: now stale
        handle.write(old_index)
    assert index_status(path).state == "stale"
    assert count_records(path) == (6, "scan")
    with open(default_index_path(path), "w") as handle:
        handle.write("not an index\n")
    assert index_status(path).state == "invalid"
    gz = str(tmp_path / "d.tfrecord.gz")
    write_records(gz, [b""] * 3, index_path=True)
    assert index_status(gz).state == "unchecked"
    assert count_records(gz) == (3, "index")  # block-gzip: its member table ties the index to the file
    assert collect_stats([gz]).files[0].index.state == "valid"  # a full read checks it exactly
    create_index(gz, compression="gzip")  # the same index, table rebuilt from the members' headers
    assert count_records(gz) == (3, "index")
    with open(gz, "ab") as handle:  # the file grew: the table no longer ends at its end
        handle.write(gzip.compress(b""))
    assert count_records(gz) == (3, "scan")


# -- text helpers ------------------------------------------------------------------------------


def test_image_info():
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 7, 9)
    assert image_info(png) == ("PNG", 7, 9)
    assert image_info(png[:10]) == ("PNG", None, None)
    sof = b"\xff\xc2" + struct.pack(">HBHH", 17, 8, 30, 40)
    assert image_info(b"\xff\xd8\xff\xe0\x00\x04ab" + sof) == ("JPEG", 40, 30)
    assert image_info(b"GIF89a" + struct.pack("<HH", 5, 6)) == ("GIF", 5, 6)
    assert image_info(b"hello") is None


def test_shorten_bytes_and_values():
    assert fmt.shorten_bytes(b"abc") == "'abc'"
    assert fmt.shorten_bytes(b"\x00\xff") == "b'\\x00\\xff'"
    long = fmt.shorten_bytes(b"a" * 100, 10)
    assert long.startswith("'aaaaaaaaaa'") and long.endswith("(100 bytes)")
    assert fmt.shorten_bytes(b"abc", 10, total_length=5000).endswith("(5000 bytes)")
    assert fmt.format_values("int", list(range(20)), max_items=3) == "[0, 1, 2, ... 17 more]"
    assert fmt.format_values(None, []) == "(no kind set)"
    assert fmt.human_bytes(1536) == "1.5 KiB" and fmt.human_bytes(12) == "12 B"


def test_format_table_aligns():
    text = fmt.format_table(["A", "NUM"], [["x", 1], ["long", 100]], right=[1])
    lines = text.splitlines()
    assert lines[0] == "A     NUM" and lines[2] == "x       1" and lines[3] == "long  100"


def test_progress_is_throttled_and_optional():
    stream = io.StringIO()
    progress = fmt.Progress(stream=stream, delay=0, interval=0)
    progress(1, 2, "f.tfrecord", 10, 2048)
    assert stream.getvalue() == "[1/2] f.tfrecord: 10 records, 2.0 KiB, 0 s\n"
    quiet = io.StringIO()
    fmt.Progress(enabled=False, stream=quiet, delay=0)(1, 1, "f", 1, None)
    late = io.StringIO()
    fmt.Progress(stream=late, delay=60)(1, 1, "f", 1, None)
    assert quiet.getvalue() == "" and late.getvalue() == ""


def test_progress_off_a_terminal_is_one_line_per_10_seconds(monkeypatch):
    """A log (stderr not a terminal) gets a line every 10 s at most, whatever the interval asked."""
    clock = [1000.0]
    monkeypatch.setattr(fmt.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    progress = fmt.Progress(stream=stream, delay=1.0, interval=1.0)
    for step in range(600):  # a minute, reported every 0.1 s
        clock[0] += 0.1
        progress(1, 1, "f", step, None)
    lines = stream.getvalue().splitlines()
    assert 5 <= len(lines) <= 6
    assert [int(line.rsplit(" ", 2)[1]) for line in lines] == [1, 11, 21, 31, 41, 51][: len(lines)]


def test_old_import_paths_are_the_cli_modules():
    """`tfrecord_beam.inspection` / `tfrecord_beam.verify` (the paths before the CLI became a
    package) hand out the very objects of `tfrecord_beam.cli.inspection` / `.verify`."""
    import tfrecord_beam.cli.inspection as inspection
    import tfrecord_beam.cli.verify as verify
    from tfrecord_beam.inspection import collect_stats as old_collect
    from tfrecord_beam.verify import VerifyResult as OldResult
    from tfrecord_beam.verify import verify_file as old_verify

    assert old_collect is inspection.collect_stats
    assert old_verify is verify.verify_file and OldResult is verify.VerifyResult
    with pytest.raises(ImportError):
        from tfrecord_beam.inspection import no_such_name  # noqa: F401
