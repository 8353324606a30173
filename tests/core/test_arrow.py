"""Arrow <-> Example mapping: every row of the type table, the errors, and round trips.

Payloads are compared byte for byte with `example.encode_example` /
`encode_sequence_example` (upb deterministic serialization) of the same values.
"""

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest

from tfrecord_beam import arrow, columnar
from tfrecord_beam.arrow import ArrowConversionError, ExampleEncoder, examples_to_record_batch, record_batch_to_examples
from tfrecord_beam.example import decode_example, encode_example, encode_sequence_example


def one_column(arr, **options):
    return record_batch_to_examples(pa.RecordBatch.from_pydict({"c": arr}), **options)


def expect(payloads, rows, kind):
    """Each payload equals encode_example({'c': (row, kind)}), or the empty Example for None."""
    assert len(payloads) == len(rows)
    for got, row in zip(payloads, rows):
        want = encode_example({} if row is None else {"c": (row, kind)})
        assert got == want, (row, got, want)


INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@pytest.mark.parametrize("t", INT_TYPES, ids=str)
def test_ints_of_every_width(t):
    info = np.iinfo(np.dtype(str(t)))
    values = [int(info.min), 0, None, int(min(info.max, 2**63 - 1)), 1]
    expect(one_column(pa.array(values, t)), [None if v is None else [v] for v in values], "int")


def test_bool_is_int64():
    expect(one_column(pa.array([True, False, None])), [[1], [0], None], "int")


def test_uint64_above_int64_max_names_column_and_row():
    arr = pa.array([1, 2, 2**63, 5], pa.uint64())
    with pytest.raises(ArrowConversionError, match=r"column 'c', row 2: value 9223372036854775808"):
        one_column(arr)
    lists = pa.array([[1], [], [3, 2**64 - 1]], pa.list_(pa.uint64()))
    with pytest.raises(ArrowConversionError, match=r"column 'c', row 2"):
        one_column(lists)


@pytest.mark.parametrize("t", [pa.float16(), pa.float32()], ids=str)
def test_float16_and_float32(t):
    values = [0.5, -0.0, None, float("inf"), 1.25]
    arr = pa.array(
        np.array([v if v is not None else 0 for v in values], dtype={"halffloat": np.float16}.get(str(t), np.float32)),
        mask=np.array([v is None for v in values]),
    )
    expect(one_column(arr), [None if v is None else [v] for v in values], "float")


def test_float64_rounds_to_float32():
    values = [0.1, 1e300, -1e-300, None, float("nan")]
    payloads = one_column(pa.array(values, pa.float64()))
    with np.errstate(over="ignore"):  # 1e300 rounds to inf, on purpose
        expect(payloads, [None if v is None else [np.float32(v)] for v in values], "float")
    assert decode_example(payloads[0])["c"][0] == np.float32(0.1)


# the view types exist from pyarrow 16 on (`make test-oldest` runs pyarrow 14, which has none)
VIEWS = hasattr(pa, "string_view")


@pytest.mark.parametrize("t", [pa.string(), pa.large_string()] + ([pa.string_view()] if VIEWS else []), ids=str)
def test_strings_are_utf8_bytes(t):
    values = ["a", "", None, "héllo ☃", "x" * 300]
    expect(one_column(pa.array(values, t)), [None if v is None else [v.encode()] for v in values], "byte")


def test_dictionary_string():
    arr = pa.array(["b", "a", None, "b"]).dictionary_encode()
    expect(one_column(arr), [[b"b"], [b"a"], None, [b"b"]], "byte")


@pytest.mark.parametrize("t", [pa.binary(), pa.large_binary()] + ([pa.binary_view()] if VIEWS else []), ids=str)
def test_binary(t):
    values = [b"\x00\xff", b"", None, bytes(range(256))]
    expect(one_column(pa.array(values, t)), [None if v is None else [v] for v in values], "byte")


def test_fixed_size_binary():
    expect(one_column(pa.array([b"ab", None, b"\x00\x01"], pa.binary(2))), [[b"ab"], None, [b"\x00\x01"]], "byte")


