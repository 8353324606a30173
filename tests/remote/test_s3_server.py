"""Every job end to end against a real S3-protocol server (versitygw, `runners/s3.sh`), as on a
cluster whose workers share nothing with the launcher but the object store.

The jobs get Beam's `--s3_*` flags only: no AWS_* credentials, and AWS_ENDPOINT_URL /
AWS_ENDPOINT_URL_S3 point at a trap that must never be contacted (the `s3_trap` fixture), so
any read or write that goes through the core's pyarrow layer, or a boto3 client built from the
environment, instead of Beam's FileSystems with the pipeline's options shows up. Each output's
manifest is checked shard by shard, and the bucket must hold the output and nothing else (no
staging, no temporary objects). Readers outside Beam (the CLI, the torch dataset) reach the
server through a URI query string, the core's way.
"""

from __future__ import annotations

import io
from collections import Counter

import pytest
from helpers.jobs import FAST, payloads, run_job, summary_json
from helpers.s3server import Bucket, check_manifest, framed, shard_names, upload_inputs

from tfrecord_beam.example import decode_example
from tfrecord_beam.records import RecordWriter


@pytest.fixture
def bucket(s3_server, s3_bucket, s3_trap, monkeypatch):
    yield Bucket(s3_server, s3_bucket, s3_server.client(), monkeypatch)
    assert s3_trap.connections == 0, "something reached S3 outside Beam's --s3_* flags"


def test_build_index_on_s3(bucket, capsys, tmp_path):
    """A directory given with its trailing slash means the directory (as in the CLI), and a
    glob its matches: one job given both (every file indexed, nothing else in the bucket)."""
    from pipelines import build_index
    from tfrecord_beam.index import verify_index

    upload_inputs(bucket, "in", [30, 45])
    bucket.put("in/d-2.tfrecord.gz", framed(payloads(20, start=75), "gzip"))
    upload_inputs(bucket, "gl", [10, 15])
    bucket.put("gl/x-0.tfrecord", framed(payloads(5)))  # not matched by the glob
    code, out, err = run_job(
        build_index.main, ["--input", bucket.uri("in/"), bucket.uri("gl/d-*")] + bucket.flags, capsys
    )
    assert code == 0, err
    assert summary_json(out)["indexed_files"] == 5 and summary_json(out)["records"] == 95 + 25
    assert bucket.keys() == [
        "gl/d-0.tfindex",
        "gl/d-0.tfrecord",
        "gl/d-1.tfindex",
        "gl/d-1.tfrecord",
        "gl/x-0.tfrecord",
        "in/d-0.tfindex",
        "in/d-0.tfrecord",
        "in/d-1.tfindex",
        "in/d-1.tfrecord",
        "in/d-2.tfrecord.gz",
        "in/d-2.tfrecord.gz.tfindex",
    ]
    for name, index in [
        ("in/d-0.tfrecord", "in/d-0.tfindex"),
        ("in/d-2.tfrecord.gz", "in/d-2.tfrecord.gz.tfindex"),
        ("gl/d-1.tfrecord", "gl/d-1.tfindex"),
    ]:
        local, local_index = tmp_path / name.replace("/", "-"), tmp_path / index.replace("/", "-")
        local.write_bytes(bucket.get(name))
        local_index.write_bytes(bucket.get(index))
        verify_index(str(local_index), str(local))  # raises on any difference


def test_reshard_with_shuffle_s3_to_s3(bucket, capsys):
    """Reshard's external shuffle on S3 (its temporary buckets too: nothing left). The
    contiguous reshard s3 -> s3: test_cli_and_torch_on_a_gzip_output_with_a_query_string (a
    gzip output), test_reshard_skip_corrupt_on_s3, and test_s3.py (plain outputs)."""
    from pipelines import reshard

    data = upload_inputs(bucket, "in", [40, 25, 35])
    args = ["--input", bucket.uri("in/"), "--output_prefix", bucket.uri("out/r"), "--num_shards", "2"]
    code, out, err = run_job(reshard.main, args + ["--shuffle", "--seed", "7"] + bucket.flags, capsys)
    assert code == 0, err
    assert summary_json(out)["records"] == 100
    assert bucket.keys() == sorted(
        [f"in/d-{k}.tfrecord" for k in range(3)] + ["out/_MANIFEST.r.json"] + ["out/" + n for n in shard_names("r", 2)]
    )
    got = check_manifest(bucket, "out/_MANIFEST.r.json")
    assert sorted(got) == sorted(data) and got != data


