"""tfx_bsl side of the Parquet -> TFRecord benchmarks, run by the interpreter given with
--tfx-python (a venv with tfx-bsl, which brings tensorflow; `make bench-tfx` makes one).

Usage: python _tfx_side.py PARQUET OUT_PREFIX SHARDS

Reads the Parquet file batch by batch, makes every column a list column (tfx_bsl's
RecordBatchToExamplesEncoder takes only ListArray / LargeListArray columns of int, float or
binary: a scalar column becomes a list of one value and a string column binary, zero-copy), encodes with tfx_bsl and writes with TensorFlow's
TFRecordWriter, round robin over SHARDS files. Prints one JSON object: rows/s for encoding
alone (CPU time) and for read + encode + write (wall and CPU time), in-process (the encoder is built
without a TFMD schema: it needs one only for ragged features, which this data has none of).
"""

import json
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf
from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)

SRC, PREFIX, SHARDS = sys.argv[1], sys.argv[2], int(sys.argv[3])


def as_lists(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Scalar columns -> list<T> columns of one value each, strings as binary (what tfx_bsl
    accepts; both zero-copy)."""
    columns = []
    for col in batch.columns:
        if pa.types.is_string(col.type):
            col = col.cast(pa.binary())
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            columns.append(col)
        else:
            offsets = pa.array(np.arange(len(col) + 1, dtype=np.int32))
            columns.append(pa.ListArray.from_arrays(offsets, col))
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def batches():
    return pq.ParquetFile(SRC).iter_batches(batch_size=65536)


encoder = RecordBatchToExamplesEncoder()
encoder.encode(as_lists(next(iter(batches()))))  # warm up

start = time.process_time()
rows = 0
for b in batches():
    encoder.encode(as_lists(b))
    rows += b.num_rows
encode_only = rows / (time.process_time() - start)

start = time.perf_counter()
cpu = time.process_time()
writers = [tf.io.TFRecordWriter(f"{PREFIX}-{i:05d}-of-{SHARDS:05d}.tfrecord") for i in range(SHARDS)]
rows = 0
for i, b in enumerate(batches()):
    w = writers[i % SHARDS]
    for record in encoder.encode(as_lists(b)):
        w.write(record)
    rows += b.num_rows
for w in writers:
    w.close()
end_to_end = rows / (time.perf_counter() - start)
end_to_end_cpu = rows / (time.process_time() - cpu)
print(
    json.dumps(
        {
            "encode_rows_per_s": encode_only,
            "rows_per_s": end_to_end,
            "rows_per_cpu_s": end_to_end_cpu,
            "rows": rows,
            "tfx_bsl": __import__("tfx_bsl").__version__,
            "tensorflow": tf.__version__,
        }
    )
)
