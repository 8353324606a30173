"""Training from an object store (issues 24 and 35): our torch dataset from local disk, from an
S3-protocol server on loopback and through an emulated link, beside mosaicml-streaming, with the
reader's CPU seconds per epoch, its peak RSS and the machine's load for every row.

    python -m bench.remote [--quick] [--size-mb 200] [--data 110k d1] [--workers 2 0]
                           [--repeats 3] [--peer-repeats 1] [--batch 64] [--no-peer]
                           [--rss-size-mb 1000] [--results]

One command runs the whole table: {110 KB, 16 KiB (D1-like) records} x {2, 0 DataLoader
workers} x {local disk, server on loopback, emulated link} x {tfrecord_beam, mosaicml-streaming},
epochs 1 and 2 of each, plus a plain loop over the same local files (RecordReader and one
columnar decode per chunk, one process: the local baseline must not be slower than it). Runs
are alternated (round 1 of every case, then round 2, ...) and medians reported; tfrecord_beam's
cases run `--repeats` times, the peer's and the plain loop's `--peer-repeats`. Then
tfrecord_beam's 110 KB loopback cases once more at `--rss-size-mb` for peak RSS at two sizes.
A case that fails is reported and the run goes on (exit status 1 at the end). About 6-8
minutes with the defaults on a 2-core VM.

The local side of every ratio (the baseline) is tfrecord_beam's TFRecordDataset over the same
files with the same batch size, workers, index and description: our best local configuration.
CPU seconds are user + system of the case's process and its DataLoader workers (getrusage of
the process and its children around each epoch; the workers are joined at an epoch's end),
not of the server or of the link's proxy.

Data: Examples (`image` of 16 KiB or 110 KB, `label`, `index`), `--size-mb` of records each, as
8 TFRecord shards with their indexes, and as MDS (mosaicml-streaming's format) for the peer.
Both live in the bucket directory of one versitygw data dir (its posix backend serves files
in place), so "local disk" and the servers read the same bytes (all from the page cache
once written: "local disk" is the local filesystem, not the device).

Sources: `local` (the files), `loopback` (versitygw on 127.0.0.1) and `link` (the same data
dir served by a second versitygw behind tests/helpers/netlink.py's emulated link: 10 ms each
way by tests/helpers/delay_proxy.py, 1 Gbit/s). Each run is a child process, two epochs of one
DataLoader: epoch 1 and epoch 2 (with `cache_dir=`, a fresh one per run; the peer has its local
shard cache). Peak RSS is the child's whole process tree, sampled from /proc; requests are
counted from the server's access log, not by the client. The peer needs mosaicml-streaming on
PYTHONPATH (`make bench-remote` installs it), which every child keeps.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from bench._common import DATA_DIR, print_table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers import netlink, s3server  # noqa: E402  (the tests' server and link: one implementation)
from helpers.rss import TreePeaks  # noqa: E402

BUCKET = "bench"
SHARDS = 8
IMAGE = {"d1": 16384, "110k": 110_000}
DESCRIPTION = {"image": "byte", "label": "float", "index": "int"}
SOURCES = ["local", "loopback", "link"]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "## Training from an object store, read-ahead across files (issue 24, item 6)"


# --- data ----------------------------------------------------------------------------------
def _records(kind: str, size_mb: int) -> int:
    return max(SHARDS * 4, size_mb * 1_000_000 // IMAGE[kind])


def _examples(kind: str, n: int):
    """(index, image bytes, label) for each record: incompressible images, as real JPEGs are."""
    rng = __import__("numpy").random.default_rng(24)
    for i in range(n):
        yield i, rng.bytes(IMAGE[kind]), float(i % 1000) / 1000.0


def make_data(server_dir: Path, kind: str, size_mb: int, with_peer: bool = True) -> Tuple[str, str, int, int]:
    """Write (once) the TFRecord shards with indexes and, for the peer, the MDS copy into the
    bucket directory; returns (tfrecord prefix, mds prefix, records, tfrecord bytes) under the
    bucket. Without the peer (`--no-peer`, or mosaicml-streaming not installed) no MDS is written."""
    from tfrecord_beam import example, records

    if with_peer:
        from streaming import MDSWriter
    else:  # the same loop, nothing written for the peer
        MDSWriter = _NoMDS  # noqa: N806

    n = _records(kind, size_mb)
    tfr, mds = f"tfr-{kind}-{n}", f"mds-{kind}-{n}"
    bucket = server_dir / "buckets" / BUCKET
    done = bucket / tfr / "_DONE"
    if not done.exists() or (with_peer and not (bucket / mds / "index.json").exists()):
        shutil.rmtree(bucket / tfr, ignore_errors=True)
        shutil.rmtree(bucket / mds, ignore_errors=True)
        (bucket / tfr).mkdir(parents=True)
        per = -(-n // SHARDS)
        rows = iter(_examples(kind, n))
        with MDSWriter(
            out=str(bucket / mds), columns={"image": "bytes", "label": "float32", "index": "int64"}, compression=None
        ) as mdsw:
            for k in range(SHARDS):
                chunk = [next(rows) for _ in range(min(per, n - k * per))]
                for i, image, label in chunk:
                    mdsw.write({"image": image, "label": label, "index": i})
                payloads = (
                    example.encode_example({"image": (im, "byte"), "label": (lb, "float"), "index": (i, "int")})
                    for i, im, lb in chunk
                )
                records.write_records(
                    str(bucket / tfr / f"part-{k:05d}-of-{SHARDS:05d}.tfrecord"), payloads, None, True
                )
        done.write_text(str(n))
    size = sum(p.stat().st_size for p in (bucket / tfr).glob("*.tfrecord"))
    return tfr, mds, n, size


class _NoMDS(contextlib.nullcontext):
    """MDSWriter's shape, writing nothing (a run without the peer)."""

    def __init__(self, **_: Any) -> None:
        super().__init__(self)

    def write(self, sample: Dict[str, Any]) -> None:
        pass


