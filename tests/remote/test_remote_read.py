"""Reading TFRecord files from an object store (issue 24, item 1): read-ahead planned from the
index, against a real S3-protocol server (versitygw on loopback, `s3_server`), with a proxy in
front of it that counts the requests on the wire (`helpers.faultproxy`).

Each record is read exactly once at 0 and 2 workers and 2 ranks; an indexed file of N bytes is
read in about N / readahead_bytes requests (never one per record); block-gzip files through
their member table; files without an index streamed; peak memory that does not grow with the
data (0 and 2 DataLoader workers).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from helpers.remote_data import Remote, ids_of, write_local  # noqa: E402

from tfrecord_beam.torch import TFRecordDataset  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


def upload(remote: Remote, tmp_path: Path, name: str, first: int, count: int, size: int, compression=None):
    local = tmp_path / name
    ids = write_local(local, first, count, size, compression)
    remote.upload(local, name)
    return ids, local.stat().st_size


def test_each_record_once_over_ranks_and_workers_in_few_requests(remote, proxy, tmp_path):
    ids = []
    sizes = 0
    for k in range(2):
        got, size = upload(remote, tmp_path, f"d-{k}.tfrecord", 1000 * k, 600, 2 * KiB)
        ids += got
        sizes += size
    data = remote.uri("d-*.tfrecord", via=proxy.host_port)
    index = remote.uri("d-*.tfindex", via=proxy.host_port)
    readahead = 128 * KiB
    seen = []
    requests = 0
    for world in (1, 2):
        for workers in (1, 2):
            for rank in range(world):
                ds = TFRecordDataset(data, index, batch_size=64, rank=rank, world_size=world, readahead_bytes=readahead)
                before = len(proxy.ranged_gets())
                for worker in range(workers):
                    seen.append(((world, workers), ids_of(ds.iter_worker(worker, workers))))
                assert ds.remote_stats()["requests"] == len(proxy.ranged_gets()) - before
                requests = ds.remote_stats()["requests"]
                shards = world * workers
                # the blocks of the file and at most two more per shard (boundaries shared)
                assert requests <= math.ceil(sizes / readahead) + 2 * shards + 2
    for grid in {g for g, _ in seen}:
        got = Counter(i for g, part in seen if g == grid for i in part)
        assert sorted(got) == ids and set(got.values()) == {1}, grid


def test_one_request_per_readahead_block_not_per_record(remote, proxy, tmp_path):
    ids, size = upload(remote, tmp_path, "big.tfrecord", 0, 4000, 1 * KiB)  # ~4 MiB, 4000 records
    readahead = 512 * KiB
    ds = TFRecordDataset(
        remote.uri("big.tfrecord", via=proxy.host_port),
        remote.uri("big.tfindex", via=proxy.host_port),
        batch_size=100,
        readahead_bytes=readahead,
        readahead_requests=2,
    )
    assert ids_of(ds.iter_worker(0, 1)) == ids
    stats = ds.remote_stats()
    assert stats["requests"] == math.ceil(size / readahead) == len(proxy.ranged_gets())
    assert stats["bytes"] == size
    # each request one block of the grid, each block once
    grid = [f"bytes={a}-{min(a + readahead, size) - 1}" for a in range(0, size, readahead)]
    assert sorted(proxy.ranged_gets()) == sorted(grid)


def test_a_dataloader_with_two_workers_reads_each_record_once(remote, tmp_path):
    ids, size = upload(remote, tmp_path, "w.tfrecord", 0, 3000, 1 * KiB)
    ds = TFRecordDataset(remote.uri("w.tfrecord"), remote.uri("w.tfindex"), batch_size=50, readahead_bytes=256 * KiB)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = ids_of(loader)
    assert sorted(got) == ids
    stats = ds.remote_stats()  # counted in the workers, read here
    assert 0 < stats["requests"] <= math.ceil(size / (256 * KiB)) + 2
    assert stats["bytes"] >= size


def test_block_gzip_is_read_by_member_ranges(remote, proxy, tmp_path):
    ids, size = upload(remote, tmp_path, "z.tfrecord.gz", 0, 3000, 1 * KiB, "gzip")
    data = remote.uri("z.tfrecord.gz", via=proxy.host_port)
    index = remote.uri("z.tfrecord.gz.tfindex", via=proxy.host_port)
    readahead = 64 * KiB
    ds = TFRecordDataset(data, index, batch_size=100, readahead_bytes=readahead)
    parts = [ids_of(ds.iter_worker(w, 2)) for w in range(2)]
    assert parts[0] and parts[1] and sorted(parts[0] + parts[1]) == ids
    # each worker reads its own members: together about the file once, not twice
    assert ds.remote_stats()["requests"] <= math.ceil(size / readahead) + 4


def test_files_without_an_index_are_streamed(remote, tmp_path):
    ids, _ = upload(remote, tmp_path, "n.tfrecord", 0, 2000, 1 * KiB)
    remote.client.delete_object(Bucket=remote.bucket, Key="n.tfindex")
    ds = TFRecordDataset(remote.uri("n.tfrecord"), None, batch_size=64, readahead_bytes=128 * KiB)
    parts = [ids_of(ds.iter_worker(w, 2)) for w in range(2)]
    assert parts[0] and parts[1] and sorted(parts[0] + parts[1]) == ids
    plain = TFRecordDataset(remote.uri("n.tfrecord"), None, {"id": "int"}, readahead_bytes=128 * KiB)
    assert [int(r["id"][0]) for r in plain] == ids  # per-record path too


def test_a_committed_output_prefix_reads_its_manifest_shards_with_their_indexes(remote, proxy, tmp_path):
    """Item 4: `TFRecordDataset("s3://bucket/out/train", None)` reads exactly the shards the
    output's manifest lists (a leftover shard beside them is not read), by their indexes."""
    from tfrecord_beam import digest
    from tfrecord_beam import manifest as mf

    entries, ids = [], []
    for k in range(3):
        name = f"train-{k:05d}-of-00003.tfrecord"
        local = tmp_path / name
        ids += write_local(local, 1000 * k, 400, 1 * KiB)
        remote.upload(local, f"out/{name}")
        records, payload_bytes, checksum = digest.file_digest(str(local))
        entries.append(
            mf.ShardEntry(
                name,
                records,
                local.stat().st_size,
                payload_bytes,
                digest.format_checksum(checksum),
                f"train-{k:05d}-of-00003.tfindex",
            )
        )
    stray = tmp_path / "train-00009-of-00010.tfrecord"  # from an older run: not in the manifest
    write_local(stray, 90000, 50, 100)
    remote.upload(stray, "out/train-00009-of-00010.tfrecord")
    manifest = mf.Manifest("test", "train", entries)
    mf.write_manifest(manifest, remote.uri("out/_MANIFEST.train.json"))
    ds = TFRecordDataset(remote.uri("out/train", via=proxy.host_port), None, batch_size=64, readahead_bytes=256 * KiB)
    files = ds.sources[0]
    assert [p.split("?")[0].rsplit("/", 1)[1] for p in files.paths] == [e.name for e in entries]
    assert all(info.num_records == 400 for info in files.infos())  # indexed: split by records
    parts = [ids_of(ds.iter_worker(w, 2)) for w in range(2)]
    assert sorted(parts[0] + parts[1]) == ids and abs(len(parts[0]) - len(parts[1])) <= 1
    assert not [r for r in proxy.ranged_gets("00009")]  # the stray shard never read
    assert ds.remote_stats()["requests"] <= sum(math.ceil(e.file_bytes / (256 * KiB)) for e in entries) + 4


