"""TensorFlow side of bench_native.py, run by the interpreter given with --tf-python (a venv with
tensorflow-cpu). Prints one JSON object: seconds per operation, medians of `repeats` runs.

Usage: python _tf_side.py DATA_DIR REPEATS
"""

import json
import statistics
import struct
import sys
import time

import tensorflow as tf

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)

DATA, REPEATS = sys.argv[1], int(sys.argv[2])


def payloads(path):
    buf = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(buf):
        (n,) = struct.unpack_from("<Q", buf, pos)
        out.append(buf[pos + 12 : pos + 12 + n])
        pos += 16 + n
    return out


def median_time(fn):
    times = []
    for _ in range(REPEATS):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


SPECS = {
    "D1": (
        {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.float32),
            "index": tf.io.FixedLenFeature([], tf.int64),
        },
        None,
    ),
    "D2": (
        {
            "label": tf.io.FixedLenFeature([], tf.float32),
            "index": tf.io.FixedLenFeature([], tf.int64),
            "tokens": tf.io.FixedLenFeature([20], tf.int64),
            "name": tf.io.FixedLenFeature([], tf.string),
        },
        None,
    ),
    "D3": (
        {"length": tf.io.FixedLenFeature([], tf.int64), "label": tf.io.FixedLenFeature([], tf.float32)},
        {
            "tokens": tf.io.FixedLenSequenceFeature([3], tf.int64),
            "seq_labels": tf.io.FixedLenSequenceFeature([], tf.float32),
        },
    ),
}

result = {"version": tf.__version__}
for name, (ctx, seq) in SPECS.items():
    path = f"{DATA}/{name}.tfrecord"
    recs = payloads(path)
    for bs in (256, 4096):
        batches = [tf.constant(recs[i : i + bs]) for i in range(0, len(recs), bs)]
        if seq is None:
            fn = lambda: [tf.io.parse_example(b, ctx) for b in batches]  # noqa: E731
        else:
            fn = lambda: [tf.io.parse_sequence_example(b, ctx, seq) for b in batches]  # noqa: E731
        fn()  # warm up (graph building, caches)
        result[f"{name}/decode/{bs}"] = median_time(fn)

    def read():
        for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 24).batch(4096):
            pass

    read()
    result[f"{name}/read"] = median_time(read)
    if name == "D2":

        def write():
            with tf.io.TFRecordWriter(f"{DATA}/_tf_written.tfrecord") as w:
                for r in recs:
                    w.write(r)

        result["D2/write_preserialized"] = median_time(write)
print(json.dumps(result))
