"""The `tfrecord` drop-in paths side by side with the `tfrecord` package (issue 14), one run.

    python -m bench.bench_core [--rounds 5] [--scale 1.0] [--clock cpu|wall] [--tf-python PY]

Every row is a file-to-result (or data-to-file) operation as unchanged user code runs it,
ours and the package's interleaved round by round (medians of `--rounds`), on the issue's
data sets written with `bench._common.dataset_file`: D1 6,000 Examples with a 16 KiB image,
D2 300,000 small Examples, D3 50,000 SequenceExamples (`--scale` shrinks them). Inputs of the
writers (the dicts) are built before timing. `--clock cpu` (default) times this process's
CPU seconds, steadier than wall time on a shared machine for these single-threaded paths.

`RecordWriter.write` once per record is compared with TensorFlow's `tf.io.TFRecordWriter` in
the same per-record loop when `--tf-python` names an interpreter with tensorflow-cpu (run in
a subprocess; TensorFlow is not a dependency), else with the package's own framing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from bench import _common
from bench._common import dataset_file, print_table

DESC_D1 = {"image": "byte", "label": "float", "index": "int"}
DESC_D2 = {"label": "float", "index": "int", "tokens": "int", "name": "byte"}
CTX_D3 = {"length": "int", "label": "float"}
SEQ_D3 = {"tokens": "int", "seq_labels": "int"}

# (row, data set, target ratio or None) in table order
ROWS = [
    ("TFRecordWriter.write(dict)", "D2", 5.0),
    ("TFRecordWriter.write(context, sequence)", "D3", 5.0),
    ("tfrecord_loader, description", "D2", 8.0),
    ("tfrecord_loader, context + sequence description", "D3", 5.0),
    ("tfrecord_iterator", "D2", 3.0),
    ("tfrecord2idx.create_index", "D1", 1.0),
    ("tfrecord2idx.create_index", "D2", 1.0),
    ("RecordWriter.write(payload) per record", "D2", 1.0),
    ("columnar.read_example_batches (vs the package's loader)", "D1", None),
    ("columnar.read_example_batches (vs the package's loader)", "D2", None),
]

_TF_WRITE = r"""
import statistics, struct, sys, time
import tensorflow as tf
path, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
buf = open(path, "rb").read()
recs, pos = [], 0
while pos < len(buf):
    (n,) = struct.unpack_from("<Q", buf, pos)
    recs.append(buf[pos + 12 : pos + 12 + n]); pos += 16 + n
times = []
for _ in range(rounds + 1):
    t = time.process_time() if sys.argv[4] == "cpu" else time.perf_counter()
    with tf.io.TFRecordWriter(out) as w:
        for r in recs:
            w.write(r)
    times.append((time.process_time() if sys.argv[4] == "cpu" else time.perf_counter()) - t)
print(statistics.median(times[1:]))
"""


def _payloads(path: Path) -> List[bytes]:
    from tfrecord_beam import records

    return list(records.RecordReader(path))


def _contenders(paths: Dict[str, Path], tmp: Path, peer) -> Dict[Tuple[str, str], Tuple[Callable, Optional[Callable]]]:
    """{(row, data): (ours, theirs)}: zero-argument functions doing the row's work once."""
    import tfrecord_beam
    from tfrecord_beam import RecordWriter, columnar
    from tfrecord_beam.tools import tfrecord2idx

    n2 = _count(paths["D2"])
    d2 = list(_common.d2_examples(n2))
    d3 = list(_common.d3_sequence_examples(_count(paths["D3"])))
    d2_payloads = _payloads(paths["D2"])

    def write_dicts(writer_cls, rows, sequence=False):
        def run():
            writer = writer_cls(str(tmp / "w.tfrecord"))
            if sequence:
                for context, lists in rows:
                    writer.write(context, lists)
            else:
                for row in rows:
                    writer.write(row)
            writer.close()

        return run

    def count(it):
        return lambda: sum(1 for _ in it())

    def ours_raw_write():
        writer = RecordWriter(str(tmp / "raw.tfrecord"))
        write = writer.write
        for p in d2_payloads:
            write(p)
        writer.close()

    def theirs_raw_write():  # the package has no raw-payload writer: its write()'s framing
        import struct

        writer = peer.TFRecordWriter(str(tmp / "raw-peer.tfrecord"))
        f, crc = writer.file, writer.masked_crc
        for p in d2_payloads:
            header = struct.pack("<Q", len(p))
            f.write(header)
            f.write(crc(header))
            f.write(p)
            f.write(crc(p))
        writer.close()

    s1, s2, s3 = (str(paths[k]) for k in ("D1", "D2", "D3"))
    out = {
        ("TFRecordWriter.write(dict)", "D2"): (
            write_dicts(tfrecord_beam.TFRecordWriter, d2),
            peer and write_dicts(peer.TFRecordWriter, d2),
        ),
        ("TFRecordWriter.write(context, sequence)", "D3"): (
            write_dicts(tfrecord_beam.TFRecordWriter, d3, True),
            peer and write_dicts(peer.TFRecordWriter, d3, True),
        ),
        ("tfrecord_loader, description", "D2"): (
            count(lambda: tfrecord_beam.tfrecord_loader(s2, None, DESC_D2)),
            peer and count(lambda: peer.tfrecord_loader(s2, None, DESC_D2)),
        ),
        ("tfrecord_loader, context + sequence description", "D3"): (
            count(lambda: tfrecord_beam.tfrecord_loader(s3, None, CTX_D3, sequence_description=SEQ_D3)),
            peer and count(lambda: peer.tfrecord_loader(s3, None, CTX_D3, sequence_description=SEQ_D3)),
        ),
        ("tfrecord_iterator", "D2"): (
            count(lambda: tfrecord_beam.tfrecord_iterator(s2)),
            peer and count(lambda: peer.tfrecord_iterator(s2)),
        ),
        ("tfrecord2idx.create_index", "D1"): (
            lambda: tfrecord2idx.create_index(s1, str(tmp / "o1.tfindex")),
            peer and (lambda: peer.tools.tfrecord2idx.create_index(s1, str(tmp / "t1.tfindex"))),
        ),
        ("tfrecord2idx.create_index", "D2"): (
            lambda: tfrecord2idx.create_index(s2, str(tmp / "o2.tfindex")),
            peer and (lambda: peer.tools.tfrecord2idx.create_index(s2, str(tmp / "t2.tfindex"))),
        ),
        ("RecordWriter.write(payload) per record", "D2"): (ours_raw_write, peer and theirs_raw_write),
        ("columnar.read_example_batches (vs the package's loader)", "D1"): (
            lambda: sum(len(b["index"]) for b in columnar.read_example_batches(s1, DESC_D1, batch_size=4096)),
            peer and count(lambda: peer.tfrecord_loader(s1, None, DESC_D1)),
        ),
        ("columnar.read_example_batches (vs the package's loader)", "D2"): (
            lambda: sum(len(b["index"]) for b in columnar.read_example_batches(s2, DESC_D2, batch_size=4096)),
            peer and count(lambda: peer.tfrecord_loader(s2, None, DESC_D2)),
        ),
    }
    return out


