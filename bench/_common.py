"""What every benchmark shares: generated datasets, a median timer and a table printer."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Callable, List, Sequence

import numpy as np

DATA_DIR = Path(os.environ.get("TFRECORD_BEAM_BENCH_DATA", Path(__file__).resolve().parent / "_data"))


def median_seconds(
    fn: Callable[[], object], repeats: int = 5, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median time of `fn()` over `repeats` runs after `warmup` runs (the machine is noisy).

    `clock=time.process_time` measures this process's CPU time: steadier on a loaded machine
    for single-threaded work.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def print_table(title: str, header: Sequence[str], rows: List[Sequence[object]]) -> str:
    """Print (and return) a Markdown table."""
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(c) for c in row) + " |")
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    return text


def _fmt(cell) -> str:
    if isinstance(cell, float):
        if cell >= 100:
            return f"{cell:,.0f}"
        return f"{cell:.2f}"
    if isinstance(cell, int):
        return f"{cell:,}"
    return str(cell)


# --- the datasets ------------------------------------------------------------------


def d1_examples(n: int = 6000, seed: int = 0):
    """D1: {image: 16 KiB bytes, label: float, index: int} as (value, kind) dicts."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield {"image": (rng.bytes(16384), "byte"), "label": (float(rng.random()), "float"), "index": (i, "int")}


def d2_examples(n: int = 300_000, seed: int = 0):
    """D2: {label float, index int, tokens int x20, name bytes ~12}."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 50_000, size=(n, 20))
    labels = rng.random(n)
    for i in range(n):
        yield {
            "label": (float(labels[i]), "float"),
            "index": (i, "int"),
            "tokens": (tokens[i], "int"),
            "name": (b"name-%07d" % i, "byte"),
        }


def d3_sequence_examples(n: int = 50_000, seed: int = 0):
    """D3: SequenceExamples: context {length, label}; feature_lists tokens (3-8 steps of 3 ints), seq_labels."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        steps = int(rng.integers(3, 9))
        yield (
            {"length": (steps, "int"), "label": (float(rng.random()), "float")},
            {
                "tokens": (rng.integers(0, 1000, size=(steps, 3)).tolist(), "int"),
                "seq_labels": ([[int(v)] for v in rng.integers(0, 2, size=steps)], "int"),
            },
        )


def dataset_file(name: str, n: int) -> Path:
    """Generate (once, cached under DATA_DIR) and return the path of a dataset file."""
    from tfrecord_beam import example, records

    path = DATA_DIR / f"{name}-{n}.tfrecord"
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    if name == "d3":
        payloads = (example.encode_sequence_example(c, s) for c, s in d3_sequence_examples(n))
    else:
        gen = {"d1": d1_examples, "d2": d2_examples}[name]
        payloads = (example.encode_example(d) for d in gen(n))
    records.write_records(str(path), payloads, index_path=True)
    return path
