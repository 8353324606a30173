"""Helpers for the pipeline tests: small inputs, running a job's main() in-process, reading output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Sequence, Tuple

from tfrecord_beam.example import encode_example
from tfrecord_beam.records import read_records, write_records

FAST = ["--runner=FnApiRunner"]
MULTI = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def payloads(n: int, tag: int = 0, start: int = 0) -> List[bytes]:
    """n distinct Example payloads of varying size."""
    return [encode_example({"i": i, "tag": tag, "pad": b"x" * (i % 37)}) for i in range(start, start + n)]


def write_files(
    directory: Path, name: str, counts: Sequence[int], tag: int = 0, suffix: str = ".tfrecord"
) -> List[bytes]:
    """Write files name-K.tfrecord with counts[K] records each; returns all payloads written."""
    directory.mkdir(parents=True, exist_ok=True)
    out: List[bytes] = []
    start = 0
    for k, n in enumerate(counts):
        data = payloads(n, tag, start)
        write_records(str(directory / f"{name}-{k}{suffix}"), data)
        out += data
        start += n
    return out


def run_job(main, args: Sequence[str], capsys) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of a pipeline's main(args)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def summary_json(out: str) -> dict:
    line = [text for text in out.splitlines() if text.startswith("json: ")][-1]
    return json.loads(line[len("json: ") :])


def read_shards(pattern_dir: Path, glob: str) -> List[List[bytes]]:
    """Payloads of each output shard (sorted by name)."""
    return [list(read_records(str(p))) for p in sorted(pattern_dir.glob(glob))]


def entries(directory: Path) -> List[str]:
    """Everything in a directory, hidden entries included (to catch leftovers)."""
    return sorted(os.listdir(directory)) if directory.exists() else []


def stage_shards(output, shards: Sequence[Tuple[str, Sequence[bytes]]]) -> list:
    """Write each (name, records) as a shard with its index into `output`'s staging (a
    `commit.Output`) and return their manifest entries, ready for `output.commit`."""
    from tfrecord_beam.manifest import ShardEntry

    staged = []
    for name, records in shards:
        path = output.temp_path(name + ".tfrecord")
        write_records(path, records, index_path=output.temp_path(name + ".tfindex"))
        staged.append(ShardEntry(name + ".tfrecord", len(records), os.path.getsize(path), index=name + ".tfindex"))
    return staged