def _count(path: Path) -> int:
    from tfrecord_beam import index

    return len(index.load_index(index.default_index_path(str(path))))


def _tf_write_seconds(tf_python: str, path: Path, tmp: Path, rounds: int, clock: str) -> Optional[float]:
    proc = subprocess.run(
        [tf_python, "-c", _TF_WRITE, str(path), str(tmp / "tf.tfrecord"), str(rounds), clock],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if proc.returncode:
        print("TensorFlow side failed:\n" + proc.stderr[-2000:], file=sys.stderr)
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def run(
    rounds: int = 5,
    scale: float = 1.0,
    clock: str = "cpu",
    tf_python: Optional[str] = None,
    only: Optional[List[str]] = None,
) -> str:
    from tfrecord_beam import _engine

    try:
        import tfrecord as peer
        import tfrecord.tools.tfrecord2idx  # noqa: F401 (peer.tools.tfrecord2idx)
    except ImportError:
        peer = None
    timer = time.process_time if clock == "cpu" else time.perf_counter
    sizes = {"D1": 6000, "D2": 300_000, "D3": 50_000}
    paths = {k: dataset_file(k.lower(), max(1, int(n * scale))) for k, n in sizes.items()}
    tmp = Path(tempfile.mkdtemp(prefix="bench_core-"))
    work = _contenders(paths, tmp, peer)
    rows = [r for r in ROWS if not only or any(o.lower() in f"{r[0]} {r[1]}".lower() for o in only)]
    times: Dict[Tuple[str, str, int], List[float]] = {}
    for fn_pair in (work[(r[0], r[1])] for r in rows):  # warm-up: page cache, imports, first-call costs
        for fn in fn_pair:
            if fn:
                fn()
    for _ in range(rounds):
        for task, data, _target in rows:
            for side, fn in enumerate(work[(task, data)]):
                if fn:
                    start = timer()
                    fn()
                    times.setdefault((task, data, side), []).append(timer() - start)
    tf_seconds = _tf_write_seconds(tf_python, paths["D2"], tmp, rounds, clock) if tf_python else None
    table = []
    for task, data, target in rows:
        n = _count(paths[data])
        mb = paths[data].stat().st_size / 1e6
        ours = statistics.median(times[(task, data, 0)])
        theirs = statistics.median(times[(task, data, 1)]) if (task, data, 1) in times else None
        peer_name = "tfrecord 1.14.6"
        if task.startswith("RecordWriter") and tf_seconds:
            theirs, peer_name = tf_seconds, "TensorFlow TFRecordWriter"
        ratio = theirs / ours if theirs else None
        table.append(
            [
                task,
                data,
                f"{n / ours:,.0f}",
                f"{mb / ours:,.0f}",
                f"{n / theirs:,.0f}" if theirs else "n/a",
                peer_name if theirs else "n/a",
                f"{ratio:.2f}x" if ratio else "n/a",
                f">= {target:g}x " + ("met" if ratio >= target else "NOT met") if ratio and target else "n/a",
            ]
        )
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return print_table(
        f"Drop-in paths vs the `tfrecord` package, engine={_engine.ENGINE}, {clock} time, median of {rounds} "
        f"interleaved rounds, scale {scale:g}",
        ["operation", "data", "ours rec/s", "ours MB/s", "peer rec/s", "peer", "ours / peer", "target"],
        table,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each data set's records")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--tf-python", help="an interpreter with tensorflow-cpu for the RecordWriter row")
    parser.add_argument("--only", nargs="+", help="rows whose name or data set contains one of these words")
    args = parser.parse_args(argv)
    run(args.rounds, args.scale, args.clock, args.tf_python, args.only)


if __name__ == "__main__":
    main()
