"""Remote paths go through pyarrow.fs: reading, atomic writing, globbing and sizes.

A pyarrow LocalFileSystem stands in for gs:// here (the same code path as GCS, S3 or HDFS,
without a network): `FileSystem.from_uri` is patched to hand it out for the fake bucket.
"""

from __future__ import annotations

import os

import pytest

pafs = pytest.importorskip("pyarrow.fs")

from tfrecord_beam import fs, index, records  # noqa: E402


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    root = tmp_path / "bucket"
    root.mkdir()
    real = fs._from_uri

    def from_uri(uri):
        if uri.startswith("gs://bucket/"):  # paths inside it are "bucket/...", as on GCS
            return pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), uri[len("gs://") :]
        return real(uri)

    monkeypatch.setattr(fs, "_from_uri", from_uri)
    return root


def test_remote_write_read_index_and_glob(bucket):
    payloads = [b"a", b"bb" * 100, b""]
    for name in ("train-0.tfrecord", "train-1.tfrecord.gz"):
        records.write_records(f"gs://bucket/{name}", payloads, index_path=True)
    assert sorted(p.name for p in bucket.iterdir()) == [
        "train-0.tfindex",
        "train-0.tfrecord",
        "train-1.tfrecord.gz",
        "train-1.tfrecord.gz.tfindex",
    ]
    files = fs.expand("gs://bucket/train-*.tfrecord*")
    assert [f for f in files if not f.endswith(".tfindex")] == [
        "gs://bucket/train-0.tfrecord",
        "gs://bucket/train-1.tfrecord.gz",
    ]
    for uri in ("gs://bucket/train-0.tfrecord", "gs://bucket/train-1.tfrecord.gz"):
        assert list(records.RecordReader(uri)) == payloads
        index.verify_index(index.default_index_path(uri), uri)
    assert fs.exists("gs://bucket/train-0.tfrecord") and not fs.exists("gs://bucket/nope")
    assert fs.file_size("gs://bucket/train-0.tfrecord") == (bucket / "train-0.tfrecord").stat().st_size
    assert fs.data_files("gs://bucket/*") == ["gs://bucket/train-0.tfrecord", "gs://bucket/train-1.tfrecord.gz"]


def test_remote_interrupted_write_leaves_nothing(bucket):
    with pytest.raises(RuntimeError):
        with records.RecordWriter("gs://bucket/x.tfrecord", index_path=True) as writer:
            writer.write(b"partial")
            raise RuntimeError("crash")
    assert list(bucket.iterdir()) == []


def test_remote_directory_lists_its_data_files(bucket, capsys):
    from tfrecord_beam import cli

    (bucket / "sub").mkdir()
    for name in ("a.tfrecord", "b.tfrecord.gz", "sub/c.tfrecord"):
        records.write_records(f"gs://bucket/{name}", [b"x", b"yy"], index_path=True)
    assert fs.is_dir("gs://bucket/") and fs.is_dir("gs://bucket/sub") and not fs.is_dir("gs://bucket/a.tfrecord")
    assert fs.data_files("gs://bucket/") == ["gs://bucket/a.tfrecord", "gs://bucket/b.tfrecord.gz"]
    assert cli.main(["count", "--json", "gs://bucket/"]) == 0
    assert '"total": 4' in capsys.readouterr().out


def test_fsspec_is_the_fallback_for_schemes_pyarrow_lacks():
    pytest.importorskip("fsspec")
    from tfrecord_beam.index import load_index
    from tfrecord_beam.records import RecordReader, write_records

    base = f"memory://tfb-{os.getpid()}/d"
    write_records(f"{base}/a-0.tfrecord", [b"x", b"yy"], index_path=True)
    write_records(f"{base}/a-1.tfrecord", [b"z"], index_path=True)
    found = fs.expand(f"{base}/a-*.tfrecord")
    assert found == [f"{base}/a-0.tfrecord", f"{base}/a-1.tfrecord"]
    assert [list(RecordReader(p)) for p in found] == [[b"x", b"yy"], [b"z"]]
    assert load_index(f"{base}/a-0.tfindex").tolist() == [[0, 17], [17, 18]]
    assert fs.data_files(base) == found  # a directory: its data files, no indexes, no temporaries


def test_query_strings_survive_globs_and_index_names(monkeypatch, tmp_path):
    from pyarrow import fs as pafs

    from tfrecord_beam.index import default_index_path

    (tmp_path / "b").mkdir()
    for name in ("x-0.tfrecord", "x-1.tfrecord", "x-0.tfindex"):
        (tmp_path / "b" / name).write_bytes(b"")
    monkeypatch.setattr(
        fs,
        "_from_uri",
        lambda uri: (
            pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()),
            uri.split("://", 1)[1].split("?", 1)[0],
        ),
    )
    q = "?endpoint_override=127.0.0.1:9000&scheme=http"
    assert fs.expand(f"gs://b/x-*.tfrecord{q}") == [f"gs://b/x-0.tfrecord{q}", f"gs://b/x-1.tfrecord{q}"]
    assert fs.data_files(f"gs://b/*{q}") == [f"gs://b/x-0.tfrecord{q}", f"gs://b/x-1.tfrecord{q}"]
    assert default_index_path(f"gs://b/x-0.tfrecord{q}") == f"gs://b/x-0.tfindex{q}"
    assert fs.join(f"gs://b/{q}", "n") == f"gs://b/n{q}" and fs.dirname(f"gs://b/d/n{q}") == f"gs://b/d{q}"


