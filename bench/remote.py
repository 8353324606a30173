"""Training from an object store (issue 24, item 6): our torch dataset from local disk, from an
S3-protocol server on loopback and through an emulated link, beside mosaicml-streaming.

    python -m bench.remote [--quick] [--size-mb 2000] [--data 110k d1] [--workers 2 0]
                           [--repeats 1] [--batch 64] [--no-peer] [--results]

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
"""

from __future__ import annotations

import argparse
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


def make_data(server_dir: Path, kind: str, size_mb: int) -> Tuple[str, str, int, int]:
    """Write (once) the TFRecord shards with indexes and the MDS copy into the bucket
    directory; returns (tfrecord prefix, mds prefix, records, tfrecord bytes) under the bucket."""
    from streaming import MDSWriter

    from tfrecord_beam import example, records

    n = _records(kind, size_mb)
    tfr, mds = f"tfr-{kind}-{n}", f"mds-{kind}-{n}"
    bucket = server_dir / "buckets" / BUCKET
    done = bucket / tfr / "_DONE"
    if not done.exists():
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
def _env(server: s3server.S3Server) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(server.reader_environment())
    env.update(
        {
            "PYTHONPATH": str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
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

        def progress(rows: List[Dict[str, Any]], final: bool) -> None:
            text = report(rows, args, size_mb, mechanism, load_before, os.getloadavg(), final)
            if args.results:
                write_results(text)

        measure(args, size_mb, server_dir, servers, peer, progress)
    finally:
        if link is not None:
            link.stop()
        if loop is not None:
            loop.stop()


def measure(args, size_mb: int, server_dir: Path, servers, peer: bool, progress) -> List[Dict[str, Any]]:
    """Run every case; `progress(rows, final)` after each (a long run that is stopped still
    leaves its rows so far in RESULTS.md)."""
    rows: List[Dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="tfrb-remote-", dir=server_dir.parent))
    try:
        for kind in args.data:
            tfr, mds, n, size = make_data(server_dir, kind, size_mb)
            print(f"{kind}: {n:,} records, {size / 1e6:,.0f} MB in {SHARDS} shards", flush=True)
            for workers in args.workers:
                for source in args.sources:
                    readers = ["ours"] + (["mosaic"] if peer else [])
                    for reader in readers:
                        runs = []
                        for r in range(args.repeats):
                            cache = scratch / f"cache-{reader}-{source}-{kind}-{workers}-{r}"
                            spec, env = _spec(reader, source, tfr, mds, workers, args.batch, server_dir, servers, cache)
                            result, peak = run_child(spec, env)
                            shutil.rmtree(cache, ignore_errors=True)
                            for got in result["records"]:
                                if got != n:
                                    raise RuntimeError(f"{reader}/{source}/{kind}: {got} records, expected {n}")
                            runs.append((result, peak))
                        rows.append(_row(reader, source, kind, workers, n, size, runs))
                        rows[-1]["load"] = os.getloadavg()[0]
                        print(_line(rows[-1]), flush=True)
                        if args.results:
                            progress(rows, False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    progress(rows, True)
    return rows


def _spec(reader, source, tfr, mds, workers, batch, server_dir, servers, cache: Path):
    """The child's case and environment: which reader, where from, its cache directory."""
    spec: Dict[str, Any] = {"reader": reader, "source": source, "workers": workers, "batch": batch}
    if source == "local":
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
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


def _line(row) -> str:
    return (
        f"  {row['data']} w={row['workers']} {row['source']:8} {row['reader']:6} "
        f"e1 {row['records'] / row['e1']:,.0f} rec/s  e2 {row['records'] / row['e2']:,.0f} rec/s  "
        f"rss {row['rss'] / 2**20:,.0f} MiB  requests {row['req1']}/{row['req2']}"
    )


def report(rows, args, size_mb, mechanism, load_before, load_after, final: bool = True) -> str:
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
        mb = r["bytes"] / 1e6
        req = "-" if r["req1"] is None else f"{r['req1']:,.0f} / {r['req2']:,.0f}"
        table.append(
            [
                r["data"],
                r["workers"],
                r["source"],
                "tfrecord_beam" if r["reader"] == "ours" else "mosaicml-streaming",
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
    extra = "\n".join(notes) + "\n"
    if final:
        print(extra, flush=True)
    return text + "\n" + extra


def _table(title, header, rows) -> str:
    """print_table's Markdown without printing it."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return print_table(title, header, rows)


def _ratios(rows) -> List[str]:
    """The issue's targets as ratios, for each dataset at the largest worker count measured."""
    out = []
    pick = {(r["data"], r["workers"], r["source"], r["reader"]): r for r in rows}
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
