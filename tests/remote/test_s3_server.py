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

import contextlib
import io
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import List, Optional

import pytest
from helpers.jobs import FAST, payloads, run_job, summary_json
from helpers.s3server import S3Server, keys

from tfrecord_beam.example import decode_example
from tfrecord_beam.records import RecordReader, RecordWriter


@dataclass
class Bucket:
    """One test's bucket on the server, with what a test needs to reach it."""

    server: S3Server
    name: str
    client: object
    monkeypatch: pytest.MonkeyPatch

    @contextlib.contextmanager
    def reading(self):
        """The keys in the environment while readers outside Beam run (never during a job)."""
        with self.monkeypatch.context() as patch:
            for key, value in self.server.reader_environment().items():
                patch.setenv(key, value)
            yield

    def uri(self, key: str) -> str:
        return f"s3://{self.name}/{key}"

    def core_uri(self, key: str) -> str:
        """The URI the core's pyarrow layer opens (endpoint and keys in its query string)."""
        return self.uri(key) + self.server.query

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def keys(self, prefix: str = "") -> List[str]:
        return keys(self.client, self.name, prefix)

    @property
    def flags(self) -> List[str]:
        return self.server.beam_flags + FAST


@pytest.fixture
def bucket(s3_server, s3_bucket, s3_trap, monkeypatch):
    yield Bucket(s3_server, s3_bucket, s3_server.client(), monkeypatch)
    assert s3_trap.connections == 0, "something reached S3 outside Beam's --s3_* flags"


