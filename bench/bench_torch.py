"""DataLoader throughput on D2 records: our datasets beside the `tfrecord` package's, same run.

    python -m bench.bench_torch [--records N] [--repeats R] [--batch B] [--workers 0 2]

Each row iterates one whole epoch through a `torch.utils.data.DataLoader` (worker start-up
included) and reports records per second (median of R runs):
  * tfrecord:         tfrecord.torch.TFRecordDataset + DataLoader(batch_size=B)
  * ours, per record: tfrecord_beam.torch.TFRecordDataset + DataLoader(batch_size=B)
  * ours, batched:    tfrecord_beam.torch.TFRecordDataset(batch_size=B) + DataLoader(batch_size=None)
Both are given the index file (without one, the `tfrecord` package repeats records across workers).
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from bench._common import dataset_file, median_seconds, print_table

DESCRIPTION = {"label": "float", "index": "int", "tokens": "int", "name": "byte"}


def _count(loader) -> int:
    total = 0
    for batch in loader:
        total += len(batch["name"])
    return total


def _loaders(path: str, index: str, batch: int, workers: int):
    """(name, zero-argument function running one epoch) for each contender; each dataset is
    built once, as a training job would, and iterated once per epoch."""
    from torch.utils.data import DataLoader

    from tfrecord_beam.torch import TFRecordDataset

    out: List[tuple] = []
    try:
        from tfrecord.torch.dataset import TFRecordDataset as PeerDataset
    except ImportError:
        PeerDataset = None
    if PeerDataset is not None:
        peer = DataLoader(PeerDataset(path, index, DESCRIPTION), batch_size=batch, num_workers=workers)
        out.append(("tfrecord", lambda: _count(peer)))
    per_record = DataLoader(TFRecordDataset(path, index, DESCRIPTION), batch_size=batch, num_workers=workers)
    out.append(("ours, per record", lambda: _count(per_record)))
    batched = DataLoader(TFRecordDataset(path, index, DESCRIPTION, batch_size=batch), batch_size=None,
                         num_workers=workers)
    out.append(("ours, batched", lambda: _count(batched)))
    return out


def run(records: int = 100_000, repeats: int = 3, batch: int = 256, workers: Optional[List[int]] = None) -> str:
    from tfrecord_beam import _engine
    from tfrecord_beam.index import default_index_path

    path = dataset_file("d2", records)
    index = default_index_path(str(path))
    rows = []
    for num_workers in workers or [0, 2]:
        results = {}
        for name, epoch in _loaders(str(path), index, batch, num_workers):
            seen = epoch()
            if seen != records:
                raise AssertionError(f"{name} with {num_workers} workers yielded {seen} records, not {records}")
            results[name] = median_seconds(epoch, repeats, warmup=0)
        peer = results.get("tfrecord")
        for name, seconds in results.items():
            rows.append([num_workers, name, f"{records / seconds:,.0f}",
                         f"{peer / seconds:.1f}x" if peer else "n/a"])
    return print_table(
        f"DataLoader throughput, {records:,} D2 records, batch {batch}, engine={_engine.ENGINE}, "
        f"median of {repeats}",
        ["workers", "dataset", "records/s", "vs tfrecord"], rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args(argv)
    run(args.records, args.repeats, args.batch, args.workers)


if __name__ == "__main__":
    main()
