"""Core codec vs the `tfrecord` package: raw read with CRC, loader with a description, write, index.

    python -m bench.bench_core [--records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from bench._common import dataset_file, median_seconds, print_table

DESCRIPTION = {"label": "float", "index": "int", "tokens": "int", "name": "byte"}


def run(records: int = 100_000, repeats: int = 3) -> str:
    import tfrecord_beam
    from tfrecord_beam import _engine, index, records as rec

    try:
        import tfrecord as peer
        import tfrecord.tools.tfrecord2idx as peer_idx
    except ImportError:
        peer = None
    path = dataset_file("d2", records)
    payloads = list(rec.RecordReader(path))
    size_mb = path.stat().st_size / 1e6
    tmp = Path(tempfile.mkdtemp())
    rows = []

    def add(task, ours, theirs):
        o = median_seconds(ours, repeats)
        t = median_seconds(theirs, repeats) if (peer and theirs) else None
        rows.append([task, f"{records / o:,.0f}", f"{size_mb / o:,.1f}",
                     f"{records / t:,.0f}" if t else "n/a", f"{t / o:.1f}x" if t else "n/a"])

    add("raw read, CRC checked (ours) / unchecked (tfrecord)",
        lambda: sum(1 for _ in rec.RecordReader(path)),
        lambda: sum(1 for _ in peer.tfrecord_iterator(str(path))))
    add("loader with a description",
        lambda: sum(1 for _ in tfrecord_beam.tfrecord_loader(str(path), None, DESCRIPTION)),
        lambda: sum(1 for _ in peer.tfrecord_loader(str(path), None, DESCRIPTION)))

    def write_ours():
        rec.write_records(str(tmp / "ours.tfrecord"), payloads)

    def write_theirs():
        writer = peer.TFRecordWriter(str(tmp / "theirs.tfrecord"))
        for p in payloads:  # the peer has no raw-payload writer: frame as it does
            writer.file.write(__import__("struct").pack("<Q", len(p)))
            writer.file.write(writer.masked_crc(__import__("struct").pack("<Q", len(p))))
            writer.file.write(p)
            writer.file.write(writer.masked_crc(p))
        writer.close()

    add("write serialized records", write_ours, write_theirs)
    add("index build",
        lambda: index.create_index(path, tmp / "ours.tfindex"),
        lambda: peer_idx.create_index(str(path), str(tmp / "theirs.tfindex")))
    shutil.rmtree(tmp, ignore_errors=True)
    return print_table(
        f"Core codec, {records:,} D2 records ({size_mb:.1f} MB), engine={_engine.ENGINE}, median of {repeats}",
        ["task", "ours rec/s", "ours MB/s", "tfrecord rec/s", "ours / tfrecord"], rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    run(args.records, args.repeats)


if __name__ == "__main__":
    main()
