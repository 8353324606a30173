"""Block-gzip vs one gzip stream: size, writing, whole-file reading (ours and TensorFlow's),
random `ds[i]`, and 1 vs 2 DataLoader workers on one compressed file.

    python -m bench.bench_blockgzip [--records N] [--repeats R] [--tf-python /work/tfvenv/bin/python]

Data: D2 records (`bench._common.dataset_file`) and D1 (16 KiB random bytes, incompressible).
"One stream" is what RecordWriter wrote before block-gzip (zlib, default level, as TensorFlow
writes GZIP); "blocks" is today's default with an index (1 MiB members, ISA-L when installed).
TensorFlow's GZIP reader runs in a separate interpreter (`--tf-python`, a venv with
tensorflow-cpu) when given, and must read both files identically (count + hash) or the
benchmark fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from bench._common import dataset_file, median_seconds, print_table

_TF_SIDE = r"""
import hashlib, json, sys, time
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
out = {"version": tf.__version__}
for path in sys.argv[2:]:
    h = hashlib.sha256()
    count = 0
    for r in tf.data.TFRecordDataset(path, compression_type="GZIP"):  # the identity check, untimed
        h.update(hashlib.sha256(r.numpy()).digest())
        count += 1
    times = []
    for _ in range(int(sys.argv[1])):  # timed: the reader alone, batched (tf.data costs ~28 us an element)
        ds = tf.data.TFRecordDataset(path, compression_type="GZIP", buffer_size=1 << 20).batch(4096)
        t = time.perf_counter()
        ds.reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.shape(b, out_type=tf.int64)[0]).numpy()
        times.append(time.perf_counter() - t)
    out[path] = {"seconds": sorted(times)[len(times) // 2], "records": count, "sha256": h.hexdigest()}
print(json.dumps(out))
"""


def _digest(payloads) -> str:
    h = hashlib.sha256()
    for p in payloads:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _sizes(framed: bytes, label: str):
    """Rows: compressed size of one stream vs blocks of several sizes, same deflater each."""
    from tfrecord_beam._blockgzip_write import DEFAULT_DEFLATER, deflate_member

    rows = []
    engines = [("zlib", -1)] + ([("isal", -1)] if DEFAULT_DEFLATER == "isal" else [])
    for engine, level in engines:
        one = len(deflate_member(framed, level, engine))
        for block in (64 << 10, 256 << 10, 1 << 20, 4 << 20):
            # cut at the block size (whole records do not change the size measurably)
            blocks = sum(
                len(deflate_member(framed[i : i + block], level, engine)) for i in range(0, len(framed), block)
            )
            rows.append(
                [label, engine, f"{block >> 10} KiB", f"{one / len(framed):.3f}", f"{(blocks / one - 1) * 100:.3f}%"]
            )
    return rows


def run(records: int = 300_000, repeats: int = 3, tf_python: str = None) -> str:
    from torch.utils.data import DataLoader

    from tfrecord_beam import blockgzip, index
    from tfrecord_beam._engine import _framing
    from tfrecord_beam.records import RecordReader, RecordWriter
    from tfrecord_beam.torch import IndexedTFRecordDataset, TFRecordDataset

    src = dataset_file("d2", records)
    payloads = list(RecordReader(src))
    framed = _framing.frame_records(payloads)
    d1 = list(RecordReader(dataset_file("d1", 600)))
    out = []
    out.append(
        print_table(
            f"Size: blocks vs one stream ({len(payloads):,} D2 records, {len(framed) / 1e6:.1f} MB; 600 D1 records)",
            ["data", "deflater", "block", "one stream / raw", "blocks overhead"],
            _sizes(framed, "D2") + _sizes(_framing.frame_records(d1), "D1"),
        )
    )

    tmp = Path(tempfile.mkdtemp())
    stream = str(tmp / "stream.tfrecord.gz")
    block = str(tmp / "block.tfrecord.gz")
    plain = str(tmp / "plain.tfrecord")
    small = str(tmp / "small-blocks.tfrecord.gz")
    batch = 4096

    def write(path, **kw):
        def go():
            if os.path.exists(path):
                os.remove(path)
            with RecordWriter(path, index_path=True, **kw) as w:
                for i in range(0, len(payloads), batch):
                    w.write_many(payloads[i : i + batch])

        return go

    mb = len(framed) / 1e6
    t_stream = median_seconds(write(stream, block_bytes=0), repeats)
    t_block = median_seconds(write(block), repeats)
    write(plain)()
    write(small, block_bytes=64 << 10)()
    table = blockgzip.member_table_for(block)
    r_stream = median_seconds(lambda: sum(1 for _ in RecordReader(stream)), repeats)
    r_block = median_seconds(lambda: sum(1 for _ in RecordReader(block)), repeats)
    rows = [
        ["write, one stream (zlib)", f"{mb / t_stream:,.1f}", "1.00x", os.path.getsize(stream)],
        [
            f"write, blocks ({len(table)} members, {os.environ.get('TFRECORD_BEAM_DEFLATE') or 'default'} deflater)",
            f"{mb / t_block:,.1f}",
            f"{t_stream / t_block:.2f}x",
            os.path.getsize(block),
        ],
        ["read whole, one stream (RecordReader)", f"{mb / r_stream:,.1f}", "1.00x", ""],
        ["read whole, blocks (RecordReader)", f"{mb / r_block:,.1f}", f"{r_stream / r_block:.2f}x", ""],
    ]
    want = _digest(payloads)
    if tf_python:
        res = json.loads(
            subprocess.run(
                [tf_python, "-c", _TF_SIDE, str(repeats), stream, block], check=True, capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        for name, path in (("one stream", stream), ("blocks", block)):
            got = res[path]
            if got["records"] != len(payloads) or got["sha256"] != want:
                raise SystemExit(f"TensorFlow {res['version']} read {path} differently: {got}")
            rows.append(
                [
                    f"read whole, {name} (TensorFlow {res['version']} GZIP, identical)",
                    f"{mb / got['seconds']:,.1f}",
                    f"{r_stream / got['seconds']:.2f}x",
                    "",
                ]
            )
    out.append(
        print_table(
            f"Writing and whole-file reading, {len(payloads):,} D2 records ({mb:.1f} MB), median of {repeats}",
            ["task", "MB/s (uncompressed)", "vs one stream (ours)", "file bytes"],
            rows,
        )
    )

    # random ds[i]
    ix = index.default_index_path
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(payloads), size=200).tolist()
    rows = []
    for name, path in (
        ("uncompressed", plain),
        ("block-gzip, 1 MiB blocks", block),
        ("block-gzip, 64 KiB blocks", small),
    ):
        ds = IndexedTFRecordDataset(path, ix(path), ["index"])
        assert all(int(ds[i]["index"][0]) == i for i in picks[:20])
        t = median_seconds(lambda: [ds[i] for i in picks], repeats) / len(picks)
        rows.append([name, f"{t * 1e6:,.0f}", "ds[i] (IndexedTFRecordDataset)"])
    offsets = index.load_index(ix(stream))[:, 0]
    few = picks[:5]
    t = median_seconds(
        lambda: [next(iter(RecordReader(stream, start_offset=int(offsets[i]), members=False))) for i in few], 1, 0
    ) / len(few)
    rows.append(["one gzip stream", f"{t * 1e6:,.0f}", "RecordReader(start_offset=...): inflates from the start"])
    out.append(
        print_table(
            f"Random access: one record of {len(payloads):,}, median of {repeats} x {len(picks)} picks",
            ["file", "us per record", "how"],
            rows,
        )
    )

    # Workers on one compressed file. The machine is shared, so besides the DataLoader's wall
    # clock, each worker's shard is timed alone in CPU seconds: the slowest shard bounds what
    # n workers can gain (n x is perfect, 1.0x is none).
    rows = []
    for name, path in (("block-gzip", block), ("one gzip stream", stream)):
        ds = TFRecordDataset(path, ix(path), ["index"], batch_size=1024)

        def shard(w, n):
            return lambda: sum(len(b["index"]) for b in ds.iter_worker(w, n))

        assert sum(shard(w, 4)() for w in range(4)) == len(payloads)
        cpu = {
            n: max(median_seconds(shard(w, n), repeats, clock=time.process_time) for w in range(n))
            for n in (1, 2, 4, 8)
        }
        wall = {}
        for workers in (1, 2):

            def go():
                seen = sum(len(b["index"]) for b in DataLoader(ds, batch_size=None, num_workers=workers))
                assert seen == len(payloads), seen

            wall[workers] = median_seconds(go, repeats)
        rows.append(
            [name, f"{cpu[1]:.2f}"]
            + [f"{cpu[1] / cpu[n]:.2f}x" for n in (2, 4, 8)]
            + [f"{len(payloads) / wall[1]:,.0f}", f"{len(payloads) / wall[2]:,.0f}", f"{wall[1] / wall[2]:.2f}x"]
        )
    out.append(
        print_table(
            f"One compressed file, n workers: TFRecordDataset(batch_size=1024), median of {repeats}",
            [
                "file",
                "1 shard CPU s",
                "bound, 2 workers",
                "4",
                "8",
                "DataLoader 1 worker rec/s",
                "2 workers rec/s",
                "2 vs 1 (wall)",
            ],
            rows,
        )
    )
    shutil.rmtree(tmp, ignore_errors=True)
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--tf-python",
        default=os.environ.get("TFRECORD_BEAM_TF_PYTHON"),
        help="an interpreter with tensorflow-cpu, for TensorFlow's GZIP reader",
    )
    args = parser.parse_args(argv)
    run(args.records, args.repeats, args.tf_python)


if __name__ == "__main__":
    main()