def test_temporal_types_in_their_unit():
    ts = pa.array([1_600_000_000_123_456, None, -5], pa.timestamp("us", tz="UTC"))
    expect(one_column(ts), [[1_600_000_000_123_456], None, [-5]], "int")
    days = pa.array([datetime.date(2020, 1, 1), datetime.date(1969, 12, 31)], pa.date32())
    expect(one_column(days), [[18262], [-1]], "int")
    expect(one_column(pa.array([1_577_836_800_000], pa.date64())), [[1_577_836_800_000]], "int")
    expect(one_column(pa.array([7, -3], pa.duration("ms"))), [[7], [-3]], "int")
    expect(one_column(pa.array([61], pa.time32("s"))), [[61]], "int")


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list], ids=["list", "large_list"])
def test_lists_are_multi_valued(list_type):
    rows = [[1, -2, 3], [], None, [2**62]]
    expect(one_column(pa.array(rows, list_type(pa.int64()))), [[1, -2, 3], [], None, [2**62]], "int")
    frows = [[0.5], None, [], [1.5, 2.5]]
    expect(one_column(pa.array(frows, list_type(pa.float64()))), frows, "float")
    srows = [["a", "bc"], [], None, [""]]
    expect(
        one_column(pa.array(srows, list_type(pa.string()))),
        [[s.encode() for s in r] if r is not None else None for r in srows],
        "byte",
    )


def test_fixed_size_list():
    arr = pa.array([[1, 2], None, [3, 4]], pa.list_(pa.int32(), 2))
    expect(one_column(arr), [[1, 2], None, [3, 4]], "int")


def test_sliced_batches_and_lists():
    arr = pa.array([[9], [1, 2], None, [3], ["x"] and [4, 5]], pa.list_(pa.int64()))
    expect(one_column(arr.slice(1, 3)), [[1, 2], None, [3]], "int")
    strs = pa.array(["skip", "a", None, "bc"]).slice(1)
    expect(one_column(strs), [[b"a"], None, [b"bc"]], "byte")


def test_empty_list_writes_feature_without_values_and_null_cell_omits_it():
    payloads = one_column(pa.array([[], None], pa.list_(pa.string())))
    assert payloads[0] == encode_example({"c": ([], "byte")})
    assert list(decode_example(payloads[0])) == ["c"] and len(decode_example(payloads[0])["c"]) == 0
    assert decode_example(payloads[1]) == {}


def test_null_inside_a_list_names_column_and_row():
    with pytest.raises(ArrowConversionError, match=r"column 'c', row 2: null value inside a list"):
        one_column(pa.array([[1], [], [2, None]], pa.list_(pa.int64())))


def test_struct_is_an_error_unless_flattened():
    arr = pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "b"}])
    with pytest.raises(ArrowConversionError, match=r"column 's'.*flatten_structs"):
        record_batch_to_examples(pa.RecordBatch.from_pydict({"s": arr}))
    payloads = record_batch_to_examples(pa.RecordBatch.from_pydict({"s": arr}), flatten_structs=True)
    assert payloads[0] == encode_example({"s.x": ([1], "int"), "s.y": ([b"a"], "byte")})
    assert payloads[1] == encode_example({})
    assert payloads[2] == encode_example({"s.y": ([b"b"], "byte")})


def test_nested_struct_flattening_and_rename():
    arr = pa.array([{"a": {"b": 1}}])
    payloads = record_batch_to_examples(
        pa.RecordBatch.from_pydict({"s": arr}), flatten_structs=True, rename={"s.a.b": "deep"}
    )
    assert payloads == [encode_example({"deep": ([1], "int")})]


def test_decimal_is_an_error_unless_mapped():
    arr = pa.array([decimal.Decimal("12.34"), None], pa.decimal128(6, 2))
    with pytest.raises(ArrowConversionError, match=r"column 'c': decimal"):
        one_column(arr)
    expect(one_column(arr, decimal_as="float"), [[np.float32(12.34)], None], "float")
    expect(one_column(arr, decimal_as="bytes"), [[b"12.34"], None], "byte")
    with pytest.raises(ValueError, match="decimal_as"):
        one_column(arr, decimal_as="text")