def framed(records: List[bytes], compression: Optional[str] = None) -> bytes:
    """The bytes of a TFRecord file holding `records`."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "f.tfrecord")
        with RecordWriter(path, compression) as writer:
            writer.write_many(records)
        with open(path, "rb") as handle:
            return handle.read()


def upload_inputs(bucket: Bucket, prefix: str, counts: List[int], tag: int = 0, suffix: str = ".tfrecord") -> list:
    """Files PREFIX/d-K.tfrecord with counts[K] records; all records written, in order."""
    out: list = []
    for k, n in enumerate(counts):
        data = payloads(n, tag, sum(counts[:k]))
        bucket.put(f"{prefix}/d-{k}{suffix}", framed(data, "gzip" if suffix.endswith(".gz") else None))
        out += data
    return out


def check_manifest(bucket: Bucket, manifest_key: str) -> list:
    """Every shard of the manifest matches it (size, index, count, bytes, checksum); the
    records of all shards, in shard order."""
    from tfrecord_beam import manifest as mf

    path = bucket.core_uri(manifest_key)
    records: list = []
    with bucket.reading():
        manifest = mf.read_manifest(path)
        for entry, shard in zip(manifest.shards, mf.shard_paths(manifest, path)):
            assert mf.check_shard(entry, shard, full=True) == []
            if entry.compression != "parquet":
                records += list(RecordReader(shard))
    assert len(records) == manifest.records or manifest.shards[0].compression == "parquet"
    return records


def shard_names(name: str, shards: int, suffix: str = ".tfrecord", index: bool = True) -> List[str]:
    out = []
    for k in range(shards):
        out.append(f"{name}-{k:05d}-of-{shards:05d}{suffix}")
        if index:
            out.append(f"{name}-{k:05d}-of-{shards:05d}.tfindex")
    return out


@pytest.mark.parametrize("target", ["in/", "in/d-*"], ids=["trailing-slash", "glob"])
def test_build_index_on_s3(bucket, capsys, tmp_path, target):
    """A directory given with its trailing slash means the directory (as in the CLI)."""
    from pipelines import build_index
    from tfrecord_beam.index import verify_index

    upload_inputs(bucket, "in", [30, 45])
    bucket.put("in/d-2.tfrecord.gz", framed(payloads(20, start=75), "gzip"))
    code, out, err = run_job(build_index.main, ["--input", bucket.uri(target)] + bucket.flags, capsys)
    assert code == 0, err
    assert summary_json(out)["indexed_files"] == 3 and summary_json(out)["records"] == 95
    assert bucket.keys("in/") == [
        "d-0.tfindex",
        "d-0.tfrecord",
        "d-1.tfindex",
        "d-1.tfrecord",
        "d-2.tfrecord.gz",
        "d-2.tfrecord.gz.tfindex",
    ]
    for name, index in [("d-0.tfrecord", "d-0.tfindex"), ("d-2.tfrecord.gz", "d-2.tfrecord.gz.tfindex")]:
        (tmp_path / name).write_bytes(bucket.get(f"in/{name}"))
        (tmp_path / index).write_bytes(bucket.get(f"in/{index}"))
        verify_index(str(tmp_path / index), str(tmp_path / name))  # raises on any difference


@pytest.mark.parametrize("shuffle", [False, True], ids=["contiguous", "shuffle"])
def test_reshard_s3_to_s3(bucket, capsys, shuffle):
    from pipelines import reshard

    data = upload_inputs(bucket, "in", [40, 25, 35])
    args = ["--input", bucket.uri("in/"), "--output_prefix", bucket.uri("out/r"), "--num_shards", "2"]
    code, out, err = run_job(
        reshard.main, args + (["--shuffle", "--seed", "7"] if shuffle else []) + bucket.flags, capsys
    )
    assert code == 0, err
    assert summary_json(out)["records"] == 100
    assert bucket.keys() == sorted(
        [f"in/d-{k}.tfrecord" for k in range(3)] + ["out/_MANIFEST.r.json"] + ["out/" + n for n in shard_names("r", 2)]
    )
    got = check_manifest(bucket, "out/_MANIFEST.r.json")
    if shuffle:
        assert sorted(got) == sorted(data) and got != data
    else:
        assert got == data


def test_mix_s3_to_s3(bucket, capsys):
    from pipelines import mix

    a = upload_inputs(bucket, "a", [60, 40], tag=1)
    b = upload_inputs(bucket, "b", [30], tag=2)
    args = ["--source", bucket.uri("a/*.tfrecord") + "=3", "--source", bucket.uri("b/*.tfrecord") + "=1"]
    args += ["--total_records", "80", "--output_prefix", bucket.uri("mix/m"), "--num_shards", "2", "--seed", "3"]
    code, out, err = run_job(mix.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert bucket.keys("mix/") == sorted(["_MANIFEST.m.json", "m.manifest.json"] + shard_names("m", 2))
    got = check_manifest(bucket, "mix/_MANIFEST.m.json")
    tags = Counter(int(decode_example(p)["tag"][0]) for p in got)
    assert tags == {1: 60, 2: 20} and set(got) <= set(a) | set(b) and len(set(got)) == 80


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
    """A gzip output of reshard, read through the core with the endpoint in the URI's query
    string: the CLI infers gzip from the name before the query, and the torch dataset finds
    each shard's index (no stale-index error)."""
    from pipelines import reshard
    from tfrecord_beam import cli

    data = upload_inputs(bucket, "in", [50, 30])
    args = ["--input", bucket.uri("in/*.tfrecord"), "--output_prefix", bucket.uri("gz/t"), "--num_shards", "2"]
    code, out, err = run_job(reshard.main, args + ["--output_compression", "gzip"] + bucket.flags, capsys)
    assert code == 0, err
    assert bucket.keys("gz/") == sorted(
        ["_MANIFEST.t.json"]
        + [f"t-0000{k}-of-00002.tfrecord.gz" for k in range(2)]
        + [f"t-0000{k}-of-00002.tfrecord.gz.tfindex" for k in range(2)]
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


@pytest.mark.parametrize("suffix", ["", ".tfrecord.gz"], ids=["plain", "block-gzip"])
def test_beam_transforms_write_and_read_by_index_on_s3(bucket, suffix):
    """WriteToTFRecord writes shards and their indexes to S3 (block-gzip with member tables
    for .gz); ReadFromTFRecord, ReadFromTFRecordBatched and ReadAllFromTFRecord split them by
    those indexes (read through Beam's FileSystems with the pipeline's options)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from tfrecord_beam.beam import ReadAllFromTFRecord, ReadFromTFRecord, ReadFromTFRecordBatched, WriteToTFRecord
    from tfrecord_beam.index import default_index_path

    data = payloads(300)
    with beam.Pipeline(options=PipelineOptions(bucket.flags)) as p:
        _ = p | beam.Create(data) | WriteToTFRecord(bucket.uri("w/t"), file_name_suffix=suffix, num_shards=2)
    shards = [f"t-0000{k}-of-00002{suffix}" for k in range(2)]
    assert bucket.keys("w/") == sorted(shards + [default_index_path(n) for n in shards])  # nothing else
    with beam.Pipeline(options=PipelineOptions(bucket.flags)) as p:
        assert_that(p | "Read" >> ReadFromTFRecord(bucket.uri("w/t-*"), min_bundle_size=256), equal_to(data))
        batched = p | "Batched" >> ReadFromTFRecordBatched(bucket.uri("w/t-*"), min_bundle_size=256)
        assert_that(batched | beam.FlatMap(lambda batch: batch), equal_to(data), label="BatchedRecords")
        every = p | beam.Create([bucket.uri(f"w/{n}") for n in shards]) | ReadAllFromTFRecord(min_bundle_size=256)
        assert_that(every, equal_to(data), label="AllRecords")


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
    assert bucket.keys("out/") == sorted(["_CORRUPT.r.jsonl", "_MANIFEST.r.json"] + shard_names("r", 2))
    got = check_manifest(bucket, "out/_MANIFEST.r.json")
    kept = [p for i, p in enumerate(data) if i not in (50, 150)]
    assert sorted(got) == sorted(kept) and (shuffle or got == kept)
    letters = [json.loads(line) for line in bucket.get("out/_CORRUPT.r.jsonl").decode().splitlines()]
    assert [(d["file"], d["offset"]) for d in letters] == [
        (bucket.uri("bad/a.tfrecord"), offsets[k]) for k in (50, 150)
    ]


def test_read_from_tfrecord_splits_block_gzip_on_s3(bucket, tmp_path):
    """A block-gzip file and its index on S3: ReadFromTFRecord splits it by its gzip members,
    and every member is opened through Beam's FileSystems (the trap sees nothing)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from tfrecord_beam import blockgzip
    from tfrecord_beam.beam import ReadFromTFRecord

    data = [b"rec-%04d-" % i + b"z" * (i * 13 % 200) for i in range(400)]
    local = tmp_path / "a.tfrecord.gz"
    with RecordWriter(str(local), index_path=True, block_bytes=1500) as writer:
        writer.write_many(data)
    assert len(blockgzip.member_table_for(str(local))) > 10
    bucket.put("bg/a.tfrecord.gz", local.read_bytes())
    bucket.put("bg/a.tfrecord.gz.tfindex", (tmp_path / "a.tfrecord.gz.tfindex").read_bytes())
    with beam.Pipeline(options=PipelineOptions(bucket.flags)) as p:
        assert_that(p | ReadFromTFRecord(bucket.uri("bg/a.tfrecord.gz"), min_bundle_size=1000), equal_to(data))


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

    class AnsweringTrap(TrapEndpoint):
        def _serve(self) -> None:
            while not self._stop.is_set():
                try:
                    conn, _ = self._sock.accept()
                except OSError:
                    continue
                self.connections += 1
                with conn:
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

    trap = AnsweringTrap()
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
    """The attack sweep's glob-named outputs (issue 22) on an object store: `*` replaced with
    --overwrite leaves output `b` whole, and `a[x]` commits, releases its lock and is seen
    as there by the next run."""
    from pipelines import reshard

    upload_inputs(bucket, "in", [4, 5])

    def run(prefix: str, shards: int, *extra: str):
        argv = ["--input", bucket.uri("in/*.tfrecord"), "--output_prefix", bucket.uri(prefix), "--num_shards"]
        return run_job(reshard.main, [*argv, str(shards), *extra, *bucket.flags], capsys)

    for prefix, shards, extra in [("g/b", 1, ()), ("g/*", 2, ()), ("g/*", 1, ("--overwrite",)), ("g/a[x]", 1, ())]:
        code, _, err = run(prefix, shards, *extra)
        assert code == 0, (prefix, err)
    assert bucket.keys("g/") == sorted(
        ["_MANIFEST.b.json", "_MANIFEST.*.json", "_MANIFEST.a[x].json"]
        + shard_names("b", 1)
        + shard_names("*", 1)
        + shard_names("a[x]", 1)
    )
    code, _, err = run("g/a[x]", 1)
    assert code == 1 and "another run is there" in err
