"""A real S3-protocol server on loopback for the object-store tests (issue 21, item 5).

`runners/s3.sh` builds versitygw into the cache and, with `start`, runs it on 127.0.0.1:9300
and writes `.runners/state/s3.env`. Tests use that server when it runs; otherwise they start
their own from the cached binary on a free port (building it first through `runners/s3.sh
build` when it is not cached), for the session. Each test gets a fresh bucket.

`TrapEndpoint` is a listener that counts connections: its URL goes into AWS_ENDPOINT_URL and
AWS_ENDPOINT_URL_S3, so any code that ignores Beam's `--s3_endpoint_url` (pyarrow, a boto3
client built from the environment) connects there, and the test sees it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence

from .processes import end_process

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "runners" / "s3.sh"
STATE = ROOT / ".runners" / "state" / "s3.env"


def read_env_file(path: Path) -> Dict[str, str]:
    """The KEY=VALUE lines of a runner state file (values may be shell-quoted)."""
    out: Dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            words = shlex.split(value)
            out[key.strip()] = words[0] if len(words) == 1 else " ".join(words)
    return out


def answers(endpoint: str, timeout: float = 2.0) -> bool:
    """Whether an HTTP server answers at `endpoint` (any status: S3 says 403 unsigned)."""
    try:
        urllib.request.urlopen(endpoint + "/", timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    """Where the server listens and how to sign in; `process` is set when a test started it."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    process: Optional[subprocess.Popen] = None

    @property
    def host_port(self) -> str:
        return self.endpoint.split("://", 1)[1]

    @property
    def beam_flags(self) -> List[str]:
        """Beam's S3 flags for this server: all a job needs (no AWS_* environment)."""
        return [
            f"--s3_endpoint_url={self.endpoint}",
            f"--s3_access_key_id={self.access_key}",
            f"--s3_secret_access_key={self.secret_key}",
            f"--s3_region_name={self.region}",
        ]

    @property
    def query(self) -> str:
        """The URI query string the core's pyarrow layer needs for this server (the keys come
        from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: `reader_environment`)."""
        return f"?endpoint_override={self.host_port}&scheme=http&region={self.region}"

    def reader_environment(self) -> Dict[str, str]:
        """The keys as readers outside Beam (the CLI, torch, pyarrow) take them."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def client(self):
        """A boto3 client with explicit endpoint and keys (no environment is read for them)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def stop(self) -> None:
        end_process(self.process)


def from_state(path: Path = STATE) -> Optional[S3Server]:
    """The server `runners/s3.sh start` left running, or None (no state, or it does not answer)."""
    if not path.exists():
        return None
    env = read_env_file(path)
    server = S3Server(env["S3_ENDPOINT"], env["S3_ACCESS_KEY"], env["S3_SECRET_KEY"], env.get("S3_REGION", "us-east-1"))
    return server if answers(server.endpoint) else None


def binary() -> Path:
    """The cached versitygw binary (built by `runners/s3.sh build` when missing)."""
    out = subprocess.run(["bash", str(SCRIPT), "binary"], capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip())
    if not path.exists():
        build = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True, timeout=1800)
        if build.returncode != 0 or not path.exists():
            raise RuntimeError(f"runners/s3.sh build failed ({build.returncode}):\n{build.stderr[-3000:]}")
    return path


