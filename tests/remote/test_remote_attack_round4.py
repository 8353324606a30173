"""Round-4 attack on remote reads (issue 34 items 1, 2, 6, 7, 8, 9), by a tester who wrote none
of the code: object names that are data, one identity per object, bounded calls, retries."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.faultproxy import FaultProxy
from helpers.remote_data import ids_of, record, write_local

from tfrecord_beam import _bounded, cli, fs

KiB = 1 << 10


def _bytes(tmp_path: Path, first: int, count: int = 10, size: int = 64) -> bytes:
    local = tmp_path / f"f{first}.tfrecord"
    write_local(local, first, count, size)
    return local.read_bytes()


# -- object names ---------------------------------------------------------------------------------

# key -> first id; each object's ten records are its own
NAMES = {
    "n/a%2Fb.tfrecord": 0,
    "n/%.tfrecord": 100,
    "n/%%.tfrecord": 200,
    "n/%zz.tfrecord": 300,
    "n/a b.tfrecord": 400,
    "n/\u00fc.tfrecord": 500,
    "n/+.tfrecord": 600,
    "n/=&;.tfrecord": 700,
    "n/a[1].tfrecord": 800,
    "n/a1.tfrecord": 900,
    "n/st*r.tfrecord": 1000,
    "n/" + "L" * 200 + ".tfrecord": 1100,
}
NAME_IDS = sorted(first + k for first in NAMES.values() for k in range(10))


@pytest.fixture
def s3_names(remote, tmp_path):
    for key, first in NAMES.items():
        remote.put(key, _bytes(tmp_path, first))
    return remote.uri("n/")


@pytest.fixture
def gs_names(gcs, tmp_path):
    for key, first in NAMES.items():
        gcs.server.put(gcs.bucket, key, _bytes(tmp_path, first))
    return gcs.uri("n/")


@pytest.fixture(params=["s3", "gs"])
def names(request):
    return request.getfixturevalue(f"{request.param}_names")


def test_round4_every_odd_name_is_read_as_itself_by_the_dataset(names):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    ds = TFRecordDataset(names, None, batch_size=10)
    assert sorted(ids_of(ds.iter_worker(0, 1))) == NAME_IDS


def test_round4_every_odd_name_is_counted_as_itself(names, capsys):
    assert cli.main(["count", names, "--json", "-q"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"] == len(NAME_IDS)
    assert [row["records"] for row in report["files"]] == [10] * len(NAMES)


def test_round4_multi_dataset_reads_odd_names(names):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import MultiTFRecordDataset

    ds = MultiTFRecordDataset(names.replace("/n/", "/{}/", 1), None, {"n": 1.0}, batch_size=10, infinite=False)
    got = sorted(int(i) for batch in ds.iter_worker(0, 1) for i in batch["id"][:, 0])
    assert got == NAME_IDS


# -- globs with `?` -------------------------------------------------------------------------------


@pytest.fixture
def s3_q(remote, tmp_path):
    remote.put("g/q?x.tfrecord", _bytes(tmp_path, 0))
    remote.put("g/qAx.tfrecord", _bytes(tmp_path, 100))
    return remote


def test_round4_a_glob_with_bracketed_question_mark_matches_the_literal(s3_q):
    """docs/torch.md: in a glob `[?]` matches a literal `?`."""
    found = fs.expand(s3_q.uri("g/q[?]x*.tfrecord"))
    assert [fs.split_query(u)[0].rsplit("/", 1)[1] for u in found] == ["q%3Fx.tfrecord"]


def test_round4_a_glob_with_encoded_question_mark_is_a_wildcard(s3_q):
    """docs/torch.md: in a glob `%3F` matches any one character."""
    found = fs.expand(s3_q.uri("g/q%3Fx*.tfrecord"))
    assert sorted(fs.split_query(u)[0].rsplit("/", 1)[1] for u in found) == ["q%3Fx.tfrecord", "qAx.tfrecord"]


def test_round4_a_typed_encoded_bracket_names_the_key(remote, tmp_path):
    remote.put("t/a[1].tfrecord", _bytes(tmp_path, 0))
    remote.put("t/a1.tfrecord", _bytes(tmp_path, 100, count=3))
    assert fs.file_size(remote.uri("t/a%5B1%5D.tfrecord")) == len(_bytes(tmp_path, 0))


# -- one identity per object ----------------------------------------------------------------------

BLOCK = 64 * KiB


def _aligned(first: int, blocks: int = 6) -> bytes:
    """Records framed so that every 64 KiB block starts on a record (16 records a block): a
    block of one version beside a block of another still has valid CRCs."""
    from tfrecord_beam.records import RecordWriter  # noqa: F401

    pad = 4080 - len(record(first, 0))
    for guess in range(pad - 8, pad + 8):
        if len(record(first, guess)) == 4080:
            pad = guess
            break
    import io
    import struct

    import google_crc32c

    def masked(data: bytes) -> int:
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    out = io.BytesIO()
    for uid in range(first, first + 16 * blocks):
        body = record(uid, pad)
        assert len(body) == 4080, len(body)
        head = struct.pack("<Q", len(body))
        out.write(head + struct.pack("<I", masked(head)) + body + struct.pack("<I", masked(body)))
    data = out.getvalue()
    assert len(data) == blocks * BLOCK
    return data


def test_round4_s3_replaced_mid_read_on_a_reused_handle_is_refused(remote):
    """A RangeSource reuses its idle handle for the next block: the replaced object's bytes
    come back with no ETag check (ranged GET without If-Match)."""
    from tfrecord_beam._ranges import RangeSource, RemoteOptions, RemoteStats

    remote.put("m/v.tfrecord", _aligned(1000))
    uri = remote.uri("m/v.tfrecord")
    listed = fs.file_stat(uri)
    source = RangeSource(uri, listed.size, listed.version_key, RemoteOptions(readahead_bytes=BLOCK), RemoteStats(), tag=listed.tag)
    first = source.read_block(0)
    assert first == _aligned(1000)[:BLOCK]
    remote.put("m/v.tfrecord", _aligned(5000))
    assert fs.file_stat(uri).tag != listed.tag
    with pytest.raises(OSError, match=r"v\.tfrecord.*(replaced|changed)"):
        got = source.read_block(1)
        assert got == _aligned(1000)[BLOCK : 2 * BLOCK], "the new object's block served as the old's"


def test_round4_s3_dataset_replaced_mid_epoch_never_mixes_versions(remote):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    remote.put("m/v.tfrecord", _aligned(1000, 40))
    ds = TFRecordDataset(remote.uri("m/v.tfrecord"), None, batch_size=16, readahead_bytes=BLOCK, readahead_requests=1)
    got = []
    it = ds.iter_worker(0, 1)
    got.extend(ids_of([next(it)]))
    remote.put("m/v.tfrecord", _aligned(5000, 40))
    try:
        for batch in it:
            got.extend(ids_of([batch]))
    except OSError as exc:
        assert "v.tfrecord" in str(exc)
        return
    assert got == list(range(1000, 1000 + 640)), f"mixed versions, no error: {got[::16]}"


def test_round4_gs_replaced_mid_read_is_refused(gcs):
    from tfrecord_beam._ranges import RangeSource, RemoteOptions, RemoteStats

    gcs.server.put(gcs.bucket, "m/v.tfrecord", _aligned(1000))
    uri = gcs.uri("m/v.tfrecord")
    listed = fs.file_stat(uri)
    source = RangeSource(uri, listed.size, listed.version_key, RemoteOptions(readahead_bytes=BLOCK), RemoteStats(), tag=listed.tag)
    assert source.read_block(0) == _aligned(1000)[:BLOCK]
    gcs.server.put(gcs.bucket, "m/v.tfrecord", _aligned(5000))
    with pytest.raises(Exception) as caught:  # refused: GCS reads the listed generation
        source.read_block(1)
    text = str(caught.value)
    assert "v.tfrecord" in text and "65536-131071" in text
    # the object is there: the error must say it was replaced, not "No such file or directory"
    assert "replaced" in text or "changed" in text, text


@pytest.mark.parametrize("store", ["s3", "gs"])
@pytest.mark.parametrize("mode", ["cache", "noindex-cache", "workers2", "elastic", "elastic-nocache"])
def test_round4_replaced_between_epochs_is_refused(request, tmp_path, store, mode):
    torch = pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    if store == "s3":
        remote = request.getfixturevalue("remote")
        put, uri = remote.put, remote.uri
    else:
        gcs = request.getfixturevalue("gcs")
        put, uri = (lambda k, d: gcs.server.put(gcs.bucket, k, d)), gcs.uri
    put("e/v.tfrecord", _aligned(1000, 3))
    index = None
    if mode != "noindex-cache":
        from tfrecord_beam.index import create_index

        local = tmp_path / "v.tfrecord"
        local.write_bytes(_aligned(1000, 3))
        create_index(str(local))
        put("e/v.tfindex", (tmp_path / "v.tfindex").read_bytes())
        index = uri("e/v.tfindex")
    kwargs = dict(batch_size=16, readahead_bytes=BLOCK, cache_dir=str(tmp_path / "cache"))
    if mode.startswith("elastic"):
        kwargs["elastic"] = True
    if mode == "elastic-nocache":
        del kwargs["cache_dir"]
    ds = TFRecordDataset(uri("e/v.tfrecord"), index, **kwargs)

    def epoch(n):
        ds.set_epoch(n)
        if mode == "workers2":
            loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
            return sorted(ids_of(loader))
        return sorted(ids_of(ds.iter_worker(0, 1)))

    assert epoch(0) == list(range(1000, 1048))
    time.sleep(1.1)
    put("e/v.tfrecord", _aligned(5000, 3))
    try:
        got = epoch(1)
    except Exception as exc:  # noqa: BLE001
        assert "v.tfrecord" in str(exc) and "replaced" in str(exc), str(exc)
        return
    pytest.fail(f"epoch 1 after a replacement read {got[:3]}... with no error")


def test_round4_deleted_between_listing_and_read_names_it(remote, tmp_path, capsys):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    remote.put("d/a.tfrecord", _bytes(tmp_path, 0))
    remote.put("d/b.tfrecord", _bytes(tmp_path, 100))
    ds = TFRecordDataset(remote.uri("d/"), None, batch_size=10)
    remote.client.delete_object(Bucket=remote.bucket, Key="d/b.tfrecord")
    with pytest.raises(OSError, match=r"b\.tfrecord"):
        ids_of(ds.iter_worker(0, 1))