def test_mix_over_s3_globs_with_directory_markers_equals_mix_over_local_files(bucket, capsys, tmp_path):
    """mix s3 -> s3, and a seeded mix is a function of its inputs and seed, wherever they live:
    `s3://b/dir/*` also matches the empty `dir/` marker objects pyarrow (and posix-backed S3
    servers, and S3 consoles) make; taken for an input file it shifted every file's number, so
    the selection and order differed from the same mix over local copies (seen on Flink, issue
    21), and the manifest listed the marker as a source file."""
    import json

    from pipelines import mix
    from tfrecord_beam.records import read_records, write_records

    sources = {"tf": [(300, 1, 0), (200, 1, 1000)], "b": [(40, 2, 0)]}
    inputs: list = []
    for directory, files in sources.items():
        (tmp_path / directory).mkdir()
        for k, (n, tag, start) in enumerate(files):
            name = f"{directory}/x-{k}.tfrecord"
            inputs += payloads(n, tag=tag, start=start)
            write_records(str(tmp_path / name), payloads(n, tag=tag, start=start))
            bucket.put(f"mixin/{name}", (tmp_path / name).read_bytes())
    bucket.put("mixin/tf/", b"")  # a marker, whoever made it
    assert "mixin/tf/" in bucket.keys()

    def run_mix(base: str, out: str, flags) -> dict:
        """The mix manifest (NAME.manifest.json) of a mix of BASE/tf/* and BASE/b/* into OUT."""
        args = ["--source", f"{base}/tf/*=0.7", "--source", f"{base}/b/*=0.3", "--total_records", "120"]
        code, stdout, err = run_job(
            mix.main, args + ["--num_shards", "3", "--seed", "5", "--output_prefix", out] + flags, capsys
        )
        assert code == 0, err
        return json.loads(read(out + ".manifest.json"))

    def read(path: str) -> bytes:
        return bucket.get(path[len(bucket.uri("")) :]) if path.startswith("s3://") else open(path, "rb").read()

    manifests = {
        "local": run_mix(str(tmp_path), str(tmp_path / "out" / "m"), FAST),
        "s3": run_mix(bucket.uri("mixin"), bucket.uri("mixout/m"), bucket.flags),
    }
    for manifest in manifests.values():
        assert [len(s["files"]) for s in manifest["sources"]] == [2, 1], manifest["sources"]  # no marker listed
    local = [list(read_records(s["file"])) for s in manifests["local"]["shards"]]
    remote = [list(read_records(io.BytesIO(read(s["file"])))) for s in manifests["s3"]["shards"]]
    assert remote == local and sum(map(len, local)) == 120

    names = ["mixin/tf/", "mixin/b/x-0.tfrecord", "mixin/tf/x-0.tfrecord", "mixin/tf/x-1.tfrecord"]
    names += ["mixout/" + n for n in ["_MANIFEST.m.json", "m.manifest.json"] + shard_names("m", 3)]
    assert bucket.keys() == sorted(names)  # nothing else
    got = check_manifest(bucket, "mixout/_MANIFEST.m.json")
    assert got == [p for shard in remote for p in shard]
    tags = Counter(int(decode_example(p)["tag"][0]) for p in got)
    assert (
        tags == {1: 84, 2: 36} and set(got) <= set(inputs) and len(set(got)) == 120
    )  # as many as each holds: none twice


