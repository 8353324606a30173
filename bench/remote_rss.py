"""Peak RSS of bench.remote's 0-worker loopback case, split (RssAnon / RssFile / RssShmem) and
per epoch (1: from the server, 2: from cache_dir), with pyarrow's pool and tracemalloc figures.

    SIZES=128,256,512,1024 VARIANTS="default;MALLOC_MMAP_THRESHOLD_=1048576;TRACE;TRIM=1" \
        python bench/remote_rss.py

A variant is `,`-joined NAME=VALUE environment settings of the child ("default": none; TRACE:
tracemalloc on; WORKERS=N: DataLoader workers, default 0; TRIM=1: malloc_trim(0) after each new block). Data: bench.remote's 110 KB
records in 8 shards under /tmp/rssgrow/server (versitygw on port 9611). See RESULTS.md,
"Peak memory through a server" section.
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon", "RssFile", "RssShmem", "VmRSS")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) // 1024
    return out


def child(spec):
    import pyarrow as pa
    import torch.utils.data

    from bench.remote import DESCRIPTION
    from tfrecord_beam.torch import TFRecordDataset

    if os.environ.get("TRIM"):
        import ctypes

        from tfrecord_beam import _readahead

        trim = ctypes.CDLL("libc.so.6").malloc_trim
        orig = _readahead.ReadAheadFile._block

        def _block(self, g, orig=orig):
            fresh = g not in self._recent
            data = orig(self, g)
            if fresh:
                trim(0)
            return data

        _readahead.ReadAheadFile._block = _block
    peak = {}
    stop = False

    def sampler():
        while not stop:
            s = status()
            for k, v in s.items():
                peak[k] = max(peak.get(k, 0), v)
            time.sleep(0.01)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    if spec.get("trace"):
        import tracemalloc

        tracemalloc.start()
    ds = TFRecordDataset(spec["data"], spec["index"], DESCRIPTION, batch_size=64, cache_dir=spec["cache_dir"])
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=int(os.environ.get("WORKERS", "0")))
    res = {"pool": pa.default_memory_pool().backend_name, "epochs": []}
    for _ in range(2):
        peak.clear()
        n = 0
        t0 = time.process_time()
        for b in loader:
            n += len(b["index"])
        time.sleep(0.05)
        ep = {
            "records": n,
            "cpu": round(time.process_time() - t0, 1),
            "peak": dict(peak),
            "end": status(),
            "arrow_alloc_MiB": pa.total_allocated_bytes() >> 20,
            "arrow_max_MiB": pa.default_memory_pool().max_memory() >> 20,
        }
        if spec.get("trace"):
            import tracemalloc

            cur, pk = tracemalloc.get_traced_memory()
            ep["py_cur_MiB"] = cur >> 20
            ep["py_peak_MiB"] = pk >> 20
            tracemalloc.reset_peak()
        res["epochs"].append(ep)
    stop = True
    return res


def main() -> None:
    import shutil
    import tempfile

    from helpers import s3server
    from helpers.rss import TreePeaks

    from bench import remote

    server_dir = Path(os.environ.get("RSS_DIR", "/tmp/rssgrow")) / "server"
    sizes = [int(x) for x in os.environ.get("SIZES", "128,256,512,1024").split(",")]
    variants = os.environ.get("VARIANTS", "default").split(";")
    srv = s3server.start_local(server_dir, port=9611)
    try:
        if not (server_dir / "buckets" / remote.BUCKET).is_dir():
            srv.client().create_bucket(Bucket=remote.BUCKET)
        env0 = dict(os.environ)
        env0.update(srv.reader_environment())
        env0.update(
            {
                "PYTHONPATH": str(ROOT),
                "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_DEFAULT_REGION": srv.region,
                "PYTHONWARNINGS": "ignore",
            }
        )
        for mb in sizes:
            tfr, _, n, size = remote.make_data(server_dir, "110k", mb, with_peer=False)
            data, index = remote.tfrecord_paths(tfr, "s3", srv.query, server_dir)
            for var in variants:
                env = dict(env0)
                for kv in var.split(","):
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        env[k] = v
                cache = Path(tempfile.mkdtemp(prefix="cache-", dir=str(server_dir.parent)))
                spec = {"data": data, "index": index, "cache_dir": str(cache), "trace": "TRACE" in var}
                proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                tree = TreePeaks()  # the whole process tree (DataLoader workers), both epochs
                reader = threading.Thread(target=lambda: box.append(proc.communicate()), daemon=True)
                box: list = []
                reader.start()
                while proc.poll() is None:
                    tree.sample(proc.pid)
                    time.sleep(0.02)
                reader.join()
                out = subprocess.CompletedProcess(proc.args, proc.returncode, *box[0])
                print(
                    f"{mb:5d}MB {var:40s} tree peak {tree.peak >> 20} MiB (both epochs), per process "
                    + " ".join(str(v >> 20) for v in tree.per_process.values()),
                    flush=True,
                )
                shutil.rmtree(cache, ignore_errors=True)
                if out.returncode:
                    print(mb, var, "FAILED", out.stderr[-2000:], flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                for i, ep in enumerate(r["epochs"]):
                    assert ep["records"] == n, (ep["records"], n)
                    pk = ep["peak"]
                    print(
                        f"{mb:5d}MB {var:40s} ep{i + 1} pool={r['pool']:8s} peak VmRSS {pk['VmRSS']:5d} anon {pk['RssAnon']:5d} file {pk['RssFile']:4d} shmem {pk['RssShmem']:3d} | end anon {ep['end']['RssAnon']:5d} | arrow now {ep['arrow_alloc_MiB']} max {ep['arrow_max_MiB']} | py {ep.get('py_cur_MiB', '-')}/{ep.get('py_peak_MiB', '-')} | cpu {ep['cpu']}",
                        flush=True,
                    )
    finally:
        srv.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        main()
