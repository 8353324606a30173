"""Columnar encode/decode paths through the public API, on both engines (issue 17 item 2).

One command; each engine runs in its own process (`TFRECORD_BEAM_PURE=1` for the pure one),
one thread, CPU seconds (`time.process_time`), median of `--repeats`. Rows:

- columnar encode: `columnar.encode_examples` of D2-like columns (label float, index int,
  tokens int x20, name bytes ~12), framed; and of D1-like columns (a 16 KiB image, label,
  index; records / 10 of them);
- columnar decode: `columnar.decode_examples` of the same records from one buffer;
- arrow encode: `arrow.ExampleEncoder.encode_framed` of the same data as a RecordBatch with a
  nullable column (a null every 7th row);
- arrow sequence encode: `ExampleEncoder.encode` with a list<list<int64>> sequence column;
- arrow decode: `arrow.examples_to_record_batch` with a flat schema.

    python bench/bench_engine.py [--records 50000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _measure(n: int, repeats: int) -> dict:
    import statistics

    import numpy as np
    import pyarrow as pa

    from tfrecord_beam import _engine, arrow, columnar, engine_info

    rng = np.random.default_rng(1)
    label = rng.random(n, dtype=np.float32)
    index = np.arange(n, dtype=np.int64)
    tokens = rng.integers(0, 50_000, (n, 20), dtype=np.int64)
    names = [b"name-%07d" % i for i in range(n)]
    cols = {
        "label": label,
        "index": index,
        "tokens": tokens,
        "name": columnar.Column.from_rows("name", "byte", [[x] for x in names]),
    }
    n1 = max(1, n // 10)
    d1 = {
        "image": columnar.Column(
            "image",
            "byte",
            rng.integers(0, 256, n1 << 14, dtype=np.uint8),
            np.arange(n1 + 1),
            np.arange(n1 + 1, dtype=np.int64) << 14,
        ),
        "label": label[:n1],
        "index": index[:n1],
    }
    framed = columnar.encode_examples(cols, framed=True)
    payloads = columnar.encode_examples(cols)
    offs, lens, _, _ = _engine.scan_frames(framed, False)
    desc = {"label": "float", "index": "int", "tokens": "int", "name": "byte"}
    mask = np.zeros(n, bool)
    mask[::7] = True
    batch = pa.record_batch(
        {
            "label": pa.array(label),
            "index": pa.array(index, mask=mask),
            "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.ravel()), 20).cast(pa.list_(pa.int64())),
            "name": pa.array(names, pa.binary()),
        }
    )
    inner = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 6 * n + 1, 2, dtype=np.int32)), pa.array(tokens.ravel()[: 6 * n])
    )
    steps = pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)), inner)  # 3 steps x 2 ints
    seq_batch = pa.record_batch({"label": pa.array(label), "steps": steps})
    enc = arrow.ExampleEncoder(batch.schema)
    seq_enc = arrow.ExampleEncoder(seq_batch.schema, sequence_columns=["steps"])
    schema = pa.schema(
        [("label", pa.float32()), ("index", pa.int64()), ("tokens", pa.list_(pa.int64())), ("name", pa.binary())]
    )
    rows = {
        "columnar encode (framed)": lambda: columnar.encode_examples(cols, framed=True),
        "columnar encode D1 (framed)": lambda: columnar.encode_examples(d1, framed=True),
        "columnar decode": lambda: columnar.decode_examples(framed, desc, offsets=offs, lengths=lens),
        "arrow encode_framed": lambda: enc.encode_framed(batch),
        "arrow sequence encode": lambda: seq_enc.encode(seq_batch),
        "arrow decode (schema)": lambda: arrow.examples_to_record_batch(payloads, schema=schema),
    }
    out = {"engine": engine_info()["engine"], "rows": {}}
    for name, fn in rows.items():
        fn()
        times = []
        for _ in range(repeats):
            t = time.process_time()
            fn()
            times.append(time.process_time() - t)
        out["rows"][name] = statistics.median(times)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(args.records, args.repeats)))
        return
    results = []
    for pure in ("0", "1"):
        env = dict(os.environ, TFRECORD_BEAM_PURE=pure, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--records", str(args.records), "--repeats", str(args.repeats)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"{args.records:,} D2-like records, CPU s, median of {args.repeats}\n")
    print("| path | " + " | ".join(r["engine"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for name in results[0]["rows"]:
        print(f"| {name} | " + " | ".join(f"{r['rows'][name]:.4f}" for r in results) + " |")


if __name__ == "__main__":
    main()