def test_parquet_to_tfrecord_and_back_s3_to_s3(bucket, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import parquet_to_tfrecord, tfrecord_to_parquet

    table = pa.table({"id": list(range(120)), "t": [f"row {i}".encode() for i in range(120)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=50)
    bucket.put("pq/in.parquet", sink.getvalue())

    args = ["--input", bucket.uri("pq/"), "--output_prefix", bucket.uri("tf/t"), "--num_shards", "2"]
    code, out, err = run_job(parquet_to_tfrecord.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert bucket.keys("tf/") == sorted(["_MANIFEST.t.json"] + shard_names("t", 2))
    rows = [decode_example(p) for p in check_manifest(bucket, "tf/_MANIFEST.t.json")]
    assert sorted((int(r["id"][0]), r["t"]) for r in rows) == [(i, f"row {i}".encode()) for i in range(120)]

    args = ["--input", bucket.uri("tf/"), "--output_prefix", bucket.uri("back/p"), "--num_shards", "2"]
    args += ["--split_bytes", "1024"]  # ranges inside the shards, split by their indexes
    code, out, err = run_job(tfrecord_to_parquet.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert bucket.keys("back/") == sorted(["_MANIFEST.p.json"] + shard_names("p", 2, ".parquet", index=False))
    check_manifest(bucket, "back/_MANIFEST.p.json")
    back = pa.concat_tables(
        [pq.read_table(io.BytesIO(bucket.get(f"back/{n}"))) for n in shard_names("p", 2, ".parquet", False)]
    )
    assert sorted(zip(back.column("id").to_pylist(), back.column("t").to_pylist())) == sorted(
        zip(table.column("id").to_pylist(), table.column("t").to_pylist())
    )


def test_cli_and_torch_on_a_gzip_output_with_a_query_string(bucket, capsys):
    """A gzip output of reshard (contiguous: the inputs in order), read through the core with
    the endpoint in the URI's query string: the CLI infers gzip from the name before the query,
    and the torch dataset finds each shard's index (no stale-index error)."""
    from pipelines import reshard
    from tfrecord_beam import cli

    data = upload_inputs(bucket, "in", [50, 30])
    args = ["--input", bucket.uri("in/"), "--output_prefix", bucket.uri("gz/t"), "--num_shards", "2"]
    code, out, err = run_job(reshard.main, args + ["--output_compression", "gzip"] + bucket.flags, capsys)
    assert code == 0, err
    assert summary_json(out)["records"] == 80
    assert bucket.keys() == sorted(
        ["in/d-0.tfrecord", "in/d-1.tfrecord", "gz/_MANIFEST.t.json"]
        + [f"gz/t-0000{k}-of-00002.tfrecord.gz" for k in range(2)]
        + [f"gz/t-0000{k}-of-00002.tfrecord.gz.tfindex" for k in range(2)]
    )
    assert check_manifest(bucket, "gz/_MANIFEST.t.json") == data

    shard = bucket.core_uri("gz/t-00000-of-00002.tfrecord.gz")
    with bucket.reading():
        assert cli.main(["count", shard]) == 0
        assert "40" in capsys.readouterr().out
        output = bucket.core_uri("gz/t")
        assert cli.main(["count", output]) == 0
        assert "80  total" in capsys.readouterr().out
        assert cli.main(["verify", output]) == 0
        assert capsys.readouterr().out.count("40 records, index valid, matches the manifest") == 2
        assert cli.main(["inspect", output]) == 0
        printed = capsys.readouterr()
        assert "80 records" in printed.err + printed.out, printed

        pytest.importorskip("torch")
        from tfrecord_beam.torch import TFRecordDataset

        ds = TFRecordDataset(bucket.core_uri("gz/t"), None, {"i": "int"}, batch_size=16)
        got = sorted(int(i) for batch in ds for i in batch["i"][:, 0])
    assert got == list(range(80))


def test_beam_transforms_write_and_read_by_index_on_s3(bucket, tmp_path):
    """WriteToTFRecord writes shards and their indexes to S3, plain and block-gzip (with member
    tables for .gz); ReadFromTFRecord, ReadFromTFRecordBatched and ReadAllFromTFRecord split
    them by those indexes, and ReadFromTFRecord splits a block-gzip file of many members by
    them, every member opened through Beam's FileSystems with the pipeline's options (the trap
    sees nothing). One pipeline writes both outputs, one reads everything."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from tfrecord_beam import blockgzip
    from tfrecord_beam.beam import ReadAllFromTFRecord, ReadFromTFRecord, ReadFromTFRecordBatched, WriteToTFRecord
    from tfrecord_beam.index import default_index_path

    data = payloads(300)
    outputs = {"plain": ("w/t", ""), "block-gzip": ("g/t", ".tfrecord.gz")}
    with beam.Pipeline(options=PipelineOptions(bucket.flags)) as p:
        created = p | beam.Create(data)
        for kind, (prefix, suffix) in outputs.items():
            _ = created | f"Write {kind}" >> WriteToTFRecord(bucket.uri(prefix), file_name_suffix=suffix, num_shards=2)
    shards = {
        kind: [f"{prefix}-0000{k}-of-00002{suffix}" for k in range(2)] for kind, (prefix, suffix) in outputs.items()
    }
    written = [n for names in shards.values() for n in names]
    assert bucket.keys() == sorted(written + [default_index_path(n) for n in written])  # nothing else

    members = [b"rec-%04d-" % i + b"z" * (i * 13 % 200) for i in range(400)]
    local = tmp_path / "a.tfrecord.gz"
    with RecordWriter(str(local), index_path=True, block_bytes=1500) as writer:
        writer.write_many(members)
    assert len(blockgzip.member_table_for(str(local))) > 10
    bucket.put("bg/a.tfrecord.gz", local.read_bytes())
    bucket.put("bg/a.tfrecord.gz.tfindex", (tmp_path / "a.tfrecord.gz.tfindex").read_bytes())

    with beam.Pipeline(options=PipelineOptions(bucket.flags)) as p:
        for kind, (prefix, _suffix) in outputs.items():
            pattern = bucket.uri(prefix + "-*")
            read = p | f"Read {kind}" >> ReadFromTFRecord(pattern, min_bundle_size=256)
            assert_that(read, equal_to(data), label=f"Records {kind}")
            batched = p | f"Batched {kind}" >> ReadFromTFRecordBatched(pattern, min_bundle_size=256)
            flat = batched | f"Flatten {kind}" >> beam.FlatMap(lambda batch: batch)
            assert_that(flat, equal_to(data), label=f"BatchedRecords {kind}")
            every = (
                p
                | f"Names {kind}" >> beam.Create([bucket.uri(n) for n in shards[kind]])
                | f"ReadAll {kind}" >> ReadAllFromTFRecord(min_bundle_size=256)
            )
            assert_that(every, equal_to(data), label=f"AllRecords {kind}")
        split = p | "Read members" >> ReadFromTFRecord(bucket.uri("bg/a.tfrecord.gz"), min_bundle_size=1000)
        assert_that(split, equal_to(members), label="MemberRecords")


@pytest.mark.parametrize("shuffle", [False, True], ids=["contiguous", "shuffle"])
def test_reshard_skip_corrupt_on_s3(bucket, capsys, tmp_path, shuffle):
    """Damaged input on S3: the intact records come out once each, and the dead letters
    (written to S3 beside the output) name the S3 file and the offsets of the bad records."""
    import json

    from pipelines import reshard
    from tfrecord_beam.index import build_index

    data = payloads(200)
    local = tmp_path / "a.tfrecord"
    local.write_bytes(framed(data))
    offsets = build_index(str(local))[:, 0].tolist()
    raw = bytearray(local.read_bytes())
    raw[offsets[50] + 14] ^= 0xFF  # a payload byte: its CRC fails
    raw[offsets[150] + 2] ^= 0xFF  # a length byte: reading resyncs at the next record
    bucket.put("bad/a.tfrecord", bytes(raw))

    args = ["--input", bucket.uri("bad/a.tfrecord"), "--output_prefix", bucket.uri("out/r"), "--num_shards", "2"]
    args += ["--skip_corrupt"] + (["--shuffle", "--seed", "5"] if shuffle else [])
    code, out, err = run_job(reshard.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert summary_json(out)["corrupt_records"] == 2
    outputs = ["_CORRUPT.r.jsonl", "_MANIFEST.r.json"] + shard_names("r", 2)
    assert bucket.keys() == sorted(["bad/a.tfrecord"] + ["out/" + n for n in outputs])
    got = check_manifest(bucket, "out/_MANIFEST.r.json")
    kept = [p for i, p in enumerate(data) if i not in (50, 150)]
    assert sorted(got) == sorted(kept) and (shuffle or got == kept)
    letters = [json.loads(line) for line in bucket.get("out/_CORRUPT.r.jsonl").decode().splitlines()]
    assert [(d["file"], d["offset"]) for d in letters] == [
        (bucket.uri("bad/a.tfrecord"), offsets[k]) for k in (50, 150)
    ]


def test_the_trap_catches_the_core_and_boto3_reading_the_environment(s3_server, s3_bucket, monkeypatch, tmp_path):
    """The trap is a real detector: pyarrow (the core's layer) and a boto3 client built from
    the environment both go to AWS_ENDPOINT_URL, and are counted there.

    Here the trap answers each request 403 (as S3 answers a key it does not know) instead of
    closing the connection: a closed connection is what pyarrow's S3 client retries, every
    0.2 s for 6 s (arrow's ConnectRetryStrategy), all of it waiting; a 403 it does not retry.
    It counts connections as `TrapEndpoint` does, on accepting each."""
    import socket

    import boto3
    import botocore.exceptions
    from botocore.config import Config
    from helpers.s3server import TrapEndpoint, trap_environment

    from tfrecord_beam import fs

    def forbid(conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                request += chunk
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    trap = TrapEndpoint(answer=forbid)
    try:
        for key, value in trap_environment(trap, tmp_path).items():
            monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
        for key, value in s3_server.reader_environment().items():
            monkeypatch.setenv(key, value)  # keys, so that only the endpoint is wrong
        with pytest.raises(OSError):
            fs.file_size(f"s3://{s3_bucket}/x.tfrecord")
        core = trap.connections
        assert core > 0
        client = boto3.client("s3", region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
        with pytest.raises(botocore.exceptions.ClientError, match="403"):
            client.head_object(Bucket=s3_bucket, Key="x.tfrecord")
        assert trap.connections > core
    finally:
        trap.close()


def test_core_globs_keep_the_keys_of_a_uri(s3_server, s3_bucket, s3_trap):
    """`s3://KEY:SECRET@bucket/...` (pyarrow takes keys there, not in the query string): the
    files a glob finds keep them, so each opens with no AWS_* keys in the environment."""
    from tfrecord_beam import fs
    from tfrecord_beam.records import read_records

    client = s3_server.client()
    for k in range(2):
        client.put_object(Bucket=s3_bucket, Key=f"k/d-{k}.tfrecord", Body=framed(payloads(5, start=5 * k)))
    keys_at = f"s3://{s3_server.access_key}:{s3_server.secret_key}@{s3_bucket}/k/"
    found = fs.expand(keys_at + "d-*.tfrecord" + s3_server.query)
    assert found == [keys_at + f"d-{k}.tfrecord" + s3_server.query for k in range(2)]
    assert [p for f in found for p in read_records(f)] == payloads(10)


def test_outputs_named_with_glob_characters_on_s3(bucket, capsys):
    """The attack sweep's glob-named outputs (issue 22) on an object store: `a[x]` commits and
    releases its lock, `*` replaced with --overwrite leaves `a[x]` whole (a `*` or `a[x]` taken
    as a pattern would reach the other's files), and the next run of `a[x]` sees it there."""
    import json

    from pipelines import reshard
    from tfrecord_beam.records import read_records

    data = upload_inputs(bucket, "in", [4, 5])

    def run(prefix: str, shards: int, *extra: str):
        argv = ["--input", bucket.uri("in/*.tfrecord"), "--output_prefix", bucket.uri(prefix), "--num_shards"]
        return run_job(reshard.main, [*argv, str(shards), *extra, *bucket.flags], capsys)

    for prefix, shards, extra in [("g/a[x]", 1, ()), ("g/*", 2, ()), ("g/*", 1, ("--overwrite",))]:
        code, _, err = run(prefix, shards, *extra)
        assert code == 0, (prefix, err)
    assert bucket.keys() == sorted(
        ["in/d-0.tfrecord", "in/d-1.tfrecord"]
        + ["g/" + n for n in ["_MANIFEST.*.json", "_MANIFEST.a[x].json"] + shard_names("*", 1) + shard_names("a[x]", 1)]
    )  # no lock left either
    # a[x]'s output whole (read with boto3: pyarrow's URI parser refuses a `[` in a key)
    manifest = json.loads(bucket.get("g/_MANIFEST.a[x].json"))
    assert [(s["name"], s["records"]) for s in manifest["shards"]] == [("a[x]-00000-of-00001.tfrecord", 9)]
    assert list(read_records(io.BytesIO(bucket.get("g/a[x]-00000-of-00001.tfrecord")))) == data
    code, _, err = run("g/a[x]", 1)
    assert code == 1 and "another run is there" in err
