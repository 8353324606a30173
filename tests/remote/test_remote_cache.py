"""The local cache of remote ranges (issue 24, item 2): `cache_dir` / `cache_limit`.

Against the real S3 server: the second epoch makes no request; DataLoader workers and ranks
share one cache directory; the cache stays under its limit (least recently used first out);
a killed writer's entry is never read; a damaged entry is found, deleted and fetched again.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from helpers.remote_data import Remote, ids_of, write_local  # noqa: E402

from tfrecord_beam._rangecache import ENTRY_SUFFIX, RangeCache  # noqa: E402
from tfrecord_beam.torch import TFRecordDataset  # noqa: E402

KiB = 1 << 10
READAHEAD = 128 * KiB


@pytest.fixture
def shard(remote, tmp_path):
    """One indexed file on the server: (ids, size)."""
    local = tmp_path / "c.tfrecord"
    ids = write_local(local, 0, 1500, 1 * KiB)  # ~1.6 MiB: 13 blocks of 128 KiB
    remote.upload(local, "c.tfrecord")
    return ids, local.stat().st_size


def dataset(remote: Remote, cache: Path, via=None, **kwargs) -> TFRecordDataset:
    return TFRecordDataset(
        remote.uri("c.tfrecord", via),
        remote.uri("c.tfindex", via),
        batch_size=100,
        cache_dir=str(cache),
        readahead_bytes=READAHEAD,
        **kwargs,
    )


def entries(cache: Path) -> list:
    return sorted(p for p in (cache / "ranges").iterdir() if p.name.endswith(ENTRY_SUFFIX))


def whole(path: Path) -> bool:
    """Whether a cache entry file is complete and undamaged (its header's length and CRC)."""
    raw = path.read_bytes()
    return RangeCache._whole(raw[:24], raw[24:], len(raw) - 24)


def test_the_second_epoch_reads_the_cache_and_makes_no_request(remote, proxy, shard, tmp_path):
    ids, size = shard
    blocks = math.ceil(size / READAHEAD)
    ds = dataset(remote, tmp_path / "cache", proxy.host_port)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    first = ds.remote_stats()
    assert first["requests"] == first["cache_misses"] == blocks and first["cache_hits"] == 0
    wire = len(proxy.ranged_gets())
    ds.set_epoch(1)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    second = ds.remote_stats()
    assert second["requests"] == first["requests"]  # none more
    assert second["cache_hits"] == blocks
    assert len(proxy.ranged_gets()) == wire  # nothing on the wire either
    # a new dataset (a restarted job, another rank) finds the same cache
    again = dataset(remote, tmp_path / "cache", proxy.host_port, rank=1, world_size=2)
    assert ids_of(again.iter_worker(0, 1)) == ids[len(ids) // 2 :]
    assert again.remote_stats()["requests"] == 0


def test_dataloader_workers_and_ranks_share_one_cache_dir(remote, shard, tmp_path):
    ids, size = shard
    cache = tmp_path / "shared"
    got = []
    stats = []
    for rank in range(2):
        ds = dataset(remote, cache, rank=rank, world_size=2)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        got += ids_of(loader)
        stats.append(ds.remote_stats())
    assert sorted(got) == ids
    blocks = math.ceil(size / READAHEAD)
    # four shards over 13 blocks: a block at a shard boundary may be fetched twice at once
    assert blocks <= sum(s["requests"] for s in stats) <= blocks + 6
    assert entries(cache) and all(whole(path) for path in entries(cache))
    ds = dataset(remote, cache)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert sorted(ids_of(loader)) == ids
    assert ds.remote_stats()["requests"] == 0 and ds.remote_stats()["cache_hits"] >= blocks


def test_the_cache_stays_under_its_limit_least_recently_used_out(remote, shard, tmp_path):
    ids, size = shard
    cache = tmp_path / "small"
    limit = 4 * (READAHEAD + 24)  # four blocks and their headers
    ds = dataset(remote, cache, cache_limit=limit)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    held = entries(cache)
    assert len(held) == 4 and sum(p.stat().st_size for p in held) <= limit
    # the four kept are the last four read: a second epoch hits those and fetches the rest
    blocks = math.ceil(size / READAHEAD)
    ds.set_epoch(1)
    before = ds.remote_stats()
    assert ids_of(ds.iter_worker(0, 1)) == ids
    after = ds.remote_stats()
    assert after["cache_hits"] - before["cache_hits"] <= 4
    assert after["requests"] - before["requests"] >= blocks - 4
    assert RangeCache(str(cache), limit).size() <= limit


def test_concurrent_writers_keep_the_limit_and_whole_entries(tmp_path):
    cache = tmp_path / "busy"
    limit = 10 * (64 * KiB + 24)
    script = textwrap.dedent(
        f"""
        import os, sys
        from tfrecord_beam._rangecache import RangeCache
        cache = RangeCache({str(cache)!r}, {limit})
        me = int(sys.argv[1])
        for k in range(40):
            key = f"obj|{{k % 25}}"
            data = bytes([k % 25]) * (64 * 1024)
            if cache.get(key, len(data)) not in (None, data):
                sys.exit(f"wrong data under {{key}}")
            cache.put(key, data)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)], env=env) for n in range(4)]
    assert [p.wait(120) for p in procs] == [0, 0, 0, 0]
    reader = RangeCache(str(cache), limit)
    assert reader.size() <= limit
    for k in range(25):
        got = reader.get(f"obj|{k}", 64 * KiB)
        assert got is None or got == bytes([k]) * (64 * KiB)
    assert reader.corrupt == 0
    assert not [p for p in (cache / "ranges").iterdir() if ".tmp-" in p.name]


def test_a_killed_writer_leaves_nothing_that_reads_as_an_entry(tmp_path):
    cache = tmp_path / "killed"
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from tfrecord_beam import _rangecache
        real_write = None
        class Slow:
            def __init__(self, path, mode):
                self.f = open(path, mode)
            def __enter__(self):
                return self
            def __exit__(self, *a):
                self.f.close()
            def write(self, data):
                self.f.write(data[: len(data) // 2])
                self.f.flush()
                print("half", flush=True)
                time.sleep(60)  # killed here, half written
        _rangecache.open = Slow
        _rangecache.RangeCache({str(cache)!r}).put("obj|0", b"x" * 100000)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    writer = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "half"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    leftovers = [p for p in (cache / "ranges").iterdir() if ".tmp-" in p.name]
    assert leftovers  # the torn write is there, under its temporary name only
    reader = RangeCache(str(cache), 1 << 20)
    assert reader.get("obj|0", 100000) is None
    reader.put("obj|1", b"y" * 1000)  # the next eviction pass removes a dead writer's leftovers
    assert not [p for p in (cache / "ranges").iterdir() if ".tmp-" in p.name]
    assert reader.get("obj|1", 1000) == b"y" * 1000


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_entry_is_detected_and_fetched_again(remote, proxy, shard, tmp_path, damage):
    ids, _ = shard
    cache = tmp_path / "damaged"
    ds = dataset(remote, cache, proxy.host_port)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    victim = entries(cache)[3]
    data = bytearray(victim.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    else:
        del data[len(data) // 2 :]
    victim.write_bytes(bytes(data))
    before = ds.remote_stats()
    ds.set_epoch(1)
    assert ids_of(ds.iter_worker(0, 1)) == ids  # no CRC error: the block came from the server again
    after = ds.remote_stats()
    assert after["requests"] - before["requests"] == 1
    assert after["cache_misses"] - before["cache_misses"] == 1
    assert whole(victim)  # written again, whole
    ds.set_epoch(2)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    assert ds.remote_stats()["requests"] == after["requests"]


def test_cache_limit_needs_a_cache_dir_and_is_checked_at_construction(remote, shard):
    with pytest.raises(ValueError, match="cache_limit needs cache_dir"):
        TFRecordDataset(remote.uri("c.tfrecord"), remote.uri("c.tfindex"), cache_limit=1000)
    with pytest.raises(ValueError, match="readahead_bytes"):
        TFRecordDataset(remote.uri("c.tfrecord"), remote.uri("c.tfindex"), readahead_bytes=10)


def test_second_epoch_speed_is_local(remote, shard, tmp_path):
    """Reading from the cache costs no more than reading the same file from local disk, give
    or take (a loose bound: the machine is shared)."""
    ids, _ = shard
    ds = dataset(remote, tmp_path / "speed")
    assert ids_of(ds.iter_worker(0, 1)) == ids
    ds.set_epoch(1)
    started = time.perf_counter()
    assert ids_of(ds.iter_worker(0, 1)) == ids
    cached = time.perf_counter() - started
    local = tmp_path / "local.tfrecord"
    write_local(local, 0, 1500, 1 * KiB)
    plain = TFRecordDataset(str(local), str(local)[: -len(".tfrecord")] + ".tfindex", batch_size=100)
    started = time.perf_counter()
    assert ids_of(plain.iter_worker(0, 1)) == ids
    disk = time.perf_counter() - started
    assert cached < 3 * disk + 0.2
