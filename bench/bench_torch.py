"""DataLoader throughput on D1 / D2 records: our datasets beside the `tfrecord` package's, same run.

    python -m bench.bench_torch [--data D1 D2] [--scale S] [--repeats R] [--batch B] [--workers 0 2] [--floor]

Each row iterates one whole epoch through a `torch.utils.data.DataLoader` (worker start-up
included) and reports records per second (median of R runs):
  * tfrecord:         tfrecord.torch.TFRecordDataset + DataLoader(batch_size=B)
  * ours, per record: tfrecord_beam.torch.TFRecordDataset + DataLoader(batch_size=B)
  * ours, batched:    tfrecord_beam.torch.TFRecordDataset(batch_size=B) + DataLoader(batch_size=None)
  * floor (--floor):  the per-record path's collated batches, prebuilt, yielded by a dataset that
                      reads nothing: the cost of the workers and of carrying the batches home
                      (through the pipe, and through our shared-memory ring: `torch._ring`)
Both are given the index file (without one, the `tfrecord` package repeats records across workers).
D1: 6,000 Examples with a 16 KiB image; D2: 300,000 small Examples (`--scale` shrinks both).
Each round runs every contender once, in turn (medians of R rounds, wall clock), and CPU
time of the main process and its (joined) workers together: on a loaded machine the wall
clock of a multi-process run says more about the neighbours than about the contenders.
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from bench._common import dataset_file, print_table

DESCRIPTIONS = {
    "D1": {"image": "byte", "label": "float", "index": "int"},
    "D2": {"label": "float", "index": "int", "tokens": "int", "name": "byte"},
}
SIZES = {"D1": 6000, "D2": 300_000}


def _count(loader) -> int:
    total = 0
    for batch in loader:
        total += len(batch["index"])
    return total


class _Prebuilt:
    """The floor of any per-record dataset with workers: an IterableDataset that yields, with
    no reading or decoding, copies of the collated batches the per-record path yields (each
    worker its share). What it costs is forking the workers and carrying the batches home."""

    def __init__(self, path: str, index: str, batch: int, description) -> None:
        from torch.utils.data import DataLoader

        from tfrecord_beam.torch import TFRecordDataset, _ring

        self.batches = list(DataLoader(TFRecordDataset(path, index, description), batch_size=batch))
        self.ring = _ring.make()

    def dataset(self, ring: bool):
        import torch.utils.data

        from tfrecord_beam.torch import _ring

        batches, shared = self.batches, self.ring if ring else None

        class Yield(torch.utils.data.IterableDataset):
            def __iter__(self):
                info = torch.utils.data.get_worker_info()
                _ring.serve(shared)  # None: the batches' bytes go through the pipe
                worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
                for b in batches[worker::workers]:
                    yield type(b)((k, list(v) if isinstance(v, list) else v.clone()) for k, v in b.items())

        return Yield()


def _loaders(path: str, index: str, batch: int, workers: int, description, floor: bool = False):
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
        peer = DataLoader(PeerDataset(path, index, description), batch_size=batch, num_workers=workers)
        out.append(("tfrecord", lambda: _count(peer)))
    per_record = DataLoader(TFRecordDataset(path, index, description), batch_size=batch, num_workers=workers)
    out.append(("ours, per record", lambda: _count(per_record)))
    batched = DataLoader(
        TFRecordDataset(path, index, description, batch_size=batch), batch_size=None, num_workers=workers
    )
    out.append(("ours, batched", lambda: _count(batched)))
    if floor:
        built = _Prebuilt(path, index, batch, description)
        piped = DataLoader(built.dataset(ring=False), batch_size=None, num_workers=workers)
        out.append(("floor: prebuilt batches, pipe", lambda: _count(piped)))
        if workers:  # without workers nothing is carried: one floor row says it
            ringed = DataLoader(built.dataset(ring=True), batch_size=None, num_workers=workers)
            out.append(("floor: prebuilt batches, ring", lambda: _count(ringed)))
    return out


def run(
    records: Optional[int] = None,
    repeats: int = 3,
    batch: int = 256,
    workers: Optional[List[int]] = None,
    data: Optional[List[str]] = None,
    scale: float = 1.0,
    floor: bool = False,
) -> str:
    import resource
    import statistics
    import time

    from tfrecord_beam import _engine
    from tfrecord_beam.index import default_index_path

    rows = []
    for name in data or ["D2"]:
        n = records if records and name == "D2" else max(1, int(SIZES[name] * scale))
        path = dataset_file(name.lower(), n)
        index = default_index_path(str(path))
        mb = path.stat().st_size / 1e6
        for num_workers in workers or [0, 2]:
            contenders = _loaders(str(path), index, batch, num_workers, DESCRIPTIONS[name], floor)
            times: dict = {}
            for label, epoch in contenders:  # a first epoch each: counts checked, caches warm
                seen = epoch()
                if seen != n:
                    raise AssertionError(f"{label} with {num_workers} workers yielded {seen} records, not {n}")
            cpu_times: dict = {}
            for _ in range(repeats):
                for label, epoch in contenders:
                    cpu = _cpu_seconds(resource)
                    start = time.perf_counter()
                    epoch()
                    times.setdefault(label, []).append(time.perf_counter() - start)
                    cpu_times.setdefault(label, []).append(_cpu_seconds(resource) - cpu)
            results = {label: statistics.median(t) for label, t in times.items()}
            cpus = {label: statistics.median(t) for label, t in cpu_times.items()}
            peer, peer_cpu = results.get("tfrecord"), cpus.get("tfrecord")
            for label, seconds in results.items():
                rows.append(
                    [
                        name,
                        num_workers,
                        label,
                        f"{n / seconds:,.0f}",
                        f"{mb / seconds:,.0f}",
                        f"{peer / seconds:.2f}x" if peer else "n/a",
                        f"{1e6 * cpus[label] / n:.1f}",
                        f"{peer_cpu / cpus[label]:.2f}x" if peer_cpu else "n/a",
                    ]
                )
    return print_table(
        f"DataLoader throughput, batch {batch}, engine={_engine.ENGINE}, median of {repeats} interleaved rounds, "
        f"scale {scale:g}",
        ["data", "workers", "dataset", "records/s", "MB/s", "vs tfrecord", "CPU us/record", "CPU vs tfrecord"],
        rows,
    )


def _cpu_seconds(resource) -> float:
    """CPU time of this process and of its children that have ended (DataLoader workers are
    joined at the end of each epoch unless persistent)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=None, help="D2 records (default 300,000 x scale)")
    parser.add_argument("--data", nargs="+", default=["D1", "D2"], choices=sorted(SIZES))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument(
        "--floor",
        action="store_true",
        help="add a dataset yielding prebuilt batches (no reading): what workers cost by themselves",
    )
    args = parser.parse_args(argv)
    run(args.records, args.repeats, args.batch, args.workers, args.data, args.scale, args.floor)


if __name__ == "__main__":
    main()
