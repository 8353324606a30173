"""Benchmark of the compiled core (issue 3): read+CRC, columnar decode and encode from columns,
ours native vs ours pure vs the `tfrecord` package (and TensorFlow with --tf-python).

One command, one thread, medians of several runs; prints a Markdown table and, with --write,
puts it into bench/RESULTS.md under "## Compiled core (issue 3)". Times are CPU seconds of the
process (user + system, `time.process_time`), for every engine and TensorFlow alike: the shared
build machine runs other jobs, which skew wall-clock times but not CPU time of a one-thread run.

    python bench/bench_native.py [--repeats 5] [--tf-python /tmp/tfvenv/bin/python] [--write]

Data (generated once into bench/_data/, seeded): D1 6,000 Examples {image: 16 KiB bytes, label
float, index int}; D2 300,000 {label float, index int, tokens int x20, name bytes ~12}; D3 50,000
SequenceExamples (context length, label; feature lists tokens 3-8 steps of 3 ints, seq_labels).
Slow engines (pure, the `tfrecord` package) run on the first SLOW_LIMIT records of a data set and
are reported as rates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread: no BLAS workers spinning beside us

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _common  # noqa: E402
from tfrecord_beam._engine import _decode, _encode, _framing  # noqa: E402
from tfrecord_beam._native import _core  # noqa: E402
from tfrecord_beam._proto import SequenceExample  # noqa: E402

DATA = ROOT / "bench" / "_data"
SLOW_LIMIT = 50_000
HEADING = "## Compiled core (issue 3)"
BYTE, FLOAT, INT = 1, 2, 3


# -- data ------------------------------------------------------------------------------------


def _col(name: str, kind: int, values, splits, voffs=None):
    return (name.encode(), kind, values, np.asarray(splits, np.int64), voffs, None)


def _dense(name: str, kind: int, values: np.ndarray, per_row: int):
    n = len(values) // per_row
    return _col(name, kind, values, np.arange(n + 1) * per_row)


def _bytes_col(name: str, items: List[bytes]):
    lens = np.fromiter(map(len, items), np.int64, len(items))
    voffs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return _col(name, BYTE, np.frombuffer(b"".join(items), np.uint8), np.arange(len(items) + 1), voffs)


def columns_d1(rng) -> list:
    n = 6000
    image = rng.integers(0, 256, n * 16384, dtype=np.uint8)
    return [
        _col("image", BYTE, image, np.arange(n + 1), np.arange(n + 1, dtype=np.int64) * 16384),
        _dense("label", FLOAT, rng.random(n, dtype=np.float32), 1),
        _dense("index", INT, np.arange(n, dtype=np.int64), 1),
    ]


def columns_d2(rng) -> list:
    n = 300_000
    return [
        _dense("label", FLOAT, rng.random(n, dtype=np.float32), 1),
        _dense("index", INT, np.arange(n, dtype=np.int64), 1),
        _dense("tokens", INT, rng.integers(0, 50_000, n * 20, dtype=np.int64), 20),
        _bytes_col("name", [b"name-%07d" % i for i in range(n)]),
    ]


def records_d3(rng) -> List[bytes]:
    out = []
    for _ in range(50_000):
        ex = SequenceExample()
        steps = int(rng.integers(3, 9))
        ex.context.feature["length"].int64_list.value.append(steps)
        ex.context.feature["label"].float_list.value.append(float(rng.random()))
        toks = ex.feature_lists.feature_list["tokens"].feature
        labs = ex.feature_lists.feature_list["seq_labels"].feature
        for t in rng.integers(0, 50_000, (steps, 3)).tolist():
            toks.add().int64_list.value.extend(t)
            labs.add().float_list.value.append(float(rng.random()))
        out.append(ex.SerializeToString(deterministic=True))
    return out


def generate() -> Dict[str, list]:
    """Write the data sets (once) and return the D1/D2 columns used by the encode rows."""
    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    cols = {"D1": columns_d1(rng), "D2": columns_d2(rng)}
    for name, c in cols.items():
        path = DATA / f"{name}.tfrecord"
        if not path.exists():
            path.write_bytes(_core.encode_examples(c, len(c[0][3]) - 1, True))
    if not (DATA / "D3.tfrecord").exists():
        (DATA / "D3.tfrecord").write_bytes(_core.frame_records(records_d3(rng)))
    for name in ("D1", "D2", "D3"):  # the slow engines' share
        sub = DATA / f"{name}_slow.tfrecord"
        if not sub.exists():
            buf = (DATA / f"{name}.tfrecord").read_bytes()
            offs, lens, _, _ = _core.scan_frames(buf, False, SLOW_LIMIT)
            sub.write_bytes(buf[: int(offs[-1] + lens[-1] + 4)])
    return cols


# -- timing ------------------------------------------------------------------------------------


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """CPU-time median (one thread; the shared machine's load swings wall-clock ratios)."""
    return _common.median_seconds(fn, repeats, clock=time.process_time)


class Table:
    def __init__(self) -> None:
        self.rows: List[tuple] = []

    def add(self, data: str, op: str, engine: str, records: int, nbytes: int, seconds: Optional[float], note: str = ""):
        self.rows.append((data, op, engine, records, nbytes, seconds, note))
        print(self.format_row(self.rows[-1]), flush=True)

    @staticmethod
    def format_row(r) -> str:
        data, op, engine, records, nbytes, s, note = r
        if s is None:
            return f"| {data} | {op} | {engine} | n/a | n/a | {note} |"
        return f"| {data} | {op} | {engine} | {records / s:,.0f} | {nbytes / s / 1e6:,.0f} | {note} |"

    def markdown(self) -> str:
        head = "| data | operation | engine | records/s | MB/s | note |\n|---|---|---|---:|---:|---|"
        return head + "\n" + "\n".join(self.format_row(r) for r in self.rows)


def frames(path: Path):
    buf = path.read_bytes()
    offs, lens, _, _ = _core.scan_frames(buf)
    return buf, offs, lens


DESC = {
    "D1": {"image": BYTE, "label": FLOAT, "index": INT},
    "D2": {"label": FLOAT, "index": INT, "tokens": INT, "name": BYTE},
}
SEQ_DESC = ({"length": INT, "label": FLOAT}, {"tokens": INT, "seq_labels": FLOAT})
VAHID = {BYTE: "byte", FLOAT: "float", INT: "int"}


def decode_fn(engine, name: str, buf, offs, lens):
    if name == "D3":
        (cn, ck), (sn, sk) = ([[k.encode() for k in d], list(d.values())] for d in SEQ_DESC)
        return lambda: engine.decode_sequence_examples(buf, cn, ck, sn, sk, offs, lens)
    names, kinds = [k.encode() for k in DESC[name]], list(DESC[name].values())
    return lambda: engine.decode_examples(buf, names, kinds, offs, lens)


def vahid_read(path: Path):
    from tfrecord.reader import tfrecord_iterator

    return lambda: sum(1 for _ in tfrecord_iterator(str(path)))


def vahid_decode(name: str, path: Path):
    from tfrecord.reader import sequence_loader, tfrecord_loader

    if name == "D3":
        c, s = ({k: VAHID[v] for k, v in d.items()} for d in SEQ_DESC)
        return lambda: sum(1 for _ in sequence_loader(str(path), None, c, s))
    desc = {k: VAHID[v] for k, v in DESC[name].items()}
    return lambda: sum(1 for _ in tfrecord_loader(str(path), None, desc))


def vahid_encode(cols: list, n: int):
    """The `tfrecord` package's writer fed per-record dicts (built beforehand, not timed)."""
    import io

    from tfrecord.writer import TFRecordWriter

    rows = []
    for i in range(n):
        row = {}
        for name, kind, values, splits, voffs, _ in cols:
            a, b = int(splits[i]), int(splits[i + 1])
            if kind == BYTE:
                v = values[voffs[a] : voffs[b]].tobytes()
            else:
                v = values[a:b].tolist()
            row[name.decode()] = (v, VAHID[kind])
        rows.append(row)

    def run():
        w = TFRecordWriter.__new__(TFRecordWriter)
        w.file = io.BytesIO()
        for row in rows:
            w.write(row)

    return run


def slice_cols(cols: list, n: int) -> list:
    out = []
    for name, kind, values, splits, voffs, st in cols:
        out.append((name, kind, values, splits[: n + 1], voffs, st))
    return out


# -- main ----------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tf-python", help="an interpreter with tensorflow-cpu, for the TensorFlow rows")
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    args = ap.parse_args(argv)
    cols = generate()
    table = Table()
    slow_repeats = max(1, min(args.repeats, 3))
    tf = {}
    if args.tf_python:
        proc = subprocess.run(
            [args.tf_python, str(ROOT / "bench" / "_tf_side.py"), str(DATA), str(slow_repeats)],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            tf = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            print("TensorFlow side failed:\n" + proc.stderr[-2000:], file=sys.stderr)
    for name in ("D1", "D2", "D3"):
        path, slow_path = DATA / f"{name}.tfrecord", DATA / f"{name}_slow.tfrecord"
        buf, offs, lens = frames(path)
        sbuf, soffs, slens = frames(slow_path)
        n, sn = len(offs), len(soffs)
        payload, spayload = int(lens.sum()), int(slens.sum())
        # read + CRC (in-memory buffer for ours; the file for the others)
        table.add(
            name, "read+CRC", "ours native", n, len(buf), median_seconds(lambda: _core.scan_frames(buf), args.repeats)
        )
        table.add(
            name,
            "read+CRC",
            "ours pure",
            sn,
            len(sbuf),
            median_seconds(lambda: _framing.scan_frames(sbuf), slow_repeats),
        )
        table.add(
            name,
            "read",
            "tfrecord pkg",
            sn,
            len(sbuf),
            median_seconds(vahid_read(slow_path), slow_repeats),
            "file, no CRC",
        )
        if f"{name}/read" in tf:
            table.add(name, "read+CRC", "TensorFlow", n, len(buf), tf[f"{name}/read"], "TFRecordDataset, batch 4096")
        # decode
        table.add(
            name,
            "decode",
            "ours native",
            n,
            payload,
            median_seconds(decode_fn(_core, name, buf, offs, lens), args.repeats),
        )
        table.add(
            name,
            "decode",
            "ours pure",
            sn,
            spayload,
            median_seconds(decode_fn(_decode, name, sbuf, soffs, slens), slow_repeats),
        )
        table.add(
            name,
            "read+decode",
            "tfrecord pkg",
            sn,
            spayload,
            median_seconds(vahid_decode(name, slow_path), slow_repeats),
            "file",
        )
        for bs in (256, 4096):
            if f"{name}/decode/{bs}" in tf:
                table.add(
                    name,
                    "decode",
                    f"TensorFlow b{bs}",
                    n,
                    payload,
                    tf[f"{name}/decode/{bs}"],
                    "parse_example" if name != "D3" else "parse_sequence_example",
                )
        # encode from columns
        if name in cols:
            c = cols[name]
            sc = slice_cols(c, sn)
            table.add(
                name,
                "encode+frame",
                "ours native",
                n,
                len(buf),
                median_seconds(lambda: _core.encode_examples(c, n, True), args.repeats),
            )
            table.add(
                name,
                "encode+frame",
                "ours pure",
                sn,
                len(sbuf),
                median_seconds(lambda: _encode.encode_examples(sc, sn, True), slow_repeats),
            )
            table.add(
                name,
                "encode+frame",
                "tfrecord pkg",
                sn,
                len(sbuf),
                median_seconds(vahid_encode(sc, sn), slow_repeats),
                "dict per record",
            )
        if name == "D2" and "D2/write_preserialized" in tf:
            table.add(
                name,
                "frame (write)",
                "TensorFlow",
                n,
                len(buf),
                tf["D2/write_preserialized"],
                "TFRecordWriter, pre-serialized, to file",
            )
    env = (
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, one thread, CPU time, "
        f"medians of {args.repeats} (slow engines {slow_repeats}), CRC32C hardware={_core.crc32c_hw()}"
        + (f", TensorFlow {tf['version']}" if tf else ", TensorFlow not measured")
    )
    md = table.markdown() + "\n\n" + targets(table)
    print("\n" + env + "\n\n" + md)
    if args.write:
        write_results(env, md)
    return 0


def targets(table: Table) -> str:
    """The issue's targets, checked against this run's rows."""
    rate = {(d, op, eng): (n / s, b / s) for d, op, eng, n, b, s, _ in table.rows if s}
    lines = ["Targets (issue 3):"]

    def check(label: str, value: Optional[float], goal: float, unit: str) -> None:
        if value is None:
            lines.append(f"- {label}: not measured")
        else:
            lines.append(
                f"- {label}: {value:,.2f}{unit} (target >= {goal:g}{unit}) {'met' if value >= goal else 'NOT met'}"
            )

    for d in ("D2", "D3"):
        ours, tf = rate.get((d, "decode", "ours native")), rate.get((d, "decode", "TensorFlow b4096"))
        check(f"{d} decode vs TensorFlow batch 4096", ours[0] / tf[0] if ours and tf else None, 3, "x")
    d1 = rate.get(("D1", "decode", "ours native"))
    check("D1 decode", d1[1] / 1e9 if d1 else None, 2, " GB/s")
    r1 = rate.get(("D1", "read+CRC", "ours native"))
    check("D1 read+CRC", r1[1] / 1e9 if r1 else None, 3, " GB/s")
    r2 = rate.get(("D2", "read+CRC", "ours native"))
    check("D2 read+CRC", r2[0] / 1e6 if r2 else None, 5, "M records/s")
    w, tfw = rate.get(("D2", "encode+frame", "ours native")), rate.get(("D2", "frame (write)", "TensorFlow"))
    check("D2 write from columns vs TensorFlow's writer", w[0] / tfw[0] if w and tfw else None, 1, "x")
    return "\n".join(lines)


NOTE = (
    "Ours: read+CRC and decode run over the file already in memory (scan_frames gives the "
    "offsets; decode takes buffer + offsets); encode+frame makes one framed buffer from columns. "
    "tfrecord pkg and TensorFlow read the file themselves (noted). MB/s: file bytes for read "
    "and encode, payload bytes for decode."
)


def write_results(env: str, md: str) -> None:
    """Replace this benchmark's section of bench/RESULTS.md, leaving other sections alone."""
    path = ROOT / "bench" / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = f"{HEADING}\n\n`python bench/bench_native.py --write` ({env}).\n\n{NOTE}\n\n{md}\n"
    if HEADING in text:
        start = text.index(HEADING)
        nxt = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[nxt + 1 :] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
