"""One identity of a remote object (issue 34, items 2 and 9): size, modification time and ETag,
taken when a dataset lists its files, checked again in every later pass and at every open,
and part of every cache key, so an object replaced between two epochs is never read from its
predecessor's cached blocks or against its old index: the read fails naming the object. A
cache entry whose path holds something other than a regular file is fetched again."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from helpers.remote_data import ids_of, write_local  # noqa: E402

from tfrecord_beam import fs  # noqa: E402
from tfrecord_beam._rangecache import ENTRY_SUFFIX, RangeCache  # noqa: E402
from tfrecord_beam.torch import TFRecordDataset  # noqa: E402

KiB = 1 << 10
READAHEAD = 64 * KiB


def _upload(remote, tmp_path, first: int, name: str = "v.tfrecord"):
    local = tmp_path / f"{first}" / name
    local.parent.mkdir()
    ids = write_local(local, first, 400, 512)  # ids of one varint length: the same size either way
    remote.upload(local, name)
    return ids, local.stat().st_size


def _dataset(remote, **kwargs) -> TFRecordDataset:
    return TFRecordDataset(
        remote.uri("v.tfrecord"), remote.uri("v.tfindex"), batch_size=50, readahead_bytes=READAHEAD, **kwargs
    )


@pytest.mark.parametrize("cached", [True, False])
def test_an_object_replaced_between_epochs_is_refused_naming_it(remote, tmp_path, cached):
    old, size = _upload(remote, tmp_path, 2000)
    ds = _dataset(remote, **({"cache_dir": str(tmp_path / "cache")} if cached else {}))
    ds.set_epoch(0)
    assert ids_of(ds.iter_worker(0, 1)) == old
    new, new_size = _upload(remote, tmp_path, 9000)  # same size, same index, other records
    assert new_size == size
    ds.set_epoch(1)
    with pytest.raises(OSError, match=r"v\.tfrecord was replaced after this dataset listed it.*ETag") as caught:
        ids_of(ds.iter_worker(0, 1))
    assert "make a new dataset" in str(caught.value)
    fresh = _dataset(remote, **({"cache_dir": str(tmp_path / "cache")} if cached else {}))
    assert ids_of(fresh.iter_worker(0, 1)) == new  # a new dataset reads the new object, not the old blocks


def test_the_identity_holds_the_etag_and_keys_the_cache(remote, tmp_path):
    _upload(remote, tmp_path, 2000)
    first = fs.file_stat(remote.uri("v.tfrecord"))
    _upload(remote, tmp_path, 9000)
    second = fs.file_stat(remote.uri("v.tfrecord"))
    assert first.size == second.size and first.tag and second.tag and first.tag != second.tag
    assert first.version_key != second.version_key


def test_a_file_opened_of_a_replaced_object_fails_naming_it(remote, tmp_path):
    """A reader opening the object mid-read (a new block, a retry) checks it is still the one listed."""
    from tfrecord_beam._ranges import RangeSource, RemoteOptions, RemoteStats
    from tfrecord_beam.errors import RemoteReadError

    _, size = _upload(remote, tmp_path, 2000)
    uri = remote.uri("v.tfrecord")
    listed = fs.file_stat(uri)
    source = RangeSource(
        uri, size, listed.version_key, RemoteOptions(readahead_bytes=READAHEAD), RemoteStats(), tag=listed.tag
    )
    assert len(source.read_block(0)) == READAHEAD
    _upload(remote, tmp_path, 9000)
    fresh = RangeSource(
        uri, size, listed.version_key, RemoteOptions(readahead_bytes=READAHEAD), RemoteStats(), tag=listed.tag
    )
    with pytest.raises(RemoteReadError, match=r"v\.tfrecord.*bytes 65536-131071.*replaced while it was being read"):
        fresh.read_block(1)


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink", "empty"])
def test_a_cache_entry_that_is_not_a_regular_file_is_fetched_again(remote, tmp_path, kind):
    ids, _ = _upload(remote, tmp_path, 2000)
    cache = tmp_path / "cache"
    ds = _dataset(remote, cache_dir=str(cache))
    assert ids_of(ds.iter_worker(0, 1)) == ids
    entries = sorted(p for p in (cache / "ranges").iterdir() if p.name.endswith(ENTRY_SUFFIX))
    victim = entries[2]
    victim.unlink()
    if kind == "directory":
        victim.mkdir()
        (victim / "inside").write_bytes(b"x")
    elif kind == "fifo":
        os.mkfifo(victim)  # opened blocking, a FIFO without a writer would hang the read
    elif kind == "symlink":
        victim.symlink_to(entries[3])  # another block's entry, whole and valid
    else:
        victim.write_bytes(b"")
    before = ds.remote_stats()
    ds.set_epoch(1)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    after = ds.remote_stats()
    assert after["requests"] - before["requests"] == 1 and after["cache_misses"] - before["cache_misses"] == 1
    assert victim.is_file() and not victim.is_symlink()  # written again, a regular file
    raw = victim.read_bytes()
    assert RangeCache._whole(raw[:24], raw[24:], len(raw) - 24)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_elastic_order_refuses_an_object_replaced_between_epochs(remote, tmp_path, workers):
    """The elastic order reads through the same per-pass identity check as the per-shard path
    (`FileSet.new_pass`): with `cache_dir`, epoch 1 never returns the old object's cached
    records; it fails naming the object (0 and 2 DataLoader workers)."""
    old, size = _upload(remote, tmp_path, 2000)
    ds = _dataset(remote, elastic=True, cache_dir=str(tmp_path / "cache"))

    def epoch_ids():
        if workers == 0:
            return ids_of(ds.iter_worker(0, 1))
        from helpers.remote_data import iterating

        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
        with iterating(loader) as batches:
            return ids_of(batches)

    ds.set_epoch(0)
    assert sorted(epoch_ids()) == old
    new, new_size = _upload(remote, tmp_path, 9000)  # same size, same index, other records
    assert new_size == size
    ds.set_epoch(1)
    with pytest.raises(OSError, match=r"v\.tfrecord was replaced after this dataset listed it.*ETag"):
        epoch_ids()
    fresh = _dataset(remote, elastic=True, cache_dir=str(tmp_path / "cache"))
    assert sorted(ids_of(fresh.iter_worker(0, 1))) == new


def _heads(proxy, since: int = 0) -> int:
    """HEAD requests of data objects (the identity checks and the opens) the proxy saw."""
    return sum(1 for m, p, _ in proxy.requests[since:] if m == "HEAD" and ".tfrecord" in p.split("?")[0])


@pytest.mark.parametrize("elastic", [False, True])
def test_the_first_pass_in_the_listing_process_makes_no_second_identity_check(
    remote, proxy, tmp_path, monkeypatch, elastic
):
    """The identity a dataset took at listing stands in for its first pass's check in the same
    process (one HEAD per file saved); every later pass checks each file it reads again."""
    from tfrecord_beam.torch import _files

    for k, name in enumerate(["a.tfrecord", "b.tfrecord"]):
        _upload(remote, tmp_path, 2000 + 1000 * k, name)

    def dataset(cache: str) -> TFRecordDataset:
        return TFRecordDataset(
            remote.uri("*.tfrecord", proxy.host_port),
            remote.uri("*.tfindex", proxy.host_port),
            batch_size=50,
            readahead_bytes=READAHEAD,
            readahead_requests=1,  # one request in flight: one open (HEAD) per file, whatever the timing
            cache_dir=str(tmp_path / cache),
            elastic=elastic,
        )

    def first_epoch_heads(cache: str) -> int:
        before = len(proxy.requests)
        ds = dataset(cache)
        ds.set_epoch(0)
        assert len(ids_of(ds.iter_worker(0, 1))) == 800
        return _heads(proxy, before)

    saved = first_epoch_heads("c1")
    monkeypatch.setattr(_files, "FRESH_IDENTITY_S", 0.0)  # the listing is never fresh: the check is made
    checked = first_epoch_heads("c2")
    assert checked - saved == 2, (checked, saved)  # one HEAD per file
    monkeypatch.undo()

    ds = dataset("c1")  # its blocks are all cached: a later pass asks the store only for the identities
    ds.set_epoch(0)
    assert len(ids_of(ds.iter_worker(0, 1))) == 800
    ds.set_epoch(1)
    before = len(proxy.requests)
    assert len(ids_of(ds.iter_worker(0, 1))) == 800
    assert _heads(proxy, before) == 2  # the per-pass check, one per file
    assert not [r for m, p, r in proxy.requests[before:] if m == "GET" and ".tfrecord" in p.split("?")[0]]


def test_a_worker_checks_the_identity_on_its_first_pass(remote, tmp_path):
    """A DataLoader worker did not list the files itself: it checks each one it reads even on
    its first pass, so an object replaced after the main process listed it is refused."""
    from helpers.remote_data import iterating

    _upload(remote, tmp_path, 2000)
    ds = _dataset(remote, cache_dir=str(tmp_path / "cache"))
    assert len(ds.sources[0].infos()) == 1  # the main process lists (and takes the identity)
    _upload(remote, tmp_path, 9000)  # same size, other records
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
    with pytest.raises(OSError, match=r"v\.tfrecord was replaced after this dataset listed it"):
        with iterating(loader) as batches:
            ids_of(batches)