def tfrecord_paths(tfr: str, where: str, query: str, server_dir: Path) -> Tuple[List[str], List[str]]:
    """The shard and index paths of `tfr` as local files or s3:// URIs with `query`."""
    files = sorted((server_dir / "buckets" / BUCKET / tfr).glob("*.tfrecord"))
    indexes = [
        str(f) + ".tfindex" if Path(str(f) + ".tfindex").exists() else str(f.with_suffix(".tfindex")) for f in files
    ]
    if where == "local":
        return [str(f) for f in files], indexes
    data = [f"s3://{BUCKET}/{tfr}/{f.name}{query}" for f in files]
    return data, [f"s3://{BUCKET}/{tfr}/{Path(i).name}{query}" for i in indexes]


# --- one case, in a child process ----------------------------------------------------------
def cache_supported() -> bool:
    """Whether this build's TFRecordDataset takes `cache_dir=` (issue 24, item 2)."""
    from tfrecord_beam.torch import TFRecordDataset

    return "cache_dir" in inspect.signature(TFRecordDataset.__init__).parameters


def _log_count(log: Optional[str]) -> Optional[int]:
    if not log:
        return None
    time.sleep(0.3)  # each line is written as its request ends
    return sum(netlink.count_requests(Path(log)).values())


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children waited for (the
    DataLoader's workers, joined at the end of each epoch): the reader's whole cost."""
    mine, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + kids.ru_utime + kids.ru_stime


def _plain_epoch(spec: Dict[str, Any]) -> int:
    """The plain loop over the same local files: each file's chunks framed and CRC-checked
    (`RecordReader`), every chunk's Examples decoded in one call (`columnar.decode_examples`),
    no DataLoader. A local baseline slower than this is a bug in the benchmark."""
    from tfrecord_beam import columnar
    from tfrecord_beam._reader import RecordReader

    seen = 0
    for path in spec["data"]:
        for chunk in RecordReader(path, compression=None).chunks():
            columnar.decode_examples(
                chunk.buffer, DESCRIPTION, offsets=chunk.payload_offsets, lengths=chunk.payload_lengths
            )
            seen += len(chunk)
    return seen


def child(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run two epochs of one case; return their times, CPU seconds, records and request counts."""
    out: Dict[str, Any] = {"requests": [], "seconds": [], "records": [], "cpu": []}
    if spec["reader"] == "plain":
        from tfrecord_beam import columnar  # noqa: F401  (imported before the clock starts)
        from tfrecord_beam._reader import RecordReader  # noqa: F401

        for _ in range(2):
            cpu, start = _cpu_seconds(), time.perf_counter()
            out["records"].append(_plain_epoch(spec))
            out["seconds"].append(time.perf_counter() - start)
            out["cpu"].append(_cpu_seconds() - cpu)
            out["requests"].append(None)
        return out
    import torch.utils.data

    if spec["reader"] == "ours":
        from tfrecord_beam.torch import TFRecordDataset

        extra = {}
        if spec.get("cache_dir") and cache_supported():
            extra["cache_dir"] = spec["cache_dir"]
        ds = TFRecordDataset(spec["data"], spec["index"], DESCRIPTION, batch_size=spec["batch"], **extra)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=spec["workers"])
    else:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        ds = StreamingDataset(remote=spec.get("remote"), local=spec["local"], batch_size=spec["batch"], shuffle=False)
        loader = torch.utils.data.DataLoader(ds, batch_size=spec["batch"], num_workers=spec["workers"])
    before = _log_count(spec.get("log"))
    for _ in range(2):
        cpu, start = _cpu_seconds(), time.perf_counter()
        seen = 0
        batches = iter(loader)
        for batch in batches:
            seen += len(batch["index"])
        del batches  # the workers are joined (and counted in RUSAGE_CHILDREN) at the end
        out["seconds"].append(time.perf_counter() - start)
        out["cpu"].append(_cpu_seconds() - cpu)
        out["records"].append(seen)
        after = _log_count(spec.get("log"))
        out["requests"].append(None if after is None or before is None else after - before)
        before = after
    return out


