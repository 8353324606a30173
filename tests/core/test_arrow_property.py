"""Property tests: the vectorised encoder equals per-record upb serialization for random batches."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_beam import columnar
from tfrecord_beam._engine import _encode
from tfrecord_beam._engine._encode import split_payloads, varint_sizes, varints
from tfrecord_beam.arrow import ExampleEncoder, examples_to_record_batch, record_batch_to_examples
from tfrecord_beam.example import encode_example, encode_sequence_example

int64s = st.integers(-(2**63), 2**63 - 1)
floats32 = st.floats(width=32, allow_nan=False)
blobs = st.binary(max_size=140)
names = st.text(alphabet="abAB._é", max_size=4)

LEAVES = {
    "int": (int64s, pa.int64()),
    "float": (floats32, pa.float32()),
    "byte": (blobs, pa.binary()),
}


@st.composite
def batches(draw):
    n = draw(st.integers(0, 12))
    cols = draw(
        st.dictionaries(names, st.tuples(st.sampled_from(sorted(LEAVES)), st.booleans()), min_size=1, max_size=5)
    )
    data, rows = {}, [dict() for _ in range(n)]
    for name, (kind, is_list) in cols.items():
        leaf, arrow_type = LEAVES[kind]
        cell = st.lists(leaf, max_size=5) if is_list else leaf
        values = draw(st.lists(st.one_of(st.none(), cell), min_size=n, max_size=n))
        data[name] = pa.array(values, pa.list_(arrow_type) if is_list else arrow_type)
        for row, v in zip(rows, values):
            if v is not None:
                row[name] = (v if is_list else [v], kind)
    return pa.record_batch(data) if n else pa.RecordBatch.from_arrays(
        [pa.array([], a.type) for a in data.values()], names=list(data)
    ), rows


@settings(max_examples=150, deadline=None)
@given(batches())
def test_encoder_matches_upb(batch_rows):
    """Both engines: the dispatching path (compiled when built) and the numpy twin itself."""
    batch, rows = batch_rows
    want = [encode_example(r) for r in rows]
    assert record_batch_to_examples(batch) == want
    context, _ = ExampleEncoder(batch.schema).to_columns(batch)
    assert split_payloads(*_encode.encode_examples(columnar._engine_columns(context), batch.num_rows)) == want


@settings(max_examples=60, deadline=None)
@given(batches())
def test_round_trip_through_schema(batch_rows):
    batch, _ = batch_rows
    back = examples_to_record_batch(record_batch_to_examples(batch), schema=batch.schema)
    assert back.equals(batch)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.lists(int64s, max_size=3), max_size=3)), min_size=1, max_size=6))
def test_sequences_match_upb(rows):
    batch = pa.record_batch({"s": pa.array(rows, pa.list_(pa.list_(pa.int64())))})
    want = [encode_sequence_example({}, {} if r is None else {"s": (r, "int")}) for r in rows]
    assert record_batch_to_examples(batch, sequence_columns=["s"]) == want


@settings(max_examples=100, deadline=None)
@given(st.lists(int64s, max_size=40))
def test_varints_match_protobuf(values):
    from google.protobuf.internal import encoder

    expected = [encoder._VarintBytes(v & (2**64 - 1)) for v in values]
    data, offsets = varints(np.asarray(values, dtype=np.int64)).materialize()
    assert [bytes(data[a:b]) for a, b in zip(offsets[:-1], offsets[1:])] == expected
    assert varint_sizes(np.asarray(values, dtype=np.int64)).tolist() == [len(e) for e in expected]
