"""Issue 24 review: attacks on elastic order x remote read-ahead/cache together, and on the
edges either branch alone does not test (states of another dataset, more processes than
records, a read-only cache, an object replaced after listing)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from helpers.remote_data import write_local  # noqa: E402
from helpers.torch_data import write_files  # noqa: E402
from test_torch_elastic import lockstep  # noqa: E402

from tfrecord_beam.errors import RemoteReadError  # noqa: E402
from tfrecord_beam.torch import TFRecordDataset  # noqa: E402

KiB = 1 << 10
READAHEAD = 64 * KiB


def ids_of(items) -> list:
    return [int(i) for item in items for i in item["id"].reshape(-1).tolist()]


def test_elastic_on_s3_reads_through_the_readahead_and_the_cache(remote, proxy, tmp_path):
    ids = []
    for k in range(2):
        local = tmp_path / f"s{k}.tfrecord"
        ids += write_local(local, 1000 * k, 300, 1 * KiB)
        remote.upload(local, f"s{k}.tfrecord")
    cache = tmp_path / "cache"

    def make(**where):
        return TFRecordDataset(
            remote.uri("s*.tfrecord", proxy.host_port),
            remote.uri("s*.tfindex", proxy.host_port),
            ["id"],
            elastic=True,
            seed=3,
            batch_size=16,
            shuffle_queue_size=64,
            shuffle_block=8,
            cache_dir=str(cache),
            readahead_bytes=READAHEAD,
            **where,
        )

    reference, _ = lockstep(make, 1, 1)
    assert sorted(reference) == ids
    cold = len(proxy.ranged_gets())
    assert 0 < cold <= 2 * (300 * 1100 // READAHEAD + 2)  # blocks, not records
    got, _ = lockstep(make, 2, 2)
    assert got == reference
    assert len(proxy.ranged_gets()) == cold  # every block from the cache
    head, state = lockstep(make, 2, 2, steps=3)
    rest, _ = lockstep(make, 3, 1, state=state)
    assert head + rest == reference


@pytest.fixture
def small(tmp_path):
    return write_files(tmp_path / "small", [("a.tfrecord", 5, True), ("b.tfrecord", 2, True)])


def test_more_processes_than_records(small):
    paths, indexes, ids = small

    def make(**where):
        return TFRecordDataset(paths, indexes, ["id"], elastic=True, seed=1, shuffle_queue_size=4, **where)

    reference, _ = lockstep(make, 1, 1)
    assert sorted(reference) == sorted(ids)
    assert lockstep(make, 8, 3)[0] == reference
    head, state = lockstep(make, 8, 3, steps=0)
    assert head + lockstep(make, 5, 2, state=state)[0] == reference
    _, state = lockstep(make, 4, 3, steps=1)  # one step: 4 records, 3 left
    assert lockstep(make, 8, 2, state=state)[0] == reference[4:]


def test_drop_last_resume_at_the_end_and_mid_epoch(small):
    paths, indexes, ids = small

    def make(**where):
        return TFRecordDataset(paths, indexes, ["id"], elastic=True, seed=1, batch_size=2, drop_last=True, **where)

    reference, _ = lockstep(make, 1, 1)
    assert len(reference) == 6  # 7 records, batches of 2, the last short one dropped
    for ranks, workers in [(2, 1), (1, 2), (3, 2)]:
        got, _ = lockstep(make, ranks, workers)
        assert Counter(got) <= Counter(reference)
    head, state = lockstep(make, 1, 2, steps=2)
    assert head + lockstep(make, 2, 1, state=state)[0] == reference
    _, end = lockstep(make, 1, 2)  # the whole epoch
    assert lockstep(make, 3, 2, state=end)[0] == []


def test_a_state_of_another_dataset_is_refused(tmp_path, small):
    paths, indexes, _ = small
    other = write_files(tmp_path / "other", [("c.tfrecord", 40, True)])

    def make(paths, indexes, **kw):
        return lambda **where: TFRecordDataset(paths, indexes, ["id"], elastic=True, seed=1, **kw, **where)

    _, state = lockstep(make(*other[:2]), 2, 1, steps=2)  # position 4 of 40 records
    with pytest.raises(ValueError, match=r"files=\['1 files, .* when saved, files=\['2 files"):
        make(paths, indexes)().load_state_dict(state)
    _, state = lockstep(make(paths, indexes, shuffle_queue_size=4), 1, 2, steps=2)
    with pytest.raises(ValueError, match="shuffle_queue_size=4 when saved, shuffle_queue_size=3 now"):
        make(paths, indexes, shuffle_queue_size=3)().load_state_dict(state)


def test_an_unwritable_cache_dir_fails_clearly_or_reads_without_caching(remote, tmp_path):
    local = tmp_path / "r.tfrecord"
    ids = write_local(local, 0, 200, 1 * KiB)
    remote.upload(local, "r.tfrecord")
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    try:
        ds = TFRecordDataset(
            remote.uri("r.tfrecord"),
            remote.uri("r.tfindex"),
            batch_size=50,
            cache_dir=str(locked / "c"),
            readahead_bytes=READAHEAD,
        )
        try:
            got = ids_of(ds)
        except OSError as exc:
            assert str(locked) in str(exc)
        else:
            assert got == ids
    finally:
        os.chmod(locked, 0o755)


def test_an_object_replaced_after_listing_is_not_read_as_the_listed_one(remote, tmp_path):
    local = tmp_path / "x.tfrecord"
    write_local(local, 200, 200, 1 * KiB)  # ids 200..399: two-byte varints, as 1000..1299
    remote.upload(local, "x.tfrecord")
    ds = TFRecordDataset(remote.uri("x.tfrecord"), remote.uri("x.tfindex"), batch_size=50, readahead_bytes=READAHEAD)
    bigger = tmp_path / "y.tfrecord"
    write_local(bigger, 1000, 300, 1 * KiB)  # same record layout, other ids, more of them
    remote.client.upload_file(str(bigger), remote.bucket, "x.tfrecord")  # type: ignore[attr-defined]
    # refused before any of its records is handed out: by the first read's open, which checks
    # the object is the size and ETag listed (the first pass right after listing takes the
    # listing as its identity check); a later pass's check (issue 34) finds it before any block
    with pytest.raises(
        (OSError, RemoteReadError),
        match=r"x\.tfrecord (was replaced after this dataset listed it \(then: \d+ bytes|is \d+ bytes.* now but was \d+)",
    ):
        got = ids_of(ds)
        raise AssertionError(f"read {len(got)} records of the replaced object, first {got[:3]}")


@pytest.mark.parametrize("elastic", [False, True])
def test_a_range_is_read_without_fetching_a_whole_chunk_past_its_end(remote, proxy, tmp_path, elastic):
    """The record reader reads 1 MiB chunks; past a planned range's end each of those bytes was
    a block fetched on its own (elastic reads many small ranges: 3.6x the file before)."""
    local = tmp_path / "p.tfrecord"
    ids = write_local(local, 0, 2000, 1 * KiB)
    remote.upload(local, "p.tfrecord")
    ds = TFRecordDataset(
        remote.uri("p.tfrecord", proxy.host_port),
        remote.uri("p.tfindex", proxy.host_port),
        ["id"],
        elastic=elastic,
        batch_size=16,
        readahead_bytes=READAHEAD,
    )
    assert sorted(ids_of(ds)) == ids
    blocks = -(-local.stat().st_size // READAHEAD)
    # the blocks once, the first few again for the description check, one per elastic read range
    assert ds.remote_stats()["requests"] == len(proxy.ranged_gets()) <= blocks + 5 + (8 if elastic else 0)


def test_a_cache_limit_below_one_block_keeps_nothing_and_reads_go_on(tmp_path):
    from tfrecord_beam._rangecache import RangeCache

    cache = RangeCache(str(tmp_path), limit=100)
    cache.put("k", b"x" * 1000)
    assert cache.get("k", 1000) is None and cache.size() == 0
    assert [p.name for p in (tmp_path / "ranges").iterdir() if not p.name.startswith(".lock")] == []
    roomy = RangeCache(str(tmp_path), limit=3000)
    for k in range(5):
        roomy.put(f"k{k}", bytes([k]) * 1000)
        assert roomy.size() <= 3000
    assert roomy.get("k4", 1000) == bytes([4]) * 1000
