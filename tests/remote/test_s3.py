"""Object stores end to end against a real S3-protocol server on loopback: the core
reader/writer with its index through pyarrow.fs (URIs with a query string), the torch dataset,
the CLI, and reshard from s3:// to s3:// through Beam's FileSystems, with the manifest, an
interrupted commit and empty shards. The jobs run on the `s3_server` fixture's versitygw with
the trap of tests/remote/test_s3_server.py (the `bucket` fixture: Beam's --s3_* flags only,
nothing left in the bucket but what is asserted); the core's writer, the torch dataset and the
commit-lock race run on moto's standalone server, started and stopped here (the `s3` fixture;
pyarrow's writer against versitygw failed a CompleteMultipartUpload now and then: "an error
occurred when parsing the HTTP request", in 2 of 4 runs at -n 2)."""

import logging
import os

import pytest
from helpers import zygote
from helpers.jobs import payloads, run_job, summary_json
from helpers.s3server import Bucket, check_manifest, framed, shard_names, upload_inputs

BUCKET = "tfrecord-beam-test"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    """(endpoint URL, the query string pyarrow needs, Beam's S3 flags, a boto3 client) of moto's
    server on loopback, with bucket BUCKET."""
    if os.environ.get("CI"):  # CI installs the test extra: a missing server is a failure there, not a skip
        import boto3
        import moto.server as moto_server
    else:
        moto_server = pytest.importorskip("moto.server", reason="moto[s3] (the test extra) runs the S3 server")
        boto3 = pytest.importorskip("boto3")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        query = f"?endpoint_override={host}:{port}&scheme=http"
        beam = [
            f"--s3_endpoint_url={endpoint}",
            "--s3_access_key_id=test",
            "--s3_secret_access_key=test",
            "--s3_region_name=us-east-1",
        ]
        yield endpoint, query, beam, client
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def keys(client, prefix: str):
    found = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix) :] for o in found if not o["Key"].endswith("/"))  # pyarrow makes "dir/" markers


@pytest.fixture
def bucket(s3_server, s3_bucket, s3_trap, monkeypatch):
    yield Bucket(s3_server, s3_bucket, s3_server.client(), monkeypatch)
    assert s3_trap.connections == 0, "something reached S3 outside Beam's --s3_* flags"


def objects(bucket: Bucket) -> list:
    """Every key in the bucket but the directory markers pyarrow makes ("dir/")."""
    return [k for k in bucket.keys() if not k.endswith("/")]


def test_core_reader_writer_index_glob_and_cli_with_a_query_string(s3, capsys):
    from tfrecord_beam import cli, fs
    from tfrecord_beam.index import default_index_path, load_index, verify_index
    from tfrecord_beam.records import RecordReader, RecordWriter

    _, query, _, client = s3
    data = payloads(50)
    for k in range(2):
        uri = f"s3://{BUCKET}/core/d-{k}.tfrecord{query}"
        assert default_index_path(uri) == f"s3://{BUCKET}/core/d-{k}.tfindex{query}"  # not "...http.tfindex"
        with RecordWriter(uri, index_path=True) as writer:
            writer.write_many(data[k * 25 : (k + 1) * 25])
    assert keys(client, "core/") == ["d-0.tfindex", "d-0.tfrecord", "d-1.tfindex", "d-1.tfrecord"]  # no temporaries
    found = fs.expand(f"s3://{BUCKET}/core/d-*.tfrecord{query}")
    assert found == [f"s3://{BUCKET}/core/d-{k}.tfrecord{query}" for k in range(2)]
    assert [p for f in found for p in RecordReader(f)] == data
    assert len(load_index(default_index_path(found[1]))) == 25
    verify_index(default_index_path(found[0]), found[0])
    assert cli.main(["count", f"s3://{BUCKET}/core/{query}"]) == 0
    assert "50  total" in capsys.readouterr().out


def test_torch_dataset_over_s3_globs(s3):
    pytest.importorskip("torch")
    from tfrecord_beam.records import write_records
    from tfrecord_beam.torch import TFRecordDataset

    _, query, _, _ = s3
    for k in range(3):
        write_records(f"s3://{BUCKET}/torch/t-{k}.tfrecord{query}", payloads(20, start=20 * k), index_path=True)
    ds = TFRecordDataset(
        f"s3://{BUCKET}/torch/t-*.tfrecord{query}",
        f"s3://{BUCKET}/torch/t-*.tfindex{query}",
        {"i": "int"},
        batch_size=16,
    )
    got = sorted(int(i) for w in range(2) for b in ds.iter_worker(w, 2) for i in b["i"][:, 0])
    assert got == list(range(60))