def test_the_map_style_dataset_reads_remote_blocks_once_with_a_cache(remote, proxy, tmp_path):
    from tfrecord_beam.torch import IndexedTFRecordDataset

    ids, size = upload(remote, tmp_path, "m.tfrecord", 0, 1000, 1 * KiB)
    readahead = 64 * KiB
    ds = IndexedTFRecordDataset(
        remote.uri("m.tfrecord", via=proxy.host_port),
        remote.uri("m.tfindex", via=proxy.host_port),
        {"id": "int"},
        cache_dir=str(tmp_path / "cache"),
        readahead_bytes=readahead,
    )
    order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(3)).tolist()
    assert [int(ds[i]["id"][0]) for i in order] == [ids[i] for i in order]
    blocks = math.ceil(size / readahead)
    assert ds.remote_stats()["requests"] == blocks == len(proxy.ranged_gets())  # each block once
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, shuffle=True)
    assert sorted(int(r["id"][0]) for r in loader) == ids
    assert ds.remote_stats()["requests"] == blocks  # the workers read the cache only


@pytest.fixture(scope="module")
def memory_data(s3_server, tmp_path_factory):
    """Four objects of 48 MiB (768 records of 64 KiB, with their indexes) in a bucket of their
    own: one uploaded, three copied on the server (no client CPU for them)."""
    from helpers import s3server
    from helpers.remote_data import index_key

    client = s3_server.client()
    bucket = s3server.new_bucket(s3_server, client)
    local = tmp_path_factory.mktemp("memory") / "m-0.tfrecord"
    write_local(local, 0, 768, 64 * KiB)
    remote = Remote(s3_server, bucket, client)
    remote.upload(local, "m-0.tfrecord")
    for k in (1, 2, 3):
        for key in ("m-0.tfrecord", index_key("m-0.tfrecord")):
            target = key.replace("m-0", f"m-{k}")
            client.copy_object(Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": key})
    yield remote, local.stat().st_size
    s3server.remove_bucket(client, bucket)


# What the peak RSS of a read of 192 MiB may exceed that of a read of 48 MiB, per process: the
# read-ahead holds (readahead_requests + 2) blocks of 1 MiB per reader. A reader that kept its
# blocks would grow by 144 MiB at 0 workers and 72 MiB in each of 2 workers.
MEMORY_GROWTH_BOUND = 24 * MiB


@pytest.mark.parametrize("workers", [0, 2])
def test_peak_memory_does_not_grow_with_the_data(memory_data, monkeypatch, workers):
    """Peak RSS of the readers (this process at 0 workers; at 2, the largest DataLoader worker,
    not this process, which they were forked from, nor the server when this session started
    it) while reading 4 x 48 MiB against 48 MiB,
    with 1 MiB requests, 2 in flight: the same within MEMORY_GROWTH_BOUND, far below the
    144 MiB more data."""
    import os

    from helpers.rss import PeakRSS, process_tree, release_free_memory

    remote, size = memory_data
    with monkeypatch.context() as patch:
        for key, value in remote.server.reader_environment().items():
            patch.setenv(key, value)

        def reader_peak(pattern: str, files: int) -> int:
            ds = TFRecordDataset(
                remote.uri(f"{pattern}.tfrecord"),
                remote.uri(f"{pattern}.tfindex"),
                {"id": "int"},
                batch_size=16,
                readahead_bytes=1 * MiB,
                readahead_requests=2,
            )
            loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
            release_free_memory()
            before = process_tree(os.getpid()) - {os.getpid()}
            with PeakRSS(interval=0.05) as peaks:  # the blocks are held for a while: no spike is missed
                assert sum(len(batch["id"]) for batch in loader) == 768 * files
            assert ds.remote_stats()["bytes"] >= files * size  # all of it went through the read-ahead
            me = os.getpid()
            readers = {
                pid: peak
                for pid, peak in peaks.per_process.items()
                if (pid == me if workers == 0 else pid != me and pid not in before)
            }
            assert len(readers) == max(1, workers)
            return max(readers.values())

        if workers == 0:
            reader_peak("m-0", 1)  # warm up this process: allocator arenas, the S3 client
        small = reader_peak("m-0", 1)
        large = reader_peak("m-*", 4)
    assert large - small < MEMORY_GROWTH_BOUND, f"{(large - small) / MiB:.1f} MiB more for 4x the data"


@pytest.mark.parametrize("shuffle", [{}, {"shuffle_queue_size": 300}], ids=["in-order", "window-shuffled"])
def test_the_elastic_order_fetches_each_block_about_once_per_process(remote, proxy, tmp_path, shuffle):
    """Without a cache, a process of an elastic order reads each block of what it reads about
    once: the ranges of one chunk share one read-ahead (a block several ranges fall in is
    fetched once), not a request per range."""
    ids = []
    for k in range(2):
        got, size = upload(remote, tmp_path, f"e-{k}.tfrecord", 1000 * k, 700, 3 * KiB)
        ids += got
    readahead = 64 * KiB
    blocks = 2 * math.ceil(size / readahead)
    ds = TFRecordDataset(
        remote.uri("e-*.tfrecord", via=proxy.host_port),
        remote.uri("e-*.tfindex", via=proxy.host_port),
        ["id"],
        elastic=True,
        seed=5,
        batch_size=32,
        readahead_bytes=readahead,
        **shuffle,
    )
    before = len(proxy.ranged_gets())
    got = ids_of(ds.iter_worker(0, 1))
    assert sorted(got) == ids
    requests = len(proxy.ranged_gets()) - before
    assert requests <= blocks * 1.3, (requests, blocks)


def test_range_reads_use_the_cached_client_made_once_with_one_attempt_per_request(remote):
    """fs makes and caches the object-store clients (one place): the range reader's client is
    the cached one's one-attempt twin, made once per client, not per path (that each counted
    request is one on the wire: test_remote_errors, `rule.hits == attempts`)."""
    from pyarrow import fs as pafs

    from tfrecord_beam import fs

    cached, _ = fs._from_uri(remote.uri("a.tfrecord"))
    twin, inner = fs.ranged_filesystem(remote.uri("a.tfrecord"))
    assert isinstance(twin, pafs.S3FileSystem) and twin is not cached
    assert inner == f"{remote.bucket}/a.tfrecord"
    assert fs.ranged_filesystem(remote.uri("b.tfrecord"))[0] is twin  # the same bucket and query
    assert fs._from_uri(remote.uri("b.tfrecord"))[0] is cached
    assert fs.ranged_filesystem("/local/x.tfrecord") == (None, "/local/x.tfrecord")


def test_a_small_read_of_a_large_object_sends_only_ranged_gets(remote, proxy, tmp_path):
    """The bytes the server sends for a small read do not grow with the object (a pyarrow GCS
    file starts an unread whole-object download at its first use; S3 files do not: a HEAD,
    then only ranged GETs): the first record by the core's reader and by the read-ahead, and
    `count` from the index, of an 8 MiB object."""
    from tfrecord_beam import cli, fs
    from tfrecord_beam._ranges import RangeSource, RemoteOptions, RemoteStats
    from tfrecord_beam.records import RecordReader

    upload(remote, tmp_path, "big.tfrecord", 0, 128, 64 * KiB)  # 8 MiB
    uri = remote.uri("big.tfrecord", proxy.host_port)
    assert next(iter(RecordReader(uri)))
    source = RangeSource(uri, fs.file_size(uri), None, RemoteOptions(readahead_bytes=64 * KiB), RemoteStats())
    assert len(source.fetch(0, 4096)) == 4096
    assert cli.main(["count", uri]) == 0
    gets = [r for m, p, r in proxy.requests if m == "GET" and "big.tfrecord" in p.split("?")[0]]
    assert None not in gets and gets == ["bytes=0-1048575", "bytes=0-4095"]  # the reader's first MiB
    served = sum(n for m, p, n in proxy.served if "big.tfrecord" in p.split("?")[0])
    assert served == 1 * MiB + 4096