def start_local(
    data_dir: Path,
    port: Optional[int] = None,
    *,
    host: str = "127.0.0.1",
    prefix: Sequence[str] = (),
    access_log: Optional[Path] = None,
    log_name: str = "versitygw.log",
) -> S3Server:
    """Start versitygw (posix backend, metadata in sidecar files) on a free loopback port.

    `prefix` runs it under another command (`ip netns exec NS`: the emulated link, helpers/
    netlink.py) listening on `host`; `access_log` makes it log one line per request there
    (the benchmark counts requests from it). Several servers may share one `data_dir`.
    `--keep-alive`: as S3 itself, the server keeps a client's connection open between requests
    (versitygw's default answers each with `Connection: close`: through the emulated link every
    request then paid a new connection's round trip, 40 ms a request instead of 20).
    """
    port = port or free_port()
    for sub in ("buckets", "meta"):
        (data_dir / sub).mkdir(parents=True, exist_ok=True)
    server = S3Server(f"http://{host}:{port}", "tfrbtest", "tfrbtestsecret0123456789")
    env = dict(os.environ, ROOT_ACCESS_KEY=server.access_key, ROOT_SECRET_KEY=server.secret_key)
    logging = ["--access-log", str(access_log), "--quiet"] if access_log is not None else []
    log = open(data_dir / log_name, "wb")
    server.process = subprocess.Popen(
        list(prefix)
        + [str(binary()), "--port", f"{host}:{port}", "--region", server.region, "--keep-alive"]
        + logging
        + ["posix", "--sidecar", str(data_dir / "meta"), str(data_dir / "buckets")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    log.close()
    deadline = time.monotonic() + 20
    while not answers(server.endpoint, 0.5):
        if server.process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"versitygw did not start: {(data_dir / log_name).read_text()[-2000:]}")
        time.sleep(0.05)
    return server


def new_bucket(server: S3Server, client=None) -> str:
    """Create a bucket with a fresh name and return the name."""
    name = f"t-{uuid.uuid4().hex[:20]}"
    (client or server.client()).create_bucket(Bucket=name)
    return name


def remove_bucket(client, bucket: str) -> None:
    """Delete a bucket and every object in it (test buckets do not pile up on the server)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        found = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if found:
            client.delete_objects(Bucket=bucket, Delete={"Objects": found})
    client.delete_bucket(Bucket=bucket)


def keys(client, bucket: str, prefix: str = "") -> List[str]:
    """Every object key under `prefix` (relative to it), sorted; directory markers too."""
    out: List[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend(o["Key"][len(prefix) :] for o in page.get("Contents", []))
    return sorted(out)


class TrapEndpoint:
    """A loopback listener that accepts and counts connections and answers nothing useful: it
    closes each (the caller fails fast), or hands it to `answer` (say, a 403 a client does not
    retry)."""

    def __init__(self, answer: Optional[Callable[[socket.socket], None]] = None) -> None:
        self._answer = answer
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                if self._answer is not None:
                    self._answer(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


# The environment a share-nothing test runs in: no credentials or endpoint from AWS_*
# variables or files, the instance-metadata lookup off (it would leave loopback), and the trap.
def trap_environment(trap: TrapEndpoint, home: Path) -> Dict[str, Optional[str]]:
    """Environment changes (None: unset) that make any S3 access outside Beam's flags visible."""
    changes: Dict[str, Optional[str]] = {k: None for k in os.environ if k.startswith("AWS_")}
    changes.update(
        {
            "AWS_ENDPOINT_URL": trap.url,
            "AWS_ENDPOINT_URL_S3": trap.url,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(home / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        }
    )
    return changes


# -- what the tests on the server share (tests/remote/test_s3_server.py, test_s3.py) ------------


@dataclass
class Bucket:
    """One test's bucket on the server, with what a test needs to reach it (the `bucket`
    fixture of the S3 test modules: `s3_server`, `s3_bucket` and `s3_trap` together)."""

    server: S3Server
    name: str
    client: Any
    monkeypatch: "pytest.MonkeyPatch"

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
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
        """Beam's flags for a job here: the server's --s3_* flags and the in-process runner."""
        from .jobs import FAST

        return self.server.beam_flags + FAST


def framed(records: List[bytes], compression: Optional[str] = None) -> bytes:
    """The bytes of a TFRecord file holding `records`."""
    from tfrecord_beam.records import RecordWriter

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "f.tfrecord")
        with RecordWriter(path, compression) as writer:
            writer.write_many(records)
        with open(path, "rb") as handle:
            return handle.read()


def upload_inputs(bucket: Bucket, prefix: str, counts: List[int], tag: int = 0, suffix: str = ".tfrecord") -> list:
    """Files PREFIX/d-K.tfrecord with counts[K] records; all records written, in order."""
    from .jobs import payloads

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
    from tfrecord_beam.records import RecordReader

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
    """The data files (and indexes) of output NAME with `shards` shards."""
    out = []
    for k in range(shards):
        out.append(f"{name}-{k:05d}-of-{shards:05d}{suffix}")
        if index:
            out.append(f"{name}-{k:05d}-of-{shards:05d}.tfindex")
    return out
