"""Object names are data in the jobs too (issue 34, items 1 and 8): a job's paths follow the
CLI's and the torch datasets' one rule (docs/cli.md). A typed URI is percent-decoded once
(`%25` is a `%` of the key, `%3F` a `?`), and every object a directory, prefix or glob lists
is named with `%`, `?` and `#` encoded (`fs.quote_name`), so `in/part%41.tfrecord` is read as
itself, never as `in/partA.tfrecord`, and `in/q?x.tfrecord` is not cut at its `?`."""

from __future__ import annotations

import pytest
from helpers.jobs import payloads, run_job, summary_json
from helpers.s3server import Bucket, check_manifest, framed

from tfrecord_beam import fs
from tfrecord_beam.beam import _fs

# key -> its records (10 each, distinct): `part%41` and `partA` would be read as one object if
# a listed name were decoded again; `q?x` cut at its `?` would not be found
KEYS = {"in/part%41.tfrecord": 0, "in/partA.tfrecord": 10, "in/q?x.tfrecord": 20}


@pytest.fixture
def bucket(s3_server, s3_bucket, s3_trap, monkeypatch):
    yield Bucket(s3_server, s3_bucket, s3_server.client(), monkeypatch)
    assert s3_trap.connections == 0, "something reached S3 outside Beam's --s3_* flags"


@pytest.fixture
def inputs(bucket):
    data = {}
    for key, start in KEYS.items():
        data[key] = payloads(10, start=start)
        bucket.put(key, framed(data[key]))
    return data


def _all(inputs) -> list:
    return sorted(p for records in inputs.values() for p in records)


def test_listing_names_each_object_as_the_core_does(bucket, inputs):
    """Beam's listing and the core's give the same URIs, each opening its own object."""
    from apache_beam.options.pipeline_options import PipelineOptions

    _fs.set_options(PipelineOptions(bucket.server.beam_flags))
    found = _fs.expand(bucket.uri("in/*.tfrecord"))
    assert [u.rsplit("/", 1)[1] for u in found] == ["part%2541.tfrecord", "partA.tfrecord", "q%3Fx.tfrecord"]
    assert [m.path for m in _fs.match(bucket.uri("in/*"))] == found
    assert _fs.list_names(bucket.uri("in")) == ["part%2541.tfrecord", "partA.tfrecord", "q%3Fx.tfrecord"]
    assert [_fs.join(bucket.uri("in"), n) for n in _fs.list_names(bucket.uri("in"))] == found
    sizes = {u: _fs.file_size(u) for u in found}
    assert sizes[found[0]] == len(framed(inputs["in/part%41.tfrecord"]))
    for uri, key in zip(found, sorted(KEYS)):
        assert _fs.read_bytes(uri) == bucket.get(key)
    # a typed URI is decoded once: %25 names a `%` of the key, %41 an `A`, %3F a `?`
    assert _fs.read_bytes(bucket.uri("in/part%2541.tfrecord")) == bucket.get("in/part%41.tfrecord")
    assert _fs.read_bytes(bucket.uri("in/part%41.tfrecord")) == bucket.get("in/partA.tfrecord")
    assert _fs.exists(bucket.uri("in/q%3Fx.tfrecord"))
    with bucket.reading():  # the core agrees, name for name
        core = fs.expand(bucket.core_uri("in/*.tfrecord"))
    assert [fs.split_query(u)[0] for u in core] == found


@pytest.mark.parametrize("given", ["directory", "glob"])
def test_reshard_reads_every_object_once(bucket, inputs, capsys, given):
    from pipelines import reshard

    source = bucket.uri("in/") if given == "directory" else bucket.uri("in/*.tfrecord")
    args = ["--input", source, "--output_prefix", bucket.uri("out/r"), "--num_shards", "2"]
    code, out, err = run_job(reshard.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert summary_json(out)["records"] == 30
    assert sorted(check_manifest(bucket, "out/_MANIFEST.r.json")) == _all(inputs)


def test_reshard_of_a_typed_uri_decodes_it_once(bucket, inputs, capsys):
    """`part%2541` names the key `part%41` (as in the CLI); `part%41` names `partA`."""
    from pipelines import reshard

    for typed, key in [("in/part%2541.tfrecord", "in/part%41.tfrecord"), ("in/part%41.tfrecord", "in/partA.tfrecord")]:
        args = ["--input", bucket.uri(typed), "--output_prefix", bucket.uri("one/r"), "--num_shards", "1"]
        code, out, err = run_job(reshard.main, args + ["--overwrite"] + bucket.flags, capsys)
        assert code == 0, err
        assert check_manifest(bucket, "one/_MANIFEST.r.json") == inputs[key]


def test_build_index_indexes_every_object_as_itself(bucket, inputs, capsys, tmp_path):
    from pipelines import build_index
    from tfrecord_beam.index import verify_index

    code, out, err = run_job(build_index.main, ["--input", bucket.uri("in/")] + bucket.flags, capsys)
    assert code == 0, err
    assert summary_json(out)["indexed_files"] == 3 and summary_json(out)["records"] == 30
    assert bucket.keys() == sorted(list(KEYS) + ["in/part%41.tfindex", "in/partA.tfindex", "in/q?x.tfindex"])
    for n, key in enumerate(sorted(KEYS)):
        local, index = tmp_path / f"{n}.tfrecord", tmp_path / f"{n}.tfindex"
        local.write_bytes(bucket.get(key))
        index.write_bytes(bucket.get(key[: -len(".tfrecord")] + ".tfindex"))
        verify_index(str(index), str(local))  # each index is its own file's
