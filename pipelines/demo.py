"""The main job, end to end on a small generated dataset (what `make demo` runs).

    python -m pipelines.demo [--workdir DIR | --keep] [--rows N] [Beam flags...]

1. generate two Parquet datasets ("web" and "books": int64, float32, string, list<int64>, binary)
2. parquet_to_tfrecord each into TFRecord shards of tf.train.Example
3. build_index over the shards (verifying CRCs) into a separate index folder
4. reshard "web" into 4 shuffled shards (the job proves the output equals the input)
5. mix web (weight 3) and books (weight 1) into 2 shards with a JSON manifest
6. read the mix back with the PyTorch dataset (batched tensors) and count what came from where
Each step prints its summary; any failure stops the demo with exit status 1. Without --workdir
it works in a new temporary folder, removed at the end (--keep keeps it); without torch (`make
demo TORCH=0`, or no torch build to be had: scripts/install_torch.sh) step 6 is skipped, saying so.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from tfrecord_beam import jobtools


def make_parquet(path: str, rows: int, source: int, seed: int) -> None:
    """A Parquet file with the benchmark's column mix, plus a `source` tag column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 11, rows)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    table = pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64) + source * 10_000_000),
            "source": pa.array(np.full(rows, source, dtype=np.int64)),
            "score": pa.array(rng.random(rows, dtype=np.float32)),
            "name": pa.array([f"item-{source}-{i:010d}" for i in range(rows)]),
            "tokens": pa.ListArray.from_arrays(pa.array(splits), pa.array(rng.integers(0, 30_000, int(splits[-1])))),
            "blob": pa.array([rng.bytes(100) for _ in range(rows)], pa.binary()),
        }
    )
    pq.write_table(table, path, row_group_size=max(1, rows // 4))


def _step(title: str, job, argv: List[str]) -> None:
    command = " ".join(shlex.quote(arg) for arg in argv)  # a glob is shown quoted, as it must be typed
    print(f"\n#### {title}\n$ python -m pipelines.{job.__name__.rsplit('.', 1)[-1]} {command}", flush=True)
    code = job.main(argv)
    if code not in (0,):
        raise SystemExit(f"demo: step '{title}' failed (exit status {code})")


def read_with_torch(pattern: str, index_dir: Optional[str]) -> None:
    """Read the mixed shards with tfrecord_beam.torch.TFRecordDataset and summarise them."""
    import glob

    try:
        import torch

        from tfrecord_beam.torch import TFRecordDataset
    except ImportError as exc:  # the [torch] extra is not installed
        print(
            f"\n#### read the mix with tfrecord_beam.torch.TFRecordDataset: skipped, no torch here ({exc}); "
            "`make demo TORCH=pypi` or `make demo TORCH_INDEX=URL` installs it (scripts/install_torch.sh)"
        )
        return
    files = sorted(glob.glob(pattern))
    indexes = [f[: -len(".tfrecord")] + ".tfindex" for f in files]
    dataset = TFRecordDataset(
        files,
        indexes,
        {"id": "int", "source": "int", "score": "float", "tokens": "int"},
        shuffle_queue_size=256,
        seed=0,
        batch_size=64,
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
    records, first = 0, None
    per_source: Dict[int, int] = {}
    for batch in loader:
        first = first or batch
        sources = batch["source"].reshape(-1).tolist()
        records += len(sources)
        for s in sources:
            per_source[s] = per_source.get(s, 0) + 1
    print("\n#### read the mix with tfrecord_beam.torch.TFRecordDataset")
    print(f"records: {records}   per source: {dict(sorted(per_source.items()))}")
    if first is not None:
        print(
            "first batch:", {k: (tuple(v.shape) if hasattr(v, "shape") else type(v).__name__) for k, v in first.items()}
        )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = jobtools.ArgumentParser(
        prog="python -m pipelines.demo",
        description=__doc__.splitlines()[0],
        epilog=__doc__ + "\n" + jobtools.EXIT_HELP,
    )
    parser.add_argument(
        "--workdir", default=None, help="where to put everything, kept (default: a new temp dir, removed at the end)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the default temp dir (its path is printed)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows of the 'web' dataset ('books' has a quarter)")
    args, beam_args = parser.parse_known_args(argv)
    from . import _args  # Beam loads here, after --help

    try:
        _args.check_leftovers(parser.prog, parser, beam_args)
    except jobtools.UsageError as exc:
        sys.stderr.write(jobtools.usage_error(parser.prog, str(exc)) + "\n")
        return jobtools.EXIT_USAGE
    temporary = args.workdir is None
    work = args.workdir or tempfile.mkdtemp(prefix="tfrecord_beam_demo_")
    if os.path.exists(work):
        shutil.rmtree(work)
    try:
        return _run(work, args.rows, beam_args, kept=not temporary or args.keep)
    finally:
        if temporary and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def _run(work: str, rows: int, beam_args: Sequence[str], kept: bool) -> int:
    from tfrecord_beam.jobtools import describe_engine

    from . import build_index, mix, parquet_to_tfrecord, reshard

    j = lambda *parts: os.path.join(work, *parts)  # noqa: E731
    for d in ("parquet", "tfrecord", "indexes", "resharded", "mixed"):
        os.makedirs(j(d), exist_ok=True)
    print(f"demo: {describe_engine()}")  # which engine: the compiled core (native) or the pure twins
    print(f"demo: working in {work}")
    make_parquet(j("parquet", "web.parquet"), rows, 1, seed=1)
    make_parquet(j("parquet", "books.parquet"), max(1, rows // 4), 2, seed=2)
    beam = list(beam_args)
    _step(
        "Parquet -> TFRecord (web)",
        parquet_to_tfrecord,
        ["--input", j("parquet", "web.parquet"), "--output_prefix", j("tfrecord", "web"), "--num_shards", "3"] + beam,
    )
    _step(
        "Parquet -> TFRecord (books)",
        parquet_to_tfrecord,
        ["--input", j("parquet", "books.parquet"), "--output_prefix", j("tfrecord", "books"), "--num_shards", "1"]
        + beam,
    )
    _step(
        "build indexes (CRCs verified)",
        build_index,
        ["--input", j("tfrecord", "*.tfrecord"), "--output_dir", j("indexes"), "--verify"] + beam,
    )
    _step(
        "reshard web into 4 shuffled shards",
        reshard,
        [
            "--input",
            j("tfrecord", "web-*.tfrecord"),
            "--output_prefix",
            j("resharded", "web"),
            "--num_shards",
            "4",
            "--shuffle",
            "--seed",
            "1",
        ]
        + beam,
    )
    total = rows
    _step(
        "mix web:books = 3:1",
        mix,
        [
            "--source",
            j("resharded", "web-*.tfrecord") + "=3",
            "--source",
            j("tfrecord", "books-*.tfrecord") + "=1",
            "--total_records",
            str(total),
            "--output_prefix",
            j("mixed", "mix"),
            "--num_shards",
            "2",
            "--seed",
            "1",
        ]
        + beam,
    )
    read_with_torch(j("mixed", "mix-*.tfrecord"), None)
    if kept:
        print(f"\ndemo: done; everything is in {work} (manifest: {j('mixed', 'mix.manifest.json')})")
    else:
        print(f"\ndemo: done; {work} removed (--keep or --workdir DIR keeps the files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
