"""Resync speed: crafted damage (issue 10, item 6), the cost of a split point on clean data, and
payload damage in a GZIP file (stepped over in one pass of the stream).

Crafted damage is `(12 junk bytes + a header + 8 bytes + 4 zero bytes) * N`: every header has a
valid length CRC and a wrong payload CRC, so every 36 bytes hold two bad records and a resync.
Before the sliding-window resync, `skip_corrupt` over it took 0.7 s (36 KB), 8.4 s (144 KB) and
130 s (576 KB): quadratic. Now the time per MB should stay flat up to 10 MB. Times are CPU
seconds of this process (steadier than wall time on a shared machine).

`python -m bench.bench_resync [--max-mb 10] [--gzip-damage 0 10 100]`
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import List

from tfrecord_beam import _engine, records
from tfrecord_beam._engine._framing import frame_header
from tfrecord_beam._resync import Resync

from ._common import median_seconds, print_table


def crafted_damage(units: int) -> bytes:
    """The issue's crafted damage (the tests build the same bytes in tests/helpers/crafted.py)."""
    return (b"J" * 12 + frame_header(8) + b"payload!" + bytes(4)) * units


def _resync_walk(path: str, size: int) -> int:
    """Every damage point in turn, as a skip_corrupt reader meets them: find, step past, find."""
    with open(path, "rb") as raw:
        searcher = Resync(raw, size)
        pos, count = 1, 0
        while pos < size:
            pos = searcher.find(pos) + 1
            count += 1
    return count


def _beam_skip_corrupt(path: str) -> int:
    from apache_beam.io import source_test_utils

    from tfrecord_beam.beam.source import _TFRecordSource

    return len(source_test_utils.read_from_source(_TFRecordSource(path, skip_corrupt=True)))


def _gzip_with_damaged_payloads(path: str, payloads: List[bytes], damaged: int) -> None:
    """`payloads` framed and gzipped after flipping a payload byte of `damaged` evenly spread records."""
    import gzip

    framed = bytearray(_engine.frame_records(payloads))
    step = len(payloads) // damaged if damaged else 0
    offset, targets = 0, set(range(step // 2, len(payloads), step)) if damaged else set()
    for i, payload in enumerate(payloads):
        if i in targets:
            framed[offset + 14] ^= 0xFF
        offset += len(payload) + 16
    with open(path, "wb") as out:
        out.write(gzip.compress(bytes(framed), compresslevel=1))


def _skipping_read(path: str) -> int:
    from tfrecord_beam.records import ReadSpan
    from tfrecord_beam.skipping import SkippingReader

    reader = SkippingReader(path, ReadSpan("gzip"), open_file=lambda: open(path, "rb"), skip_corrupt=True)
    return sum(len(chunk) for chunk in reader.chunks())


def _gzip_damage_rows(tmp: str, counts: List[int], repeats: int) -> List[list]:
    """CPU seconds of a skip_corrupt read of a GZIP file with payload damage, by our core reader
    (`SkippingReader`: jobs and torch) and the Beam source; a clean read is the reference."""
    payloads = [os.urandom(100) for _ in range(200_000)]  # ~23 MB of 116-byte frames, uncompressed
    rows = []
    for damaged in counts:
        path = os.path.join(tmp, f"damaged-{damaged}.tfrecord.gz")
        _gzip_with_damaged_payloads(path, payloads, damaged)
        ours = median_seconds(lambda: _skipping_read(path), repeats=repeats, warmup=0, clock=time.process_time)
        try:
            beam = median_seconds(lambda: _beam_skip_corrupt(path), repeats=repeats, warmup=0, clock=time.process_time)
            kept = _beam_skip_corrupt(path) - damaged  # dead letters are elements too
        except ImportError:
            beam, kept = float("nan"), -1
        rows.append([damaged, _skipping_read(path), ours, kept, beam])
    return rows


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mb", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--gzip-damage", type=int, nargs="*", default=[0, 10, 100], help="damaged payloads per GZIP file"
    )
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for units in (1000, 4000, 16000, 290000):
            size = 36 * units
            if size > args.max_mb * 1e6 * 1.05:
                continue
            path = os.path.join(tmp, f"crafted-{units}.tfrecord")
            with open(path, "wb") as out:
                out.write(crafted_damage(units))
            repeats = args.repeats if units < 100000 else 1
            walk = median_seconds(lambda: _resync_walk(path, size), repeats=repeats, warmup=0, clock=time.process_time)
            try:
                beam = median_seconds(
                    lambda: _beam_skip_corrupt(path), repeats=repeats, warmup=0, clock=time.process_time
                )
                reports = _beam_skip_corrupt(path) if units < 100000 else 2 * units
            except ImportError:
                beam, reports = float("nan"), 0
            rows.append([f"{size / 1e6:.3f} MB", units, walk, walk / (size / 1e6), reports, beam, beam / (size / 1e6)])
        # clean data: what one split point costs (a resync from mid-file and the check at the end)
        path = os.path.join(tmp, "clean.tfrecord")
        payloads = [os.urandom(100) for _ in range(200000)]  # ~23 MB of 116-byte frames
        records.write_records(path, payloads)
        size = os.path.getsize(path)
        with open(path, "rb") as raw:
            one = median_seconds(lambda: Resync(raw, size).find(size // 2), repeats=9, clock=time.process_time)
        start = time.process_time()
        read = sum(1 for _ in records.RecordReader(path, start_offset=size // 4, end_offset=size // 2, resync=True))
        ranged = time.process_time() - start
        damage_rows = _gzip_damage_rows(tmp, args.gzip_damage, args.repeats)
    print_table(
        f"Resync over crafted damage ({_engine.ENGINE} engine; median of {args.repeats}, 1 run at 10 MB)",
        [
            "file",
            "units",
            "resync walk CPU s",
            "s per MB",
            "skip_corrupt reports",
            "Beam skip_corrupt read CPU s",
            "s per MB",
        ],
        rows,
    )
    print_table(
        "One split point on clean data (116-byte records)",
        ["what", "CPU seconds"],
        [
            ["Resync.find from mid-file", one],
            [
                f"RecordReader(resync=True) over a quarter of a {size / 1e6:.0f} MB file ({read:,} records, "
                "resync at start + split check at end)",
                ranged,
            ],
        ],
    )

    print_table(
        f"skip_corrupt over a GZIP file of 200,000 records (23 MB uncompressed) with damaged payloads (median of {args.repeats})",
        ["damaged payloads", "SkippingReader records kept", "CPU s", "Beam source records kept", "CPU s"],
        damage_rows,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