def run_child(spec: Dict[str, Any], env: Dict[str, str], timeout: float = 3600) -> Tuple[Dict[str, Any], int]:
    """Run `child(spec)` in a fresh interpreter; (its result, peak RSS of its process tree)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.remote", "--child", json.dumps(spec)],
            env=env,
            stdout=out,
            stderr=err,
            cwd=ROOT,
        )
        peaks = TreePeaks()
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None:
                peaks.sample(proc.pid)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"case {spec} ran over {timeout} s")
                time.sleep(0.02)
        finally:  # a timeout, or this run stopped: the case (and its workers) go too
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        err.seek(0)
        text = out.read()
        if proc.returncode != 0 or not text.strip():
            raise RuntimeError(
                f"case {spec['reader']}/{spec['source']} failed ({proc.returncode}):\n{err.read()[-4000:]}"
            )
        return json.loads(text.strip().splitlines()[-1]), peaks.peak


# --- the run -------------------------------------------------------------------------------
def _pythonpath() -> str:
    """This checkout first, then the caller's PYTHONPATH (where the peer may come from)."""
    given = os.environ.get("PYTHONPATH")
    return str(ROOT) + (os.pathsep + given if given else "")


def _env(server: s3server.S3Server) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(server.reader_environment())
    env.update(
        {
            "PYTHONPATH": _pythonpath(),
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_DEFAULT_REGION": server.region,
            "S3_ENDPOINT_URL": server.endpoint,  # mosaicml-streaming's boto3 client reads it
            "PYTHONWARNINGS": "ignore",
        }
    )
    return env


