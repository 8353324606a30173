"""gs:// end to end against a real GCS-protocol server on loopback (fake-gcs-server, built
through the Go module proxy: `gcs_server`), nothing mocked: the core's reader, writer and index
through pyarrow's GcsFileSystem, the torch datasets with read-ahead and cache, a Beam job from
gs:// to gs:// through Beam's GCS filesystem (gcsio, google-cloud-storage), its commit lock and
its manifest. Both layers find the server the way a user points them at any GCS endpoint:
STORAGE_EMULATOR_HOST, or the URI's query string (helpers/gcsserver.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers.jobs import FAST, payloads, run_job, summary_json
from helpers.remote_data import ids_of, write_local

KiB = 1 << 10


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_records_and_index_written_and_read_on_gs(gcs, compression, capsys):
    from tfrecord_beam import cli, fs
    from tfrecord_beam.index import default_index_path, load_index, verify_index
    from tfrecord_beam.records import RecordReader, RecordWriter

    suffix = ".tfrecord.gz" if compression else ".tfrecord"
    data = payloads(60)
    uris = [gcs.uri(f"core/d-{k}{suffix}") for k in range(2)]
    for k, uri in enumerate(uris):
        with RecordWriter(uri, compression, index_path=True) as writer:
            writer.write_many(data[k * 30 : (k + 1) * 30])
    index_names = [default_index_path(f"core/d-{k}{suffix}") for k in range(2)]
    assert gcs.keys("core/") == sorted([f"d-{k}{suffix}" for k in range(2)] + [n[len("core/") :] for n in index_names])
    found = fs.expand(gcs.uri(f"core/d-*{suffix}"))
    assert found == uris
    assert [p for uri in found for p in RecordReader(uri)] == data
    for uri in found:
        assert len(load_index(default_index_path(uri))) == 30
        verify_index(default_index_path(uri), uri)
    if compression:  # gzip written by our writer is block-gzip: the index holds its member table
        raw = gcs.server.get(gcs.bucket, "core/d-0.tfrecord.gz")
        assert raw[:2] == b"\x1f\x8b"
    assert cli.main(["count", gcs.uri("core/")]) == 0
    assert "60  total" in capsys.readouterr().out


def test_the_query_string_reaches_the_server_without_the_environment(gcs, monkeypatch):
    """`?endpoint_override=HOST:PORT&scheme=http&anonymous=true` alone (no STORAGE_EMULATOR_HOST):
    the names derived from the URI (glob matches, index) keep it."""
    from tfrecord_beam import fs
    from tfrecord_beam.index import default_index_path
    from tfrecord_beam.records import read_records, write_records

    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    query = gcs.server.query
    uri = gcs.uri("q/a.tfrecord") + query
    write_records(uri, payloads(5), index_path=True)
    assert default_index_path(uri) == gcs.uri("q/a.tfindex") + query
    assert fs.expand(gcs.uri("q/*.tfrecord") + query) == [uri]
    assert list(read_records(uri)) == payloads(5)
    with pytest.raises(ValueError, match=r"unknown query parameter 'schema'.*known: endpoint_override"):
        fs.file_size(gcs.uri("q/a.tfrecord") + query.replace("scheme", "schema"))


def test_seeking_to_the_end_of_a_gcs_object_costs_no_request(gcs):
    """GCS answers a range that starts at an object's end with 416, and pyarrow's GCS file asks
    for one at every seek (apache/arrow#38854): the readers' `seek(0, SEEK_END)` failed on every
    gs:// object. open_input's file keeps such a position without asking."""
    import io

    from tfrecord_beam import fs

    gcs.server.put(gcs.bucket, "s/blob.bin", bytes(range(200)))
    with fs.open_input(gcs.uri("s/blob.bin")) as handle:
        assert handle.seek(0, io.SEEK_END) == 200 and handle.read(10) == b"" and handle.tell() == 200
        assert handle.seek(-3, io.SEEK_END) == 197 and handle.read(10) == bytes([197, 198, 199])
        assert handle.read_at(10, 200) == b"" and handle.read_at(10, 195) == bytes(range(195, 200))
        handle.seek(5)
        assert handle.read(3) == bytes([5, 6, 7]) and handle.tell() == 8


def test_an_index_made_on_gs_is_used_by_the_torch_dataset(gcs, gcs_proxy, tmp_path):
    """tfrecord2idx writes the .tfindex beside a gs:// file; TFRecordDataset reads by it in one
    request per read-ahead block (counted by remote_stats and on the wire), never per record."""
    pytest.importorskip("torch")
    from tfrecord_beam.index import load_index
    from tfrecord_beam.tools import tfrecord2idx
    from tfrecord_beam.torch import TFRecordDataset

    local = tmp_path / "big.tfrecord"
    ids = write_local(local, 0, 3000, 1 * KiB)
    Path(str(local).replace(".tfrecord", ".tfindex")).unlink()  # made on gs:// below
    gcs.upload(local, "t/big.tfrecord")
    assert tfrecord2idx.main([gcs.uri("t/big.tfrecord")]) == 0
    assert gcs.keys("t/") == ["big.tfindex", "big.tfrecord"]
    assert len(load_index(gcs.uri("t/big.tfindex"))) == 3000

    size = local.stat().st_size
    readahead = 256 * KiB
    ds = TFRecordDataset(
        gcs.uri("t/big.tfrecord", via=gcs_proxy.host_port),
        gcs.uri("t/big.tfindex", via=gcs_proxy.host_port),
        batch_size=100,
        readahead_bytes=readahead,
        readahead_requests=2,
    )
    assert ids_of(ds.iter_worker(0, 1)) == ids
    stats = ds.remote_stats()
    assert stats["requests"] == math.ceil(size / readahead) == len(gcs_proxy.ranged_gets())
    assert stats["bytes"] == size
    grid = [f"bytes={a}-{min(a + readahead, size) - 1}" for a in range(0, size, readahead)]
    assert sorted(gcs_proxy.ranged_gets()) == sorted(grid)  # one fixed grid, each block once
    parts = [ids_of(ds.iter_worker(w, 2)) for w in range(2)]
    assert parts[0] and parts[1] and sorted(parts[0] + parts[1]) == ids


def test_the_second_epoch_reads_the_cache_and_sends_nothing(gcs, gcs_proxy, tmp_path):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    local = tmp_path / "c.tfrecord"
    ids = write_local(local, 0, 1500, 1 * KiB)
    gcs.upload(local, "c/c.tfrecord")
    readahead = 128 * KiB
    blocks = math.ceil(local.stat().st_size / readahead)
    ds = TFRecordDataset(
        gcs.uri("c/c.tfrecord", via=gcs_proxy.host_port),
        gcs.uri("c/c.tfindex", via=gcs_proxy.host_port),
        batch_size=100,
        cache_dir=str(tmp_path / "cache"),
        readahead_bytes=readahead,
    )
    assert ids_of(ds.iter_worker(0, 1)) == ids
    first = ds.remote_stats()
    assert first["requests"] == first["cache_misses"] == blocks == len(gcs_proxy.ranged_gets())
    ds.set_epoch(1)
    assert ids_of(ds.iter_worker(0, 1)) == ids
    second = ds.remote_stats()
    assert second["requests"] == first["requests"] and second["cache_hits"] == blocks
    assert len(gcs_proxy.ranged_gets()) == blocks  # no range read on the wire either


def test_reshard_from_gs_to_gs_and_its_output_read_by_its_manifest(gcs, capsys):
    """A job on the FnApiRunner, gs:// in and out through Beam's GCS filesystem: the manifest,
    the counts and the checksums of the shards, no staging or lock left; then the committed
    output prefix is read by the torch dataset through its manifest (a stray shard beside it is
    not read)."""
    from pipelines import reshard
    from tfrecord_beam import manifest as mf
    from tfrecord_beam.records import read_records, write_records

    data = payloads(500)
    for k in range(3):
        write_records(gcs.uri(f"in/x-{k}.tfrecord"), data[k * 200 : (k + 1) * 200])
    code, out, err = run_job(
        reshard.main,
        ["--input", gcs.uri("in/x-*.tfrecord"), "--output_prefix", gcs.uri("out/train"), "--num_shards", "3"] + FAST,
        capsys,
    )
    assert code == 0, err
    assert summary_json(out)["records"] == 500
    shards = [f"train-0000{k}-of-00003" for k in range(3)]
    assert gcs.keys("out/") == ["_MANIFEST.train.json"] + sorted(
        f"{s}{ext}" for s in shards for ext in (".tfindex", ".tfrecord")
    )  # no staging, temporaries or lock left
    manifest_uri = gcs.uri("out/_MANIFEST.train.json")
    manifest = mf.read_manifest(manifest_uri)
    assert manifest.records == 500 and [e.name for e in manifest.shards] == [f"{s}.tfrecord" for s in shards]
    for entry, path in zip(manifest.shards, mf.shard_paths(manifest, manifest_uri)):
        assert mf.check_shard(entry, path, full=True) == []  # size, count and checksum of each
    assert sorted(r for p in mf.shard_paths(manifest, manifest_uri) for r in read_records(p)) == sorted(data)

    pytest.importorskip("torch")
    from tfrecord_beam.example import decode_example
    from tfrecord_beam.torch import TFRecordDataset

    write_records(gcs.uri("out/train-00009-of-00010.tfrecord"), payloads(7, tag=9))  # not in the manifest
    ds = TFRecordDataset(gcs.uri("out/train"), None, {"i": "int"}, batch_size=50, readahead_bytes=64 * KiB)
    assert [p.rsplit("/", 1)[1] for p in ds.sources[0].paths] == [e.name for e in manifest.shards]
    got = sorted(int(i) for w in range(2) for b in ds.iter_worker(w, 2) for i in b["i"][:, 0])
    assert got == sorted(int(decode_example(p)["i"][0]) for p in data)
    assert ds.remote_stats()["requests"] > 0


def test_the_commit_lock_on_gs_has_one_winner(gcs):
    """create-if-absent on gs:// is an upload with ifGenerationMatch=0: the second create of one
    name loses, and the first one's content stays."""
    from tfrecord_beam.beam import _lock

    path = gcs.uri("lock/claim.json")
    assert _lock.create_exclusive(path, b"first") is True
    assert _lock.create_exclusive(path, b"second") is False
    assert gcs.server.get(gcs.bucket, "lock/claim.json") == b"first"


def test_a_missing_object_is_an_error_naming_it(gcs, capsys):
    from pipelines import reshard
    from tfrecord_beam.records import read_records

    missing = gcs.uri("nowhere/gone.tfrecord")
    with pytest.raises(FileNotFoundError, match="gone.tfrecord"):
        list(read_records(missing))
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    with pytest.raises(FileNotFoundError, match=r"gs://t-\w+/nowhere/gone\.tfrecord"):
        TFRecordDataset(missing, None, batch_size=10)
    code, _, err = run_job(
        reshard.main, ["--input", missing, "--output_prefix", gcs.uri("o/x"), "--num_shards", "1"] + FAST, capsys
    )
    assert code == 1 and missing in err, err
    assert gcs.keys("o/") == []


def media_gets(proxy, name: str):
    """The Range header (None: the whole object) of each download of an object named `name`."""
    return [r for m, p, r in proxy.requests if m == "GET" and "alt=media" in p and name in p.split("?")[0]]


def test_a_sequential_read_of_a_gs_object_downloads_it_once(gcs, gcs_proxy, tmp_path):
    """pyarrow's GCS file starts a download of the whole object at its first use (the size the
    reader asks for), and a seek starts another: the reader's seek to 0 after learning the size
    made two downloads, the first cut unread at the client's buffers. Now one, read through."""
    from tfrecord_beam.records import RecordReader

    local = tmp_path / "s.tfrecord"
    write_local(local, 0, 50, 1 * KiB)
    gcs.upload(local, "s/s.tfrecord")
    assert len(list(RecordReader(gcs.uri("s/s.tfrecord", via=gcs_proxy.host_port)))) == 50
    assert media_gets(gcs_proxy, "s.tfrecord") == [None]


def socket_count() -> int:
    import os

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile (the listing's own fd among them)
            pass
    return count


def test_range_reads_share_one_gcs_file_per_object(gcs, gcs_proxy, tmp_path):
    """Each pyarrow GCS file downloads its whole object from its first use on (nothing reads
    that download; the client takes in what its buffers hold and keeps the connection until
    the file closes). The read-ahead opened one file per concurrent request: 3 such downloads
    of the object with 3 requests in flight. Now one file per object per process, shared."""
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    local = tmp_path / "r.tfrecord"
    ids = write_local(local, 0, 600, 1 * KiB)  # ~10 blocks of 64 KiB
    gcs.upload(local, "r/r.tfrecord")
    ds = TFRecordDataset(
        gcs.uri("r/r.tfrecord", via=gcs_proxy.host_port),
        gcs.uri("r/r.tfindex", via=gcs_proxy.host_port),
        batch_size=50,
        readahead_bytes=64 * KiB,
        readahead_requests=3,
    )
    assert ids_of(ds.iter_worker(0, 1)) == ids
    downloads = media_gets(gcs_proxy, "r.tfrecord")
    assert downloads.count(None) == 1 and len(downloads) == 1 + math.ceil(local.stat().st_size / (64 * KiB))


def test_at_most_gcs_open_files_stay_open(gcs, tmp_path):
    """The read-ahead kept its GCS files per object read, each holding the connection of its
    unread download: a socket per file kept (126 after reading 40 objects). Now at most
    `GCS_OPEN_FILES`, the least recently used dropped first."""
    pytest.importorskip("torch")
    from tfrecord_beam import _ranges
    from tfrecord_beam.torch import TFRecordDataset

    cap = _ranges.GCS_OPEN_FILES

    def read_objects(prefix: str, count: int) -> int:
        """Read `count` new objects of ~320 KiB (more than the client's buffers take in of an
        unread download, so each such download holds its socket); the sockets open after."""
        for k in range(count):
            local = tmp_path / f"{prefix}-{k:02d}.tfrecord"
            write_local(local, k * 8, 8, 40 * KiB)
            gcs.upload(local, f"m/{prefix}-{k:02d}.tfrecord")
        ds = TFRecordDataset(gcs.uri(f"m/{prefix}-*.tfrecord"), gcs.uri(f"m/{prefix}-*.tfindex"), batch_size=50)
        assert len(ids_of(ds.iter_worker(0, 1))) == 8 * count
        return socket_count()

    after_cap = read_objects("a", cap)
    after_more = read_objects("b", 2 * cap)
    assert after_more - after_cap < cap  # was one or more per object read
    assert len(_ranges._GCS_FILES) == cap
