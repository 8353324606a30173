"""Large records from files (issue 14): D1 (16 KiB images) read from a file, ours vs the
`tfrecord` package, in one interleaved run.

    python -m bench.bench_files [--records 6000] [--repeats 7] [--wall]

Rows: `RecordReader` iteration (bytes per record, both CRCs checked), `RecordReader.chunks()`
(buffers + offsets, CRCs checked), `columnar.read_example_batches` (batch 256, decode of every
feature), against `tfrecord.tfrecord_iterator` (no CRC) and `tfrecord.tfrecord_loader` (decode
per record). The file is read from the page cache (one warm-up pass). Times are CPU seconds of
the process (user + system: the copy from the page cache counts) unless `--wall`; MB/s are file
bytes per second. Rounds interleave ours and the peer so load swings hit both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List

from bench._common import dataset_file, print_table

DESCRIPTION = {"image": "byte", "label": "float", "index": "int"}


def _rows(path: str) -> Dict[str, Callable[[], int]]:
    from tfrecord_beam import columnar, records

    def iterate() -> int:
        return sum(1 for _ in records.RecordReader(path))

    def chunks() -> int:
        return sum(len(c) for c in records.RecordReader(path).chunks())

    def decode() -> int:
        return sum(len(b["index"]) for b in columnar.read_example_batches(path, DESCRIPTION, 256))

    rows = {
        "RecordReader iteration": iterate,
        "RecordReader.chunks()": chunks,
        "columnar decode (read_example_batches, batch 256)": decode,
    }
    try:
        import tfrecord as peer
    except ImportError:
        return rows
    rows["tfrecord.tfrecord_iterator (no CRC)"] = lambda: sum(1 for _ in peer.tfrecord_iterator(path))
    rows["tfrecord.tfrecord_loader (decode)"] = lambda: sum(1 for _ in peer.tfrecord_loader(path, None, DESCRIPTION))
    return rows


def run(records: int = 6000, repeats: int = 7, wall: bool = False) -> str:
    from tfrecord_beam import _engine

    path = dataset_file("d1", records)
    size = path.stat().st_size
    rows = _rows(str(path))
    clock = time.perf_counter if wall else time.process_time
    times: Dict[str, List[float]] = {name: [] for name in rows}
    for fn in rows.values():  # warm-up: page cache, imports
        fn()
    for _ in range(repeats):
        for name, fn in rows.items():
            start = clock()
            fn()
            times[name].append(clock() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    peer = {
        "RecordReader iteration": "tfrecord.tfrecord_iterator (no CRC)",
        "RecordReader.chunks()": "tfrecord.tfrecord_iterator (no CRC)",
        "columnar decode (read_example_batches, batch 256)": "tfrecord.tfrecord_loader (decode)",
    }
    table = []
    for name, seconds in med.items():
        other = peer.get(name)
        ratio = f"{med[other] / seconds:.2f}x" if other in med else ""
        table.append([name, f"{records / seconds:,.0f}", f"{size / seconds / 1e9:.2f}", ratio])
    kind = "wall clock" if wall else "CPU time"
    return print_table(
        f"Large records from a file: {records:,} D1 records ({size / 1e6:.1f} MB), engine={_engine.ENGINE}, "
        f"{kind}, median of {repeats} interleaved rounds",
        ["path", "records/s", "GB/s", "vs tfrecord"],
        table,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of CPU time")
    args = parser.parse_args(argv)
    run(args.records, args.repeats, args.wall)


if __name__ == "__main__":
    main()
