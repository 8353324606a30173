"""Object names are data (issue 34, items 1 and 8): a key holding `%`, `?` or `#` is listed,
opened and read as itself, on S3 and GCS, by every caller that expands a prefix (the torch
datasets, the CLI's count / inspect / verify / head), never percent-decoded a second time
(`d/part%41.tfrecord` read as `d/partA.tfrecord`) nor cut at its `?` (taken for a query
string). A URI typed by a user is percent-decoded once: `%25` names a `%`, `%3F` a `?`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.remote_data import ids_of, record, write_local

from tfrecord_beam import cli, fs

KiB = 1 << 10
# key -> first id of its 20 records: `part%41` and `partA` would read the same object if the
# listed name were decoded again; `q?x` would be cut at its `?`
KEYS = {"d/part%41.tfrecord": 0, "d/partA.tfrecord": 100, "d/q?x.tfrecord": 200, "d/h#1.tfrecord": 300}
ALL_IDS = sorted(first + k for first in KEYS.values() for k in range(20))


def _files(tmp_path: Path) -> dict:
    """The bytes of each key's file (20 records each, no index)."""
    out = {}
    for n, (key, first) in enumerate(KEYS.items()):
        local = tmp_path / f"f{n}.tfrecord"
        write_local(local, first, 20, 64)
        out[key] = local.read_bytes()
    return out


@pytest.fixture
def s3_prefix(remote, tmp_path):
    for key, data in _files(tmp_path).items():
        remote.put(key, data)
    return remote.uri("d/")


@pytest.fixture
def gs_prefix(gcs, tmp_path):
    for key, data in _files(tmp_path).items():
        gcs.server.put(gcs.bucket, key, data)
    return gcs.uri("d/")


@pytest.fixture(params=["s3", "gs"])
def prefix(request):
    return request.getfixturevalue(f"{request.param}_prefix")


def test_listing_gives_each_key_a_uri_that_opens_that_object(prefix):
    found = fs.data_files(prefix)
    assert len(found) == len(KEYS)
    for uri in found:
        assert fs.file_size(uri) > 0
    got = sorted(fs.split_query(u)[0].rsplit("/", 1)[1] for u in found)
    assert got == sorted(["part%2541.tfrecord", "partA.tfrecord", "q%3Fx.tfrecord", "h%231.tfrecord"])
    globbed = fs.expand(fs.with_query(fs.split_query(prefix)[0] + "*.tfrecord", fs.split_query(prefix)[1]))
    assert globbed == sorted(found)


def test_the_torch_dataset_reads_every_object_once(prefix):
    torch = pytest.importorskip("torch")  # noqa: F841
    from tfrecord_beam.torch import TFRecordDataset

    ds = TFRecordDataset(prefix, None, batch_size=7)
    assert sorted(ids_of(ds.iter_worker(0, 1))) == ALL_IDS


@pytest.mark.parametrize("command", ["count", "verify", "inspect"])
def test_the_cli_reads_every_object_once(prefix, command, capsys):
    assert cli.main([command, prefix, "--json", "-q"]) == 0
    report = json.loads(capsys.readouterr().out)
    files = report["files"] if isinstance(report, dict) and "files" in report else report
    text = json.dumps(files)
    for name in ("part%2541.tfrecord", "partA.tfrecord", "q%3Fx.tfrecord", "h%231.tfrecord"):
        assert name in text
    if command == "count":
        assert report["total"] == len(ALL_IDS) and [row["records"] for row in files] == [20] * len(KEYS)


def test_head_reads_each_object_named(prefix, capsys):
    assert cli.main(["head", "-n", "1", prefix]) == 0
    blocks = capsys.readouterr().out.split("==> ")[1:]
    firsts = {
        b.split(" <==")[0].split("?")[0].rsplit("/", 1)[1]: re.search(r"id +int\[1\] +\[(\d+)\]", b) for b in blocks
    }
    assert {name: int(found.group(1)) for name, found in firsts.items() if found} == {
        fs.quote_name(key.split("/", 1)[1]): first for key, first in KEYS.items()
    }  # each file's first record is its own (part%41's is 0, partA's 100)


def test_a_typed_uri_is_percent_decoded_once(remote, tmp_path):
    """`%25` in a typed URI is a `%` of the key; `%41` is an `A` (the URI rule pyarrow has)."""
    remote.put("t/part%41.tfrecord", record(1, 10))
    remote.put("t/partA.tfrecord", record(2, 10) + record(3, 10))
    assert fs.file_size(remote.uri("t/part%2541.tfrecord")) < fs.file_size(remote.uri("t/part%41.tfrecord"))
    assert fs.file_size(remote.uri("t/part%41.tfrecord")) == fs.file_size(remote.uri("t/partA.tfrecord"))
    remote.put("t/q?x.tfrecord", b"12345")
    assert fs.file_size(remote.uri("t/q%3Fx.tfrecord")) == 5


def test_fsspec_listed_names_round_trip(tmp_path):
    """The fsspec fallback (memory://) follows the same rule."""
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    for n, (key, data) in enumerate(_files(tmp_path).items()):
        memory.pipe(f"/names-{n}/{key}", data)
        found = fs.data_files(f"memory://names-{n}/d/")
        assert len(found) == 1 and fs.file_size(found[0]) == len(data)
        assert fs.split_query(found[0])[0] == "memory://" + fs.quote_name(f"names-{n}/{key}")


def test_a_question_mark_in_a_glob_bracket_is_the_path_not_the_query():
    """One rule (CLI, datasets, jobs): the query starts at the first `?` outside a glob's `[...]`."""
    from tfrecord_beam import fs

    q = "?endpoint_override=127.0.0.1:9000&scheme=http"
    assert fs.split_query("s3://b/g/q[?]x*.tfrecord" + q) == ("s3://b/g/q[?]x*.tfrecord", q)
    assert fs.split_query("s3://b/g/q[!?]x.tfrecord" + q) == ("s3://b/g/q[!?]x.tfrecord", q)
    assert fs.split_query("s3://b/g/q[]?]x.tfrecord") == ("s3://b/g/q[]?]x.tfrecord", "")
    # an unclosed `[` is a character of the name; a bare `?` starts the query
    assert fs.split_query("s3://b/a[1.tfrecord" + q) == ("s3://b/a[1.tfrecord", q)
    assert fs.split_query("s3://b/q?x.tfrecord") == ("s3://b/q", "?x.tfrecord")
    # a bracket never reaches into the query (an IPv6 endpoint)
    assert fs.split_query("s3://b/a[1.tfrecord?endpoint_override=[::1]:9000") == (
        "s3://b/a[1.tfrecord",
        "?endpoint_override=[::1]:9000",
    )
    assert fs.split_query("/local/q?x.tfrecord") == ("/local/q?x.tfrecord", "")