def _peer_available() -> bool:
    try:
        import streaming  # noqa: F401
    except ImportError as exc:
        print(f"(mosaicml-streaming not importable, the peer is left out: {exc})", file=sys.stderr)
        return False
    return True


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 MB per dataset (unless --size-mb)")
    parser.add_argument("--size-mb", type=int, default=None, help="MB of records per dataset (default 200)")
    parser.add_argument("--data", nargs="+", default=["110k", "d1"], choices=sorted(IMAGE))
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 0])
    parser.add_argument("--sources", nargs="+", default=SOURCES, choices=SOURCES)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each tfrecord_beam case (medians)")
    parser.add_argument("--peer-repeats", type=int, default=1, help="runs of each peer and plain-loop case")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--no-peer", action="store_true", help="leave mosaicml-streaming out")
    parser.add_argument(
        "--rss-size-mb",
        type=int,
        default=1000,
        help="also run tfrecord_beam's 110 KB loopback cases once at this size, for peak RSS at two sizes (0: not)",
    )
    parser.add_argument("--results", action="store_true", help=f"write the table into {RESULTS.name}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    size_mb = args.size_mb or (16 if args.quick else 200)
    if args.quick:
        args.rss_size_mb = min(args.rss_size_mb, 64)
    # a `timeout` or Ctrl-C still stops the servers and removes the link's namespace
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    peer = not args.no_peer and _peer_available()
    work = DATA_DIR / "remote"
    server_dir = work / "server"
    load_before = os.getloadavg()
    loop = link = None
    try:
        loop_log = server_dir / "access-loopback.log"
        loop = s3server.start_local(server_dir, access_log=loop_log, log_name="loopback.log")
        if not (server_dir / "buckets" / BUCKET).is_dir():  # the posix backend serves a directory there
            loop.client().create_bucket(Bucket=BUCKET)
        link = netlink.EmulatedLink(server_dir).start()
        print(f"link: {link.mechanism}", flush=True)
        servers = {"loopback": (loop, str(loop_log)), "link": (link.client_server, str(link.access_log))}
        mechanism = link.mechanism

        def progress(rows: List[Dict[str, Any]], memory: List[Dict[str, Any]], final: bool) -> None:
            text = report(rows, args, size_mb, mechanism, load_before, os.getloadavg(), final, memory)
            if args.results:
                write_results(text)

        rows, memory = measure(args, size_mb, server_dir, servers, peer, progress)
    finally:
        if link is not None:
            link.stop()
        if loop is not None:
            loop.stop()
    failed = [r for r in rows + memory if r.get("error")]
    if failed:
        print(f"{len(failed)} case(s) failed:", file=sys.stderr)
        for r in failed:
            print(f"  {_case_name(r)}: {r['error']}", file=sys.stderr)
        sys.exit(1)


# A rough model of a run's duration, for the estimate printed at the start: a fresh interpreter,
# torch and the DataLoader workers, then two epochs at these rates (MB/s, the low end of what this
# benchmark measured on the loaded 2-core VM), and the data written once when not already there.
CASE_OVERHEAD_S = 6.0
RATE_MB_S = {"ours": 60.0, "mosaic": 25.0, "plain": 300.0}
WRITE_MB_S = 25.0
LINK_BPS = 1e9  # the emulated link's rate (netlink.EmulatedLink's default)


def plan(args, size_mb: int, peer: bool):
    """The cases in the order one round runs them, (data, workers, source, reader): for each
    dataset and worker count, local, loopback and link one after another (so the ratios compare
    runs minutes apart at most), then the peer's, then the plain loop; and the memory cases at
    `--rss-size-mb` (data, workers, source; tfrecord_beam only)."""
    cases = []
    for kind in args.data:
        cases.append((kind, 0, "local", "plain"))
        for workers in args.workers:
            cases += [(kind, workers, src, "ours") for src in args.sources]
            if peer:
                cases += [(kind, workers, src, "mosaic") for src in args.sources]
    memory = [("110k", w, "loopback") for w in args.workers] if args.rss_size_mb else []
    return cases, memory


def case_estimate(reader: str, size_mb: int) -> float:
    """Seconds one run of a case is expected to take (`CASE_OVERHEAD_S`, `RATE_MB_S`)."""
    return (CASE_OVERHEAD_S if reader != "plain" else 1.0) + 2 * size_mb / RATE_MB_S[reader]


def data_estimate(server_dir: Path, kinds, size_mb: int) -> float:
    """Seconds to write the datasets that are not written yet (TFRecord and MDS: twice the bytes)."""
    missing = [
        k for k in kinds if not (server_dir / "buckets" / BUCKET / f"tfr-{k}-{_records(k, size_mb)}" / "_DONE").exists()
    ]
    return len(missing) * 2 * size_mb / WRITE_MB_S


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.1f} min" if seconds >= 90 else f"{seconds:,.0f} s"