def test_map_union_and_nested_lists_are_errors():
    with pytest.raises(ArrowConversionError, match=r"column 'c': map"):
        one_column(pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())))
    with pytest.raises(ArrowConversionError, match=r"column 'c'.*sequence_columns"):
        one_column(pa.array([[[1]]]))
    with pytest.raises(ArrowConversionError, match=r"column 'c'.*must be list<list"):
        one_column(pa.array([[1]]), sequence_columns=["c"])


def test_duplicate_column_names_are_errors():
    batch = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(ArrowConversionError, match=r"column 'a' appears more than once"):
        record_batch_to_examples(batch)
    batch = pa.RecordBatch.from_pydict({"a": [1], "b": [2]})
    with pytest.raises(ArrowConversionError, match=r"column 'b' would be written as feature 'a'"):
        record_batch_to_examples(batch, rename={"b": "a"})
    batch = pa.RecordBatch.from_pydict({"s": pa.array([{"x": 1}]), "s.x": [2]})
    with pytest.raises(ArrowConversionError, match=r"duplicate feature name"):
        record_batch_to_examples(batch, flatten_structs=True)


def test_unknown_columns_rename_and_sequence_columns():
    schema = pa.schema([("a", pa.int64())])
    with pytest.raises(ArrowConversionError, match=r"unknown column\(s\) \['zz'\]"):
        ExampleEncoder(schema, columns=["zz"])
    with pytest.raises(ArrowConversionError, match=r"rename unknown column"):
        ExampleEncoder(schema, rename={"zz": "a"})
    with pytest.raises(ArrowConversionError, match=r"unknown sequence column"):
        ExampleEncoder(schema, sequence_columns=["zz"])


def test_column_selection_keeps_the_others_out():
    batch = pa.RecordBatch.from_pydict({"a": [1], "b": ["x"], "c": [0.5]})
    assert record_batch_to_examples(batch, columns=["c", "a"]) == [encode_example({"a": 1, "c": (0.5, "float")})]


def test_null_type_column_is_never_written():
    batch = pa.RecordBatch.from_pydict({"n": pa.nulls(2), "a": [1, 2]})
    assert record_batch_to_examples(batch) == [encode_example({"a": 1}), encode_example({"a": 2})]


def test_sequence_columns_become_feature_lists():
    batch = pa.RecordBatch.from_pydict(
        {
            "ctx": [1, 2, None],
            "tokens": pa.array([[["a"], ["b", "c"]], None, []], pa.list_(pa.list_(pa.string()))),
            "vals": pa.array([[[0.5]], [[], [1.5]], None], pa.large_list(pa.list_(pa.float32()))),
        }
    )
    payloads = record_batch_to_examples(batch, sequence_columns=["tokens", "vals"])
    assert payloads[0] == encode_sequence_example(
        {"ctx": ([1], "int")}, {"tokens": ([[b"a"], [b"b", b"c"]], "byte"), "vals": ([[0.5]], "float")}
    )
    assert payloads[1] == encode_sequence_example({"ctx": ([2], "int")}, {"vals": ([[], [1.5]], "float")})
    assert payloads[2] == encode_sequence_example({}, {"tokens": ([], "byte")})


def test_sequence_without_any_list_in_a_row_omits_feature_lists():
    batch = pa.RecordBatch.from_pydict({"t": pa.array([None], pa.list_(pa.list_(pa.int64())))})
    assert record_batch_to_examples(batch, sequence_columns=["t"]) == [encode_sequence_example({}, {})]


def test_null_inside_a_sequence_step_names_the_row():
    batch = pa.RecordBatch.from_pydict({"t": pa.array([[[1]], [[2], None]], pa.list_(pa.list_(pa.int64())))})
    with pytest.raises(ArrowConversionError, match=r"column 't', row 1: null step inside a sequence"):
        record_batch_to_examples(batch, sequence_columns=["t"])
    batch = pa.RecordBatch.from_pydict({"t": pa.array([[[1]], [[2, None]]], pa.list_(pa.list_(pa.int64())))})
    with pytest.raises(ArrowConversionError, match=r"column 't', row 1: null value inside a list"):
        record_batch_to_examples(batch, sequence_columns=["t"])


