"""Round-4 attack on remote reads (issue 34 items 1, 2, 6, 7, 8, 9), by a tester who wrote none
of the code: object names that are data, one identity per object, bounded calls, retries."""

from __future__ import annotations

import json
import subprocess
import sys
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
    source = RangeSource(
        uri, listed.size, listed.version_key, RemoteOptions(readahead_bytes=BLOCK), RemoteStats(), tag=listed.tag
    )
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
    source = RangeSource(
        uri, listed.size, listed.version_key, RemoteOptions(readahead_bytes=BLOCK), RemoteStats(), tag=listed.tag
    )
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


# -- stalls, trickles, retries --------------------------------------------------------------------


def _is_data(path: str) -> bool:
    return ".tfrecord" in path.split("?")[0]


@pytest.fixture
def s3_object(remote, tmp_path):
    local = tmp_path / "s" / "train-00404-of-01024.tfrecord"
    local.parent.mkdir()
    write_local(local, 0, 300, KiB)
    (local.parent / "train-00404-of-01024.tfindex").unlink()
    remote.upload(local, "s/train-00404-of-01024.tfrecord")
    return remote


@pytest.mark.parametrize(
    "where",
    ["head", "list", "get-headers", "body-0", "body-1", "body-65535"],
)
def test_round4_count_ends_within_about_the_bound(s3_object, s3_server, capsys, where):
    def rule(method, path, headers):
        if where == "head" and method == "HEAD":
            return ("stall", 30)
        if where == "list" and method == "GET" and "list-type" in path:
            return ("stall", 30)
        if method == "GET" and _is_data(path):
            if where == "get-headers":
                return ("stall", 30)
            if where.startswith("body-"):
                return ("hang", int(where.split("-")[1]))
        return None

    with FaultProxy(s3_server.host_port, rule) as proxy:
        target = s3_object.uri("s/" if where == "list" else "s/train-00404-of-01024.tfrecord", proxy.host_port)
        started = time.monotonic()
        status = cli.main(["count", "--timeout", "1", target])
        elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert status == 1, (status, err)
    assert elapsed < 8, elapsed
    assert "train-00404-of-01024" in err or where == "list", err
    assert "no answer within 1 s" in err, err


class _Trickle(FaultProxy):
    """Passes every answer, but the data GETs' bodies one byte every 0.2 s."""

    def _handle(self, handler):
        if handler.command != "GET" or not _is_data(handler.path):
            return super()._handle(handler)
        import http.client

        headers = {k: v for k, v in handler.headers.items()}
        upstream = http.client.HTTPConnection(self.upstream, timeout=60)
        upstream.request("GET", handler.path, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        handler.send_response(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        try:
            for k in range(len(data)):
                if self._stopping.is_set():
                    break
                handler.wfile.write(data[k : k + 1])
                handler.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass
        handler.close_connection = True


def test_round4_a_trickling_server_is_bounded_in_a_cli_process(s3_object, s3_server):
    """A body trickling a byte every 0.2 s never trips a low-speed timeout: the call's own bound
    must end it, and the process must exit (no request left running inside the client)."""
    with _Trickle(s3_server.host_port) as proxy:
        env = {**__import__("os").environ, _bounded.TIMEOUT_ENV: "2"}
        started = time.monotonic()
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tfrecord_beam.cli",
                    "count",
                    s3_object.uri("s/train-00404-of-01024.tfrecord", proxy.host_port),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(
                f"count still running after {time.monotonic() - started:.0f} s against a 2 s bound; "
                f"stderr so far: {(exc.stderr or b'')[-400:]!r}"
            )
    assert done.returncode == 1, (done.returncode, done.stderr[-500:])
    assert "train-00404-of-01024" in done.stderr and "within 2 s" in done.stderr, done.stderr[-500:]
    assert time.monotonic() - started < 30


def test_round4_a_torch_read_of_a_trickle_is_bounded(s3_object, s3_server):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    with _Trickle(s3_server.host_port) as proxy:
        ds = TFRecordDataset(
            s3_object.uri("s/train-00404-of-01024.tfrecord", proxy.host_port),
            None,
            batch_size=10,
            request_timeout=1,
            request_attempts=2,
            readahead_bytes=64 * KiB,
        )
        started = time.monotonic()
        with pytest.raises(Exception, match=r"train-00404-of-01024.*bytes 0-"):
            ids_of(ds.iter_worker(0, 1))
        assert time.monotonic() - started < 10


def test_round4_a_cut_body_on_a_404_key_is_retried(s3_object, s3_server):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    cut = []

    def rule(method, path, headers):
        if method == "GET" and _is_data(path) and not cut:
            cut.append(path)
            return ("cut", 100)
        return None

    with FaultProxy(s3_server.host_port, rule) as proxy:
        ds = TFRecordDataset(s3_object.uri("s/train-00404-of-01024.tfrecord", proxy.host_port), None, batch_size=50)
        assert sorted(ids_of(ds.iter_worker(0, 1))) == list(range(300))
        assert ds.remote_stats()["retries"] >= 1


def test_round4_cli_count_retries_a_cut_body_on_a_404_key(s3_object, s3_server, capsys):
    cut = []

    def rule(method, path, headers):
        if method == "GET" and _is_data(path) and not cut:
            cut.append(path)
            return ("cut", 100)
        return None

    with FaultProxy(s3_server.host_port, rule) as proxy:
        status = cli.main(["count", "--json", "-q", s3_object.uri("s/train-00404-of-01024.tfrecord", proxy.host_port)])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert json.loads(out.out)["total"] == 300


class _StatusProxy(FaultProxy):
    """FaultProxy whose status answers carry the S3 error code that goes with the status."""

    CODES = {403: "AccessDenied", 500: "InternalError", 503: "SlowDown"}

    def _handle(self, handler):
        fault = self.fault(handler.command, handler.path, handler.headers)
        if fault is None or fault[0] != "status":
            return super()._handle(handler)
        with self._lock:
            self.requests.append((handler.command, handler.path, handler.headers.get("Range")))
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{self.CODES[fault[1]]}</Code>'
            f"<Message>injected</Message></Error>"
        ).encode()
        handler.send_response(fault[1])
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


@pytest.mark.parametrize("code", [403, 500, 503])
def test_round4_status_answers(s3_object, s3_server, capsys, code):
    def rule(method, path, headers):
        return ("status", code) if method == "GET" and _is_data(path) else None

    with _StatusProxy(s3_server.host_port, rule) as proxy:
        started = time.monotonic()
        status = cli.main(
            ["count", "--timeout", "2", s3_object.uri("s/train-00404-of-01024.tfrecord", proxy.host_port)]
        )
        elapsed = time.monotonic() - started
        gets = len(proxy.ranged_gets()) + len(
            [r for m, p, r in proxy.requests if m == "GET" and _is_data(p) and r is None]
        )
    err = capsys.readouterr().err
    assert status == 1, (status, err)
    if code == 403:
        assert gets == 1, gets
    else:
        assert gets > 1, gets
    assert elapsed < 30
    # a clear message: the object, and what the store answered (not "the server stalled")
    assert "train-00404-of-01024" in err and "stalled" not in err, err
    assert {403: "ACCESS_DENIED", 500: "INTERNAL_FAILURE", 503: "SLOW_DOWN"}[code] in err or str(code) in err, err
