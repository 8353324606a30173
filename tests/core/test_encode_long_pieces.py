"""The numpy twin of the Example encoder copies long pieces (binary values of hundreds of
bytes and more) row by row instead of through per-byte index arrays, which cost 8 bytes of
index per byte copied (issue 11: ~90 MiB for a 4 MiB batch of 16 KiB images under
TFRECORD_BEAM_PURE=1). The bytes must stay those of upb, whatever mix of long and short rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa

from tfrecord_beam._engine import _encode
from tfrecord_beam.arrow import ExampleEncoder
from tfrecord_beam.columnar import _engine_columns
from tfrecord_beam.example import encode_example


def _batch(lengths):
    rng = np.random.default_rng(7)
    blobs = [rng.bytes(n) for n in lengths]
    return pa.record_batch(
        {
            "i": pa.array(np.arange(len(lengths), dtype=np.int64)),
            "blob": pa.array(blobs, pa.binary()),
            "tags": pa.array([[b"a" * (k % 5)] * (k % 3) for k in range(len(lengths))], pa.list_(pa.binary())),
        }
    )


def _expected(batch):
    return [
        encode_example({"i": row["i"], "blob": row["blob"], "tags": (row["tags"], "byte")}) for row in batch.to_pylist()
    ]


def test_long_and_mixed_rows_encode_as_upb():
    for lengths in ([16384] * 40, [0, 1, 300, 5, 70000, 12, 256, 257, 0, 900] * 7, [255, 256] * 30):
        batch = _batch(lengths)
        context, _ = ExampleEncoder(batch.schema).to_columns(batch, 0)
        data, offsets = _encode.encode_examples(_engine_columns(context), batch.num_rows)
        got = [data[a:b].tobytes() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        assert got == _expected(batch)


def test_long_rows_need_no_index_arrays():
    batch = _batch([16384] * 256)  # 4 MiB of payload
    context, _ = ExampleEncoder(batch.schema).to_columns(batch, 0)
    tracemalloc.start()
    try:
        _encode.encode_examples(_engine_columns(context), batch.num_rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * batch.nbytes, f"{peak / 2**20:.1f} MiB to encode a {batch.nbytes / 2**20:.1f} MiB batch"