def test_feature_names_in_upb_map_order():
    names = ["b", "a", "ab", "abc", "B", "aa", "a.b", "z", "", "é"]
    batch = pa.RecordBatch.from_pydict({n: [i] for i, n in enumerate(names)})
    assert record_batch_to_examples(batch) == [encode_example({n: i for i, n in enumerate(names)})]


def test_table_input_numbers_rows_across_batches():
    table = pa.Table.from_batches(
        [
            pa.RecordBatch.from_pydict({"u": pa.array([1, 2], pa.uint64())}),
            pa.RecordBatch.from_pydict({"u": pa.array([3, 2**64 - 1], pa.uint64())}),
        ]
    )
    with pytest.raises(ArrowConversionError, match=r"row 3"):
        record_batch_to_examples(table)


def test_empty_batch():
    assert record_batch_to_examples(pa.RecordBatch.from_pydict({"a": pa.array([], pa.int64())})) == []


# ---------------------------------------------------------------------------------------------
# Examples -> Arrow


def test_round_trip_with_schema_restores_types():
    batch = pa.RecordBatch.from_pydict(
        {
            "i8": pa.array([1, None, -3], pa.int8()),
            "flag": pa.array([True, False, None]),
            "f64": pa.array([0.5, 1.5, None]),
            "s": pa.array(["a", None, "ccc"]),
            "b": pa.array([b"\x00", b"", None], pa.large_binary()),
            "ts": pa.array([1, 2, None], pa.timestamp("ms")),
            "d": pa.array([1, None, -1], pa.date32()),
            "li": pa.array([[1, 2], [], None], pa.list_(pa.int32())),
            "ls": pa.array([["x"], None, []], pa.large_list(pa.string())),
            "fx": pa.array([[1.0, 2.0], None, [3.0, 4.0]], pa.list_(pa.float32(), 2)),
        }
    )
    back = examples_to_record_batch(record_batch_to_examples(batch), schema=batch.schema)
    assert back.equals(batch), (back.to_pydict(), batch.to_pydict())


def test_inferred_schema():
    payloads = [
        encode_example({"a": 1, "l": [1, 2], "s": b"x"}),
        encode_example({"f": (0.5, "float"), "l": ([], "int")}),
    ]
    back = examples_to_record_batch(payloads)
    assert back.schema == pa.schema(
        [("a", pa.int64()), ("l", pa.list_(pa.int64())), ("s", pa.binary()), ("f", pa.float32())]
    )
    assert back.to_pydict() == {"a": [1, None], "l": [[1, 2], []], "s": [b"x", None], "f": [None, 0.5]}


def test_description_selects_and_checks_kinds():
    payloads = [encode_example({"a": 1, "b": [b"x", b"y"]})]
    back = examples_to_record_batch(payloads, {"b": "byte", "missing": "float"})
    assert back.schema.names == ["b", "missing"]
    assert back.to_pydict() == {"b": [[b"x", b"y"]], "missing": [None]}
    with pytest.raises(TypeError, match=r"record 0: feature 'a' is 'int'"):
        examples_to_record_batch(payloads, {"a": "float"})


def test_scalar_schema_rejects_several_values():
    payloads = [encode_example({"a": [1, 2]})]
    with pytest.raises(ArrowConversionError, match=r"feature 'a', record 0: 2 values"):
        examples_to_record_batch(payloads, schema=pa.schema([("a", pa.int64())]))


def test_sequence_round_trip():
    batch = pa.RecordBatch.from_pydict(
        {
            "ctx": pa.array([1, None], pa.int64()),
            "t": pa.array([[[1], [2, 3]], None], pa.list_(pa.list_(pa.int64()))),
        }
    )
    payloads = record_batch_to_examples(batch, sequence_columns=["t"])
    back = examples_to_record_batch(payloads, sequence=True)
    assert back.to_pydict() == batch.to_pydict()
    assert examples_to_record_batch(payloads, schema=batch.schema, sequence=True).equals(batch)