def test_mapped_input_maps_a_local_file_and_reads_a_remote_one(bucket, tmp_path):
    import mmap

    text = b"0 12\n12 5\n"
    (bucket / "x.tfindex").write_bytes(text)
    (tmp_path / "empty.tfindex").write_bytes(b"")
    with fs.mapped_input(bucket / "x.tfindex") as local:
        assert isinstance(local, mmap.mmap) and local[:] == text  # the page cache's pages, no copy
    assert local.closed  # unmapped on leaving
    with fs.mapped_input(tmp_path / "empty.tfindex") as empty:  # mmap refuses an empty file
        assert empty == b""
    with fs.mapped_input("gs://bucket/x.tfindex") as remote:
        assert remote == text
    assert index.load_index("gs://bucket/x.tfindex").tolist() == [[0, 12], [12, 5]]


def test_a_zombie_is_not_alive_and_its_staging_is_a_dead_runs():
    """A killed job's process stays a zombie until it is reaped (for good under a container
    init that does not reap): its staging must read as dead, so the next run can clean it."""
    import time

    from tfrecord_beam.beam.commit import Owner

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while fs._proc_state(pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fs._proc_state(pid) == "Z"
        assert not fs.pid_alive(pid) and fs.pid_alive(os.getpid())
        owner = dict(Owner.mine("out", "reshard").record, pid=pid, proc_start=None)
        assert Owner(owner).state() == "dead"
        assert Owner(dict(owner, pid=os.getpid())).state() == "alive"
    finally:
        os.waitpid(pid, 0)
    assert not fs.pid_alive(pid)


def test_compression_is_inferred_from_the_name_before_a_query_string():
    """`x.tfrecord.gz?endpoint_override=...` is a gzip file (the query string configures the
    filesystem, it is not part of the name); a local name keeps its '?' (it may hold one)."""
    from tfrecord_beam.records import resolve_compression

    query = "?endpoint_override=127.0.0.1:9300&scheme=http"
    assert resolve_compression("s3://b/t-00000-of-00002.tfrecord.gz" + query) == "gzip"
    assert resolve_compression("gs://b/t.tfrecord.zlib?x=1") == "zlib"
    assert resolve_compression("s3://b/t.tfrecord" + query) is None
    assert resolve_compression("local?.gz") == "gzip"


def test_object_store_filesystems_are_made_once_per_bucket_and_environment(monkeypatch):
    """pyarrow's from_uri costs a region lookup and a client (0.25-3 s): one call per bucket,
    query and client environment in a process, and the paths are the ones pyarrow gives."""
    from pyarrow import fs as pafs

    monkeypatch.setattr(fs, "_filesystems", {})
    made = []
    make = fs._make_filesystem
    real = pafs.FileSystem.from_uri

    def counting(uri):
        made.append(uri)
        return make(uri)

    monkeypatch.setattr(fs, "_make_filesystem", counting)
    query = "?endpoint_override=127.0.0.1:1&region=us-east-1&scheme=http"
    uris = [f"s3://b/k/x.tfrecord{query}", f"s3://b/k/{query}", f"s3://b{query}", f"s3://b/a%20b/c{query}"]
    got = [fs._split_uri(uri) for uri in uris]
    assert len(made) == 1
    assert len({id(filesystem) for filesystem, _ in got}) == 1
    assert [path for _, path in got] == [real(uri)[1] for uri in uris]
    fs._split_uri(f"s3://other/k{query}")  # another bucket: its own client
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone-else")  # other credentials: their own client
    fs._split_uri(uris[0])
    assert len(made) == 3


def test_file_size_of_a_missing_object_names_it(bucket, tmp_path):
    """`file_size` is `file_stat`'s size: a missing remote object raises FileNotFoundError naming
    it (pyarrow answers a size of None), as a missing local file does."""
    with pytest.raises(FileNotFoundError, match="gs://bucket/nope.tfrecord"):
        fs.file_size("gs://bucket/nope.tfrecord")
    with pytest.raises(FileNotFoundError, match="nope.tfrecord"):
        fs.file_size(str(tmp_path / "nope.tfrecord"))
    records.write_records("gs://bucket/here.tfrecord", [b"abc"])
    assert (
        fs.file_size("gs://bucket/here.tfrecord") == fs.file_stat("gs://bucket/here.tfrecord").size == 16 + 3
    )  # one frame