def test_jobs_from_s3_to_s3_with_manifest_and_an_interrupted_commit(bucket, capsys):
    """A reshard s3 -> s3 whose output location holds a commit that a killed run left half
    done (it was replacing a 3-shard output): the job completes that commit, then commits its
    own; the bucket holds its inputs and the new output, nothing else (no staging, no lock),
    and the manifest matches every shard. The earlier outputs are committed here through
    `commit.Output` (what the jobs commit with), not by jobs of their own."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import reshard
    from tfrecord_beam import manifest as mf
    from tfrecord_beam.beam import _fs, commit

    data = upload_inputs(bucket, "in", [120, 80, 100])
    prefix = bucket.uri("rs/r")
    _fs.set_options(PipelineOptions(bucket.flags))  # Beam's FileSystems with the job's options, as in a job

    def stage(output, name: str, records: list) -> mf.ShardEntry:
        staged = output.temp_path(name)
        with _fs.record_writer(staged) as writer:
            writer.write_many(records)
        # its true size: the commit refuses a shard whose size differs from its entry's
        return mf.ShardEntry(name, len(records), _fs.file_size(staged))

    old = commit.Output(prefix, "test", {}, say=lambda m: None)
    old.commit([stage(old, f"r-0000{k}-of-00003.tfrecord", payloads(3, start=3 * k)) for k in range(3)])
    assert objects(bucket) == sorted(
        [f"in/d-{k}.tfrecord" for k in range(3)]
        + ["rs/_MANIFEST.r.json"]
        + [f"rs/r-0000{k}-of-00003.tfrecord" for k in range(3)]
    )

    # An interrupted commit replacing it: staged, journal written, killed after 3 steps.
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, killed inside its commit
        try:
            os.environ[commit._STOP_ENV] = "3"
            commit._steps[0] = 0
            output = commit.Output(prefix, "test", {}, overwrite=True, say=lambda m: None)
            output.commit([stage(output, "r-00000-of-00001.tfrecord", payloads(4))])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert "rs/_MANIFEST.r.json" not in bucket.keys()  # incomplete now, and a reader can tell
    assert any(k.startswith("rs/" + commit.TEMP_PREFIX) for k in bucket.keys())

    args = ["--input", bucket.uri("in/"), "--output_prefix", prefix, "--num_shards", "2", "--overwrite"]
    code, out, err = run_job(reshard.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert "completing the interrupted commit" in err and summary_json(out)["records"] == 300
    assert objects(bucket) == sorted(
        [f"in/d-{k}.tfrecord" for k in range(3)] + ["rs/_MANIFEST.r.json"] + ["rs/" + n for n in shard_names("r", 2)]
    )  # no staging left, no lock
    assert check_manifest(bucket, "rs/_MANIFEST.r.json") == data


def test_empty_shards_on_s3(bucket, capsys):
    """Beam's S3 uploader cannot finish an upload of no bytes: an empty shard is made by one
    PutObject."""
    from pipelines import reshard

    bucket.put("one/a.tfrecord", framed([b"only"]))
    args = ["--input", bucket.uri("one/a.tfrecord"), "--output_prefix", bucket.uri("two/x"), "--num_shards", "2"]
    code, _, err = run_job(reshard.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert bucket.keys() == sorted(
        ["one/a.tfrecord", "two/_MANIFEST.x.json"] + ["two/" + n for n in shard_names("x", 2)]
    )
    sizes = {o["Key"]: o["Size"] for o in bucket.client.list_objects_v2(Bucket=bucket.name, Prefix="two/")["Contents"]}
    assert sorted(v for k, v in sizes.items() if k.endswith(".tfrecord")) == [0, 20]
    assert check_manifest(bucket, "two/_MANIFEST.x.json") == [b"only"]


def test_the_commit_lock_on_s3_has_one_winner(s3, tmp_path):
    """Issue 22 item 2 on an object store: create-if-absent (If-None-Match) is the claim; of
    processes racing for one claim exactly one wins, and a lock leaves nothing behind."""
    import sys
    import time

    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_beam.beam import _fs, _lock

    endpoint, query, beam, client = s3
    _fs.set_options(PipelineOptions(beam))
    path = f"s3://{BUCKET}/lock/claim.json"
    assert _lock.create_exclusive(path, b"first") is True
    assert _lock.create_exclusive(path, b"second") is False
    assert client.get_object(Bucket=BUCKET, Key="lock/claim.json")["Body"].read() == b"first"

    # processes of their own, forked from the worker's zygote (a child forked from this process
    # would share its pooled S3 connections; the zygote has made none), all released at one
    # moment: each says it is ready (imports done, options set) and then opens a FIFO, which
    # blocks until the test opens its other end, once all four are ready (not at a fixed time
    # that had to allow for the slowest start-up on a loaded machine: it was 8 s ahead)
    script = (
        "import os, sys\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "from tfrecord_beam.beam import _fs, _lock\n"
        "_fs.set_options(PipelineOptions(sys.argv[3:]))\n"
        "open(os.path.join(sys.argv[2], f'ready-{os.getpid()}'), 'w').close()\n"
        "open(os.path.join(sys.argv[2], 'go')).close()\n"
        "sys.exit(0 if _lock.create_exclusive(sys.argv[1], b'x') else 1)\n"
    )
    gate = tmp_path / "gate"
    gate.mkdir()
    os.mkfifo(gate / "go")
    racers = [
        zygote.start([sys.executable, "-c", script, f"s3://{BUCKET}/lock/race.json", str(gate)] + beam)
        for _ in range(4)
    ]
    deadline = time.monotonic() + 120
    while len(list(gate.glob("ready-*"))) < len(racers):
        assert time.monotonic() < deadline and all(r.poll() is None for r in racers), [r.output(True) for r in racers]
        time.sleep(0.02)
    with open(gate / "go", "w"):  # open till all have run: one still on its way to its open() gets through
        codes = sorted(r.wait(timeout=120) for r in racers)
    assert codes == [0, 1, 1, 1], [r.output(True) for r in racers]

    notes = []
    lock = _lock.CommitLock(
        f"s3://{BUCKET}/lock", "out", {"host": "h"}, state=lambda r: "alive", describe=str, say=notes.append
    )
    with lock:
        assert lock.generations() == [1]
        other = _lock.CommitLock(
            f"s3://{BUCKET}/lock",
            "out",
            {"host": "h"},
            state=lambda r: "alive",
            describe=str,
            say=notes.append,
            wait=0.3,
        )
        with pytest.raises(_lock.LockError, match="holds the commit lock"):
            other.acquire()
    assert not [k for k in keys(client, "lock/") if k.startswith(_lock.LOCK_PREFIX)]
