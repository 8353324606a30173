"""Training from an object store (issue 24, item 6): our torch dataset from local disk, from an
S3-protocol server on loopback and through an emulated link, beside mosaicml-streaming.

    python -m bench.remote [--quick] [--size-mb 2000] [--data 110k d1] [--workers 2 0]
                           [--repeats 1] [--batch 64] [--no-peer] [--memory-size-mb M] [--results]

With no flags it runs all 24 cases: {D1-like, 110 KB records} x {2, 0 DataLoader workers} x
{local disk, server on loopback, emulated link} x {tfrecord_beam, mosaicml-streaming}, each
`--repeats` times (medians reported), then tfrecord_beam's 12 cases once more at
`--memory-size-mb` (default an eighth of the size) for its peak RSS at two sizes. It prints an
estimate of its duration at the start and of the time left after each case; a case that fails
is reported and the run goes on (exit status 1 at the end).

Data: D1-like Examples (a 16 KiB `image`, `label`, `index`) and the same with a 110 KB image,
`--size-mb` of records each (2,000 by default, 16 with `--quick`), as 8 TFRecord shards with
their indexes, and as MDS (mosaicml-streaming's format, its default 64 MiB shards) for the peer.
Both live in the bucket directory of one versitygw data dir (its posix backend serves files
in place), so "local disk" and the servers read the same bytes (all from the page cache
once written: "local disk" is the local filesystem, not the device).

Sources: `local` (the files), `loopback` (versitygw on 127.0.0.1) and `link` (the same data
dir served by a second versitygw behind tests/helpers/netlink.py's emulated link: 10 ms each
way, 1 Gbit/s). Each case runs in a child process, two epochs of one DataLoader: epoch 1 and
epoch 2 (with `cache_dir=` when this build's `TFRecordDataset` has it; the peer always has its
local shard cache). Peak RSS is the child's whole process tree (DataLoader workers included),
sampled from /proc; requests are counted from the server's access log, not by the client.
The peer needs mosaicml-streaming (`make bench-remote` installs it; or put it on PYTHONPATH,
which every case's child keeps).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
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


def child(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run two epochs of one case; return their times, records and request counts."""
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
    out: Dict[str, Any] = {"requests": [], "seconds": [], "records": []}
    before = _log_count(spec.get("log"))
    for _ in range(2):
        start = time.perf_counter()
        seen = 0
        for batch in loader:
            seen += len(batch["index"])
        out["seconds"].append(time.perf_counter() - start)
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
    parser.add_argument("--size-mb", type=int, default=None, help="MB of records per dataset (default 2000)")
    parser.add_argument("--data", nargs="+", default=["110k", "d1"], choices=sorted(IMAGE))
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 0])
    parser.add_argument("--sources", nargs="+", default=SOURCES, choices=SOURCES)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each case (medians are reported)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--no-peer", action="store_true", help="leave mosaicml-streaming out")
    parser.add_argument(
        "--memory-size-mb",
        type=int,
        default=None,
        help="also run tfrecord_beam's cases once at this size, for peak RSS at two sizes "
        "(default: an eighth of --size-mb, at least 16; 0: not)",
    )
    parser.add_argument("--results", action="store_true", help=f"write the table into {RESULTS.name}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    size_mb = args.size_mb or (16 if args.quick else 2000)
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


# A rough model of a case's duration, for the estimate printed at the start: a fresh interpreter,
# torch and the DataLoader workers, then two epochs at these rates (MB/s, the low end of what this
# benchmark measured on the loaded 2-core VM at 2 GB; an idle machine is faster), and the data
# written once (TFRecord and MDS) when not already there.
CASE_OVERHEAD_S = 10.0
RATE_MB_S = {"ours": 40.0, "mosaic": 17.0}
WRITE_MB_S = 25.0


def plan(args, size_mb: int, peer: bool) -> Tuple[List[Tuple[str, int, str, str]], List[Tuple[str, int, str]]]:
    """The cases in the order they run: (data, workers, source, reader), and the memory cases
    at the second size (data, workers, source; tfrecord_beam only)."""
    readers = ["ours"] + (["mosaic"] if peer else [])
    cases = [(k, w, src, r) for k in args.data for w in args.workers for src in args.sources for r in readers]
    memory = [(k, w, src) for k in args.data for w in args.workers for src in args.sources]
    return cases, memory if memory_size(args, size_mb) else []


def memory_size(args, size_mb: int) -> int:
    """MB per dataset of the memory cases (0: none)."""
    if args.memory_size_mb is not None:
        return max(0, min(args.memory_size_mb, size_mb - 1))
    return max(16, size_mb // 8) if size_mb >= 32 else 0


def case_estimate(reader: str, size_mb: int) -> float:
    """Seconds one run of a case is expected to take (`CASE_OVERHEAD_S`, `RATE_MB_S`)."""
    return CASE_OVERHEAD_S + 2 * size_mb / RATE_MB_S[reader]


def data_estimate(server_dir: Path, kinds, size_mb: int) -> float:
    """Seconds to write the datasets that are not written yet (TFRecord and MDS: twice the bytes)."""
    missing = [
        k for k in kinds if not (server_dir / "buckets" / BUCKET / f"tfr-{k}-{_records(k, size_mb)}" / "_DONE").exists()
    ]
    return len(missing) * 2 * size_mb / WRITE_MB_S


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.0f} min" if seconds >= 90 else f"{seconds:,.0f} s"


def measure(args, size_mb: int, server_dir: Path, servers, peer: bool, progress):
    """Run every case (`plan`); `progress(rows, memory_rows, final)` after each (a long run that
    is stopped still leaves its rows so far in RESULTS.md). A case that fails is a row with its
    `error`, and the run goes on. Returns (rows, memory rows)."""
    rows: List[Dict[str, Any]] = []
    memory: List[Dict[str, Any]] = []
    cases, memory_cases = plan(args, size_mb, peer)
    small_mb = memory_size(args, size_mb)
    estimates = [case_estimate(reader, size_mb) * args.repeats for _, _, _, reader in cases]
    estimates += [case_estimate("ours", small_mb) for _ in memory_cases]
    writing = data_estimate(server_dir, args.data, size_mb) + (
        data_estimate(server_dir, args.data, small_mb) if memory_cases else 0.0
    )
    total = sum(estimates) + writing
    print(
        f"{len(cases)} cases x {args.repeats} run(s) at {size_mb:,} MB per dataset"
        + (f", then {len(memory_cases)} memory cases at {small_mb:,} MB" if memory_cases else "")
        + f": about {_minutes(total)} (a rough model: {RATE_MB_S['ours']:.0f} MB/s for tfrecord_beam, "
        f"{RATE_MB_S['mosaic']:.0f} for the peer, {CASE_OVERHEAD_S:.0f} s a case, "
        f"{_minutes(writing)} writing data; the estimate is corrected as cases end)",
        flush=True,
    )
    started = time.monotonic()
    expected_so_far = writing
    scratch = Path(tempfile.mkdtemp(prefix="tfrb-remote-", dir=server_dir.parent))
    datasets: Dict[Tuple[str, int], Tuple[str, str, int, int]] = {}

    def dataset(kind: str, mb: int) -> Tuple[str, str, int, int]:
        if (kind, mb) not in datasets:
            datasets[kind, mb] = make_data(server_dir, kind, mb, with_peer=peer)
            tfr, mds, n, size = datasets[kind, mb]
            print(f"{kind}: {n:,} records, {size / 1e6:,.0f} MB in {SHARDS} shards", flush=True)
        return datasets[kind, mb]

    def run_case(kind: str, workers: int, source: str, reader: str, mb: int, repeats: int) -> Dict[str, Any]:
        tfr, mds, n, size = dataset(kind, mb)
        runs = []
        try:
            for r in range(repeats):
                cache = scratch / f"cache-{reader}-{source}-{kind}-{workers}-{mb}-{r}"
                spec, env = _spec(reader, source, tfr, mds, workers, args.batch, server_dir, servers, cache)
                try:
                    result, peak = run_child(spec, env)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                for got in result["records"]:
                    if got != n:
                        raise RuntimeError(f"{reader}/{source}/{kind}: {got} records, expected {n}")
                runs.append((result, peak))
            row = _row(reader, source, kind, workers, n, size, runs)
        except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
            row = {"data": kind, "workers": workers, "source": source, "reader": reader, "records": n}
            row["bytes"], row["runs"], row["error"] = size, len(runs), " ".join(str(exc).split())[-500:]
        row["load"] = os.getloadavg()[0]
        return row

    def eta(done: int) -> str:
        nonlocal expected_so_far
        expected_so_far += estimates[done - 1]
        left = sum(estimates[done:])
        scale = (time.monotonic() - started) / max(expected_so_far, 1.0)
        return f"[{done}/{len(estimates)}, {_minutes(time.monotonic() - started)} so far, about {_minutes(left * scale)} left]"

    try:
        for kind, workers, source, reader in cases:
            rows.append(run_case(kind, workers, source, reader, size_mb, args.repeats))
            print(_line(rows[-1]), eta(len(rows)), flush=True)
            if args.results:
                progress(rows, memory, False)
        for kind, workers, source in memory_cases:
            memory.append(run_case(kind, workers, source, "ours", small_mb, 1))
            memory[-1]["size_mb"] = small_mb
            print(_line(memory[-1]), eta(len(rows) + len(memory)), flush=True)
            if args.results:
                progress(rows, memory, False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    progress(rows, memory, True)
    return rows, memory


def _spec(reader, source, tfr, mds, workers, batch, server_dir, servers, cache: Path):
    """The child's case and environment: which reader, where from, its cache directory."""
    spec: Dict[str, Any] = {"reader": reader, "source": source, "workers": workers, "batch": batch}
    if source == "local":
        env = dict(os.environ, PYTHONPATH=_pythonpath(), PYTHONWARNINGS="ignore")
        if reader == "ours":
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
    e1 = statistics.median(r["seconds"][0] for r, _ in runs)
    e2 = statistics.median(r["seconds"][1] for r, _ in runs)
    req = [r["requests"] for r, _ in runs]
    return {
        "data": kind,
        "workers": workers,
        "source": source,
        "reader": reader,
        "records": n,
        "bytes": size,
        "e1": e1,
        "e2": e2,
        "rss": statistics.median(p for _, p in runs),
        "req1": None if req[0][0] is None else statistics.median(q[0] for q in req),
        "req2": None if req[0][1] is None else statistics.median(q[1] for q in req),
        "runs": len(runs),
    }


def _case_name(row) -> str:
    return f"{row['data']} w={row['workers']} {row['source']} {row['reader']}" + (
        f" at {row['size_mb']:,} MB" if row.get("size_mb") else ""
    )


def _line(row) -> str:
    if row.get("error"):
        return f"  {_case_name(row)}: FAILED: {row['error'][:300]}"
    return (
        f"  {row['data']} w={row['workers']} {row['source']:8} {row['reader']:6} "
        f"e1 {row['records'] / row['e1']:,.0f} rec/s  e2 {row['records'] / row['e2']:,.0f} rec/s  "
        f"rss {row['rss'] / 2**20:,.0f} MiB  requests "
        + ("-" if row["req1"] is None else f"{row['req1']:,.0f}/{row['req2']:,.0f}")
    )


def report(rows, args, size_mb, mechanism, load_before, load_after, final: bool = True, memory=()) -> str:
    cache = cache_supported()
    header = [
        "data",
        "workers",
        "source",
        "reader",
        "epoch 1 rec/s",
        "epoch 1 MB/s",
        "epoch 2 rec/s",
        "epoch 2 MB/s",
        "peak RSS MiB",
        "requests e1 / e2",
        "load",
    ]
    table = []
    for r in rows:
        name = "tfrecord_beam" if r["reader"] == "ours" else "mosaicml-streaming"
        if r.get("error"):
            failed = "failed (see below)"
            table.append([r["data"], r["workers"], r["source"], name] + [failed] * 6 + [f"{r.get('load', 0):.1f}"])
            continue
        mb = r["bytes"] / 1e6
        req = "-" if r["req1"] is None else f"{r['req1']:,.0f} / {r['req2']:,.0f}"
        table.append(
            [
                r["data"],
                r["workers"],
                r["source"],
                name,
                r["records"] / r["e1"],
                mb / r["e1"],
                r["records"] / r["e2"],
                mb / r["e2"],
                r["rss"] / 2**20,
                req,
                f"{r.get('load', 0):.1f}",
            ]
        )
    title = f"{size_mb:,} MB per dataset, batch {args.batch}, medians of {args.repeats} run(s)"
    if not final:
        title += " (partial: the run is still going or was stopped)"
    text = _table(title, header, table) if not final else print_table(title, header, table)
    notes = [
        f"- link: {mechanism}.",
        f"- epoch 2 of tfrecord_beam: {'with cache_dir= (a fresh directory per case)' if cache else 'cache_dir= not available in this build: epoch 2 reads the source again'}; "
        "mosaicml-streaming's epoch 2 reads its local shard cache (filled in epoch 1).",
        f"- load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, on {os.cpu_count()} cores "
        f"({platform.node()}); the machine is shared with other sessions: wall-clock rates move with them.",
        "- MB/s: TFRecord bytes of the dataset / epoch seconds (the same records for both readers).",
        "- load: the 1-minute load average as the case ended.",
    ]
    notes += _ratios(rows)
    notes += [f"- {_case_name(r)} failed: {r['error']}" for r in list(rows) + list(memory) if r.get("error")]
    extra = "\n".join(notes) + "\n"
    if final:
        print(extra, flush=True)
    if memory:
        extra += "\n" + memory_table(rows, memory, size_mb, final)
    return text + "\n" + extra


def memory_table(rows, memory, size_mb: int, final: bool) -> str:
    """tfrecord_beam's peak RSS at the small size beside the full size's, case by case."""
    full = {(r["data"], r["workers"], r["source"]): r for r in rows if r["reader"] == "ours" and not r.get("error")}
    small_mb = memory[0]["size_mb"]
    header = ["data", "workers", "source", f"peak RSS MiB at {small_mb:,} MB", f"at {size_mb:,} MB", "difference MiB"]
    table = []
    for m in memory:
        big = full.get((m["data"], m["workers"], m["source"]))
        small = None if m.get("error") else m["rss"] / 2**20
        large = None if big is None else big["rss"] / 2**20
        diff = "-" if small is None or large is None else f"{large - small:+,.0f}"
        table.append([m["data"], m["workers"], m["source"], small or "-", large or "-", diff])
    title = f"Peak RSS of tfrecord_beam at two sizes ({small_mb:,} and {size_mb:,} MB per dataset, process tree)"
    text = _table(title, header, table) if not final else print_table(title, header, table)
    note = (
        "- Flat means the read-ahead's memory does not grow with the data; it is only full when each "
        "reader's blocks in flight are (readahead_requests + 2) x 16 MiB by default, so below ~100 MB "
        "per dataset the smaller size holds fewer or smaller blocks and the difference is that, not growth.\n"
    )
    if final:
        print(note, flush=True)
    return text + "\n" + note


def _table(title, header, rows) -> str:
    """print_table's Markdown without printing it."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return print_table(title, header, rows)


def _ratios(rows) -> List[str]:
    """The issue's targets as ratios, for each dataset at the largest worker count measured."""
    out = []
    pick = {(r["data"], r["workers"], r["source"], r["reader"]): r for r in rows if not r.get("error")}
    for (kind, workers, source, reader), r in sorted(pick.items()):
        if reader != "ours" or source != "link":
            continue
        local = pick.get((kind, workers, "local", "ours"))
        peer = pick.get((kind, workers, "link", "mosaic"))
        parts = []
        if local:
            parts.append(f"epoch 1 {local['e1'] / r['e1']:.0%} of local disk (target 80%)")
            parts.append(f"epoch 2 {local['e1'] / r['e2']:.0%} (target 95%)")
        if peer:
            parts.append(f"epoch 1 {peer['e1'] / r['e1']:.2f}x the peer's, epoch 2 {peer['e2'] / r['e2']:.2f}x")
        out.append(f"- {kind}, {workers} workers, through the link: " + "; ".join(parts) + ".")
    return out


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