def test_corrupt_payload_names_the_record():
    from tfrecord_beam.errors import DecodeError

    with pytest.raises(DecodeError, match="record 1"):
        examples_to_record_batch([encode_example({"a": 1}), b"\xff\xff\xff"])


def test_encoder_columns_api_exposes_columnar_form():
    enc = ExampleEncoder(pa.schema([("l", pa.list_(pa.int64()))]))
    (col,), seqs = enc.to_columns(pa.RecordBatch.from_pydict({"l": pa.array([[1, 2], None, [3]])}))
    assert seqs == []
    assert col.values.tolist() == [1, 2, 3]
    assert col.row_splits.tolist() == [0, 2, 2, 3]
    assert col.status.tolist() == [columnar.PRESENT, columnar.MISSING, columnar.PRESENT]
    data, offsets = arrow.serialize_columns([col], None, 3)
    assert len(offsets) == 4 and offsets[-1] == len(data)


@pytest.mark.parametrize("long_pieces", [256, 1 << 40])
def test_large_gathers_are_split_into_slices(monkeypatch, long_pieces):
    """Batches over _GATHER_BYTES copy in row slices, long pieces one slice copy each (or, with
    that path off, by index arrays); the bytes must not change."""
    from tfrecord_beam._engine import _encode

    monkeypatch.setattr(_encode, "_LONG", long_pieces)

    rows = [[bytes([i % 256]) * (i % 300) for _ in range(i % 4)] for i in range(400)]
    batch = pa.RecordBatch.from_pydict(
        {"x": pa.array(rows, pa.list_(pa.binary())), "s": [b"q" * (i % 700) for i in range(400)]}
    )
    want = [encode_example({"x": (r, "byte"), "s": (b"q" * (i % 700), "byte")}) for i, r in enumerate(rows)]
    monkeypatch.setattr(_encode, "_GATHER_BYTES", 1000)
    context, _ = ExampleEncoder(batch.schema).to_columns(batch)
    assert _encode.split_payloads(*_encode.encode_examples(columnar._engine_columns(context), batch.num_rows)) == want


def test_compiled_batch_decoder_matches_the_per_record_path(monkeypatch):
    """With a schema, decoding goes through columnar.decode_examples when it is compiled: same batch."""
    if not arrow._engine.NATIVE:
        pytest.skip("the compiled batch decoder (columnar.decode_examples) is not built here")
    batch = pa.RecordBatch.from_pydict(
        {
            "i": pa.array([1, None, -3], pa.int32()),
            "f": [0.5, None, 2.0],
            "s": ["a", None, ""],
            "l": pa.array([[1, 2], [], None]),
            "b": pa.array([[b"x"], None, [b"", b"yz"]]),
            "ts": pa.array([5, None, 7], pa.timestamp("s")),
        }
    )
    payloads = record_batch_to_examples(batch) + [encode_example({"i": 9})]
    fast = examples_to_record_batch(payloads, schema=batch.schema)
    monkeypatch.setattr(arrow._engine, "NATIVE", False)
    assert fast.equals(examples_to_record_batch(payloads, schema=batch.schema))
    assert fast.slice(0, 3).equals(batch)


def test_null_list_cells_backed_by_values_are_skipped():
    """A null list whose slot still spans values (legal in Arrow) must not leak them."""
    arr = pa.ListArray.from_arrays(
        pa.array([0, 2, 4, 5], pa.int32()), pa.array([1, 2, 3, 4, 5]), mask=pa.array([False, True, False])
    )
    expect(one_column(arr), [[1, 2], None, [5]], "int")
    seq = pa.ListArray.from_arrays(
        pa.array([0, 1, 2, 3], pa.int32()), pa.array([[1], [2, 2], [3]]), mask=pa.array([False, True, False])
    )
    assert record_batch_to_examples(pa.RecordBatch.from_pydict({"s": seq}), sequence_columns=["s"]) == [
        encode_sequence_example({}, {"s": ([[1]], "int")}),
        encode_sequence_example({}, {}),
        encode_sequence_example({}, {"s": ([[3]], "int")}),
    ]