def measure(args, size_mb: int, server_dir: Path, servers, peer: bool, progress):
    """Run every case (`plan`) `--repeats` times, the rounds alternated (round 1 of every case,
    then round 2, ...: a burst of load on the shared machine lands on every case, not on all
    runs of one); the peer and the plain loop run `--peer-repeats` times. `progress(rows,
    memory_rows, final)` after each round. A case that fails is a row with its `error`, and the
    run goes on. Returns (rows, memory rows)."""
    cases, memory_cases = plan(args, size_mb, peer)
    repeats = {c: (args.repeats if c[3] == "ours" else args.peer_repeats) for c in cases}
    estimates = {c: case_estimate(c[3], size_mb) for c in cases}
    total = sum(estimates[c] * repeats[c] for c in cases)
    total += len(memory_cases) * case_estimate("ours", args.rss_size_mb or 0)
    writing = data_estimate(server_dir, args.data, size_mb) + (
        data_estimate(server_dir, ["110k"], args.rss_size_mb) if memory_cases else 0.0
    )
    print(
        f"{len(cases)} cases ({args.repeats} runs of tfrecord_beam's, {args.peer_repeats} of the peer's and the "
        f"plain loop's, alternated) at {size_mb:,} MB per dataset"
        + (f", then {len(memory_cases)} memory cases at {args.rss_size_mb:,} MB" if memory_cases else "")
        + f": about {_minutes(total + writing)} ({_minutes(writing)} of it writing data)",
        flush=True,
    )
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="tfrb-remote-", dir=server_dir.parent))
    datasets: Dict[Tuple[str, int], Tuple[str, str, int, int]] = {}
    runs: Dict[Tuple[str, int, str, str], List[Tuple[Dict[str, Any], int, float]]] = {c: [] for c in cases}
    errors: Dict[Tuple[str, int, str, str], str] = {}

    def dataset(kind: str, mb: int) -> Tuple[str, str, int, int]:
        if (kind, mb) not in datasets:
            datasets[kind, mb] = make_data(server_dir, kind, mb, with_peer=peer and mb == size_mb)
            tfr, mds, n, size = datasets[kind, mb]
            print(f"{kind}: {n:,} records, {size / 1e6:,.0f} MB in {SHARDS} shards", flush=True)
        return datasets[kind, mb]

    def run_once(kind: str, workers: int, source: str, reader: str, mb: int, r: int):
        tfr, mds, n, size = dataset(kind, mb)
        cache = scratch / f"cache-{reader}-{source}-{kind}-{workers}-{mb}-{r}"
        spec, env = _spec(reader, source, tfr, mds, workers, args.batch, server_dir, servers, cache)
        try:
            result, peak = run_child(spec, env)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        for got in result["records"]:
            if got != n:
                raise RuntimeError(f"{reader}/{source}/{kind}: {got} records, expected {n}")
        return result, peak, os.getloadavg()[0]

    def rows_now() -> List[Dict[str, Any]]:
        out = []
        for c in cases:
            kind, workers, source, reader = c
            tfr, mds, n, size = dataset(kind, size_mb)
            if c in errors:
                row = {"data": kind, "workers": workers, "source": source, "reader": reader, "records": n}
                row["bytes"], row["runs"], row["error"] = size, len(runs[c]), errors[c]
                out.append(row)
            elif runs[c]:
                out.append(_row(reader, source, kind, workers, n, size, runs[c]))
        return out

    memory: List[Dict[str, Any]] = []
    done = 0
    try:
        for r in range(max(args.repeats, args.peer_repeats)):
            for c in cases:
                if r >= repeats[c] or c in errors:
                    continue
                try:
                    runs[c].append(run_once(*c, size_mb, r))
                    print(_run_line(c, runs[c][-1], dataset(c[0], size_mb)[2]), end="", flush=True)
                except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
                    errors[c] = " ".join(str(exc).split())[-500:]
                    print(f"  {c}: FAILED: {errors[c][:300]}", end="", flush=True)
                done += estimates[c]
                spent = time.monotonic() - started
                print(f"  [{_minutes(spent)} so far, about {_minutes((total - done) * spent / max(done, 1.0))} left]")
            if args.results:
                progress(rows_now(), memory, False)
        full = {(r_["data"], r_["workers"], r_["source"]): r_ for r_ in rows_now() if r_["reader"] == "ours"}
        for kind, workers, source in memory_cases:
            try:
                result = run_once(kind, workers, source, "ours", args.rss_size_mb, 0)
                tfr, mds, n, size = dataset(kind, args.rss_size_mb)
                row = _row("ours", source, kind, workers, n, size, [result])
            except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
                row = {"data": kind, "workers": workers, "source": source, "reader": "ours", "error": str(exc)[-500:]}
            row["size_mb"] = args.rss_size_mb
            row["small"] = full.get((kind, workers, source))
            memory.append(row)
            print(_line(row), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = rows_now()
    progress(rows, memory, True)
    return rows, memory


def _spec(reader, source, tfr, mds, workers, batch, server_dir, servers, cache: Path):
    """The child's case and environment: which reader, where from, its cache directory."""
    spec: Dict[str, Any] = {"reader": reader, "source": source, "workers": workers, "batch": batch}
    if source == "local":
        env = dict(os.environ, PYTHONPATH=_pythonpath(), PYTHONWARNINGS="ignore")
        if reader in ("ours", "plain"):
            spec["data"], spec["index"] = tfrecord_paths(tfr, "local", "", server_dir)
        else:
            spec["local"], spec["remote"] = str(server_dir / "buckets" / BUCKET / mds), None
        return spec, env
    server, log = servers[source]
    env = _env(server)
    spec["log"] = log
    if reader == "ours":
        spec["data"], spec["index"] = tfrecord_paths(tfr, "s3", server.query, server_dir)
        spec["cache_dir"] = str(cache)  # used when this build has cache_dir=
    else:
        spec["remote"], spec["local"] = f"s3://{BUCKET}/{mds}", str(cache)
    return spec, env


def _row(reader, source, kind, workers, n, size, runs) -> Dict[str, Any]:
    med = statistics.median
    req = [r["requests"] for r, _, _ in runs]
    return {
        "data": kind,
        "workers": workers,
        "source": source,
        "reader": reader,
        "records": n,
        "bytes": size,
        "e1": med(r["seconds"][0] for r, _, _ in runs),
        "e2": med(r["seconds"][1] for r, _, _ in runs),
        "cpu1": med(r["cpu"][0] for r, _, _ in runs),
        "cpu2": med(r["cpu"][1] for r, _, _ in runs),
        "rss": med(p for _, p, _ in runs),
        "load": med(x for _, _, x in runs),
        "loads": [x for _, _, x in runs],
        "req1": None if req[0][0] is None else med(q[0] for q in req),
        "req2": None if req[0][1] is None else med(q[1] for q in req),
        "runs": len(runs),
    }


def _case_name(row) -> str:
    return f"{row['data']} w={row['workers']} {row['source']} {row['reader']}" + (
        f" at {row['size_mb']:,} MB" if row.get("size_mb") else ""
    )


def _run_line(case, run, n: int) -> str:
    kind, workers, source, reader = case
    result, peak, load = run
    s, c = result["seconds"], result["cpu"]
    return (
        f"  {kind:4} w={workers} {source:8} {reader:6} e1 {n / s[0]:7,.0f} rec/s cpu {c[0]:5.2f} s  "
        f"e2 {n / s[1]:7,.0f} rec/s cpu {c[1]:5.2f} s  rss {peak / 2**20:5,.0f} MiB  load {load:.1f}"
    )


def _line(row) -> str:
    if row.get("error"):
        return f"  {_case_name(row)}: FAILED: {row['error'][:300]}"
    return (
        f"  {_case_name(row)}: e1 {row['records'] / row['e1']:,.0f} rec/s (cpu {row['cpu1']:.2f} s)  "
        f"e2 {row['records'] / row['e2']:,.0f} rec/s (cpu {row['cpu2']:.2f} s)  rss {row['rss'] / 2**20:,.0f} MiB"
    )


READER_NAMES = {"ours": "tfrecord_beam", "mosaic": "mosaicml-streaming", "plain": "plain loop (1 process)"}


def _bound(row, local) -> Tuple[float, str]:
    """(records/s the row can reach at best, which bound that is): local speed, or for the link
    the lower of that and the link's payload capacity."""
    if local is None:
        return float("nan"), "-"
    best = row["records"] / local
    if row["source"] != "link":
        return best, "local"
    link = LINK_BPS / 8 / (row["bytes"] / row["records"])
    return (best, "local") if best <= link else (link, "link")


def report(rows, args, size_mb, mechanism, load_before, load_after, final: bool = True, memory=()) -> str:
    header = [
        "data",
        "workers",
        "source",
        "reader",
        "e1 rec/s",
        "e1 / bound",
        "e1 CPU s",
        "e1 CPU / local",
        "e2 rec/s",
        "e2 / local",
        "e2 CPU s",
        "e2 CPU / local",
        "peak RSS MiB",
        "requests e1 / e2",
        "load (runs)",
        "bound e1",
    ]
    base = {(r["data"], r["workers"]): r for r in rows if r["reader"] == "ours" and r["source"] == "local"}
    base = {k: v for k, v in base.items() if not v.get("error")}
    table = []
    for r in rows:
        name = READER_NAMES[r["reader"]]
        if r.get("error"):
            table.append([r["data"], r["workers"], r["source"], name] + ["failed (see below)"] + [""] * 11)
            continue
        local = base.get((r["data"], r["workers"])) if r["reader"] == "ours" else None
        n = r["records"]
        if local is not None and r is not local:
            bound, which = _bound(r, local["e1"])
            e1_ratio = f"{n / r['e1'] / bound:.2f}"
            c1 = f"{r['cpu1'] / local['cpu1']:.2f}"
            e2_ratio = f"{local['e2'] / r['e2']:.2f}"
            c2 = f"{r['cpu2'] / local['cpu2']:.2f}"
        else:
            e1_ratio = c1 = e2_ratio = c2 = which = "baseline" if r is local else "-"
        req = "-" if r["req1"] is None else f"{r['req1']:,.0f} / {r['req2']:,.0f}"
        loads = " ".join(f"{x:.1f}" for x in r["loads"])
        table.append(
            [r["data"], r["workers"], r["source"], name, n / r["e1"], e1_ratio, r["cpu1"], c1]
            + [n / r["e2"], e2_ratio, r["cpu2"], c2, r["rss"] / 2**20, req, loads, which]
        )
    title = (
        f"{size_mb:,} MB per dataset, batch {args.batch}, medians of {args.repeats} alternated runs "
        f"(the peer and the plain loop: {args.peer_repeats})"
    )
    if not final:
        title += " (partial: the run is still going or was stopped)"
    text = _table(title, header, table) if not final else print_table(title, header, table)
    notes = [
        f"- link: {mechanism}.",
        "- baseline (the local side of every ratio): tfrecord_beam's TFRecordDataset over the same files on "
        "local disk (page cache), same batch size, workers, index and description; it must not be slower "
        "than the plain loop (RecordReader + one columnar decode per chunk, one process), shown beside it.",
        "- e1 / bound: epoch 1 records/s over the bound: local speed (the baseline's epoch 1), or through "
        f"the link the lower of that and the link's payload capacity ({LINK_BPS / 8e6:.0f} MB/s); `bound e1` "
        "says which. e2 / local: epoch 2 (tfrecord_beam: from cache_dir=, a fresh directory per run) over the "
        "baseline's epoch 2.",
        "- CPU s: user + system CPU seconds of the whole reader (the process and its DataLoader workers, "
        "getrusage SELF + CHILDREN around each epoch), not counting the server or the link's proxy; "
        "CPU / local: over the baseline's for the same epoch (target <= 1.2).",
        "- peak RSS: the case's whole process tree, sampled from /proc every 20 ms.",
        f"- load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, on {os.cpu_count()} cores "
        f"({platform.node()}); `load (runs)`: the 1-minute load as each run ended. The machine is shared: "
        "wall-clock rates move with the load, CPU seconds much less.",
        "- mosaicml-streaming's epoch 2 reads its local shard cache (filled in epoch 1).",
    ]
    notes += [f"- {_case_name(r)} failed: {r['error']}" for r in list(rows) + list(memory) if r.get("error")]
    extra = "\n".join(notes) + "\n"
    if final:
        print(extra, flush=True)
    if memory:
        extra += "\n" + memory_table(memory, size_mb, final)
    return text + "\n" + extra


def memory_table(memory, size_mb: int, final: bool) -> str:
    """tfrecord_beam's peak RSS at the large size beside the main size's, case by case."""
    big_mb = memory[0]["size_mb"]
    header = ["data", "workers", "source", f"peak RSS MiB at {size_mb:,} MB", f"at {big_mb:,} MB", "difference MiB"]
    table = []
    for m in memory:
        small = m.get("small")
        small_mib = None if small is None else small["rss"] / 2**20
        large = None if m.get("error") else m["rss"] / 2**20
        diff = "-" if small_mib is None or large is None else f"{large - small_mib:+,.0f}"
        table.append([m["data"], m["workers"], m["source"], small_mib or "-", large or "-", diff])
    title = f"Peak RSS of tfrecord_beam at two sizes ({size_mb:,} and {big_mb:,} MB per dataset, process tree)"
    text = _table(title, header, table) if not final else print_table(title, header, table)
    note = (
        "- Flat means the read-ahead's memory does not grow with the data: each reader holds at most its "
        "requests in flight plus the blocks being read, (readahead_requests + 2) x 16 MiB by default.\n"
    )
    if final:
        print(note, flush=True)
    return text + "\n" + note


def _table(title, header, rows) -> str:
    """print_table's Markdown without printing it."""
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return print_table(title, header, rows)


def write_results(text: str) -> None:
    """Put `text` under SECTION in RESULTS.md, replacing that section if it is there."""
    body = RESULTS.read_text() if RESULTS.exists() else ""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = f"{SECTION}\n\n`python -m bench.remote` ({stamp}).\n\n{text}"
    if SECTION in body:
        head, rest = body.split(SECTION, 1)
        tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
        body = head + section + tail
    else:
        body = body.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(body)


if __name__ == "__main__":
    main()
