"""A real GCS-protocol server on loopback for the gs:// tests: fake-gcs-server.

`runners/gcs.sh build` builds it through the Go module proxy into the cache (the fixture runs it
when the binary is missing: the first build takes 5-15 minutes, a cold cache on a fresh machine
included); `runners/gcs.sh start` runs one on 127.0.0.1:9310 and writes `.runners/state/gcs.env`.
Tests use that server when it runs; otherwise they start their own on a free port, with its
filesystem backend in a tmp dir, for the session. Each test gets a fresh bucket.

Both layers reach it the way a user points them at any GCS endpoint, nothing patched:

* the core and torch readers (pyarrow's GcsFileSystem): `STORAGE_EMULATOR_HOST`, or the URI's
  query string (`?endpoint_override=HOST:PORT&scheme=http&anonymous=true`; `GcsServer.query`);
* Beam's gs:// filesystem (apache_beam.io.gcp.gcsio on google-cloud-storage):
  `STORAGE_EMULATOR_HOST`, read by google-cloud-storage's Client.

fake-gcs-server lacks one thing Beam needs: it skips the parts of a batch request
(`POST /batch/storage/v1`) that carry no Content-ID header (fakestorage/server.go,
handleBatchCall: "missing content ID, skip") and answers an empty multipart, while GCS takes
them (Content-ID is optional in its batch format) and google-cloud-storage sends none; so every
Beam delete and rename on gs:// (gcsio.delete_batch / copy_batch) failed with "Bad response:
not multi-part". `mend` puts a proxy in front of the server that numbers such parts
(`add_batch_content_ids`) and passes everything else on unchanged: the clients, Beam and
google-cloud-storage run as they would against GCS.

`environment` also gives Beam credentials from a file: without any, Beam's credential lookup
(google.auth.default under Beam's retry, 4 retries with backoff) takes about 35 s per process
before it connects anonymously (measured), and probes the GCE metadata server. The file holds an
access token valid until 2099, so nothing ever refreshes it (a refresh would go to Google); the
server ignores the Authorization header. The metadata server's address points at a `TrapEndpoint`
that must never be contacted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from .processes import end_process
from .proxyproc import ProcessProxy
from .s3server import TrapEndpoint, free_port, read_env_file

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "runners" / "gcs.sh"
STATE = ROOT / ".runners" / "state" / "gcs.env"
BUILD_TIMEOUT_S = 1800


def answers(endpoint: str, timeout: float = 2.0) -> bool:
    """Whether a GCS JSON API answers at `endpoint` (fake-gcs-server lists buckets unsigned)."""
    try:
        with urllib.request.urlopen(endpoint + "/storage/v1/b", timeout=timeout) as answer:
            return answer.status == 200
    except OSError:
        return False


@dataclass
class GcsServer:
    """Where the server listens; `process` is set when a test started it, `shim` when `mend`
    put its proxy in front (then `endpoint` is the proxy's)."""

    endpoint: str
    process: Optional[subprocess.Popen] = None
    shim: Optional[ProcessProxy] = None

    @property
    def host_port(self) -> str:
        return self.endpoint.split("://", 1)[1]

    @property
    def query(self) -> str:
        """The URI query string that points the core's pyarrow layer at this server."""
        return f"?endpoint_override={self.host_port}&scheme=http&anonymous=true"

    # The JSON API, straight (urllib): the tests' own view of the bucket, independent of the
    # layers under test.
    def _call(self, method: str, path: str, data: Optional[bytes] = None, content_type: Optional[str] = None):
        request = urllib.request.Request(self.endpoint + path, data=data, method=method)
        if content_type:
            request.add_header("Content-Type", content_type)
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    def create_bucket(self, name: str) -> None:
        self._call("POST", "/storage/v1/b?project=tfrb-test", json.dumps({"name": name}).encode(), "application/json")

    def put(self, bucket: str, key: str, data: bytes) -> None:
        name = urllib.parse.quote(key, safe="")
        self._call(
            "POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}", data, "application/octet-stream"
        )

    def get(self, bucket: str, key: str) -> bytes:
        name = urllib.parse.quote(key, safe="")
        with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b/{bucket}/o/{name}?alt=media", timeout=30) as answer:
            return answer.read()

    def delete(self, bucket: str, key: str) -> None:
        self._call("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}")

    def keys(self, bucket: str, prefix: str = "") -> List[str]:
        """Every object name under `prefix` (relative to it), sorted."""
        out: List[str] = []
        token = ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, **({"pageToken": token} if token else {})})
            page = self._call("GET", f"/storage/v1/b/{bucket}/o?{query}") or {}
            out.extend(item["name"][len(prefix) :] for item in page.get("items", []))
            token = page.get("nextPageToken", "")
            if not token:
                return sorted(out)

    def remove_bucket(self, bucket: str) -> None:
        for key in self.keys(bucket):
            self.delete(bucket, key)
        self._call("DELETE", f"/storage/v1/b/{bucket}")

    def stop(self) -> None:
        if self.shim is not None:
            self.shim.stop()
            self.shim = None
        end_process(self.process)


def from_state(path: Path = STATE) -> Optional[GcsServer]:
    """The server `runners/gcs.sh start` left running, or None (no state, or it does not answer)."""
    if not path.exists():
        return None
    server = GcsServer(read_env_file(path)["GCS_ENDPOINT"])
    return server if answers(server.endpoint) else None


def binary() -> Path:
    """The cached fake-gcs-server binary, built by `runners/gcs.sh build` (through the Go module
    proxy) when missing. A failed build is a RuntimeError with the script's output: the gs://
    tests fail, they are never skipped."""
    out = subprocess.run(["bash", str(SCRIPT), "binary"], capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip())
    if not path.exists():
        try:
            build = subprocess.run(
                ["bash", str(SCRIPT), "build"], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"runners/gcs.sh build: fake-gcs-server not built in {BUILD_TIMEOUT_S} s") from None
        if build.returncode != 0 or not path.exists():
            raise RuntimeError(
                f"runners/gcs.sh build failed (exit {build.returncode}); the gs:// tests need fake-gcs-server, "
                f"built with go through the Go module proxy:\n{build.stderr[-3000:]}"
            )
    return path


def start_local(data_dir: Path, port: Optional[int] = None, host: str = "127.0.0.1") -> GcsServer:
    """Start fake-gcs-server (http, filesystem backend in `data_dir`) on a free loopback port."""
    port = port or free_port()
    endpoint = f"http://{host}:{port}"
    server = GcsServer(endpoint)
    (data_dir / "storage").mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "fake-gcs-server.log"
    log = open(log_path, "wb")
    server.process = subprocess.Popen(
        [str(binary()), "-scheme", "http", "-host", host, "-port", str(port)]
        + ["-public-host", f"{host}:{port}", "-external-url", endpoint]
        + ["-backend", "filesystem", "-filesystem-root", str(data_dir / "storage"), "-log-level", "warn"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    deadline = time.monotonic() + 30
    while not answers(endpoint, 0.5):
        if server.process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"fake-gcs-server did not start on {endpoint}: {log_path.read_text()[-2000:]}")
        time.sleep(0.05)
    return server


def add_batch_content_ids(method: str, path: str, headers: Dict[str, str], body: Optional[bytes]):
    """A batch request with `Content-ID: <item-N>` added to each part that has none (see the
    module's docstring); any other request unchanged."""
    if method != "POST" or not path.startswith("/batch/") or not body:
        return headers, body
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if found is None:
        return headers, body
    delimiter = b"--" + found[1].encode()
    pieces = body.split(delimiter)  # preamble, the parts, then "--" and the epilogue
    for n in range(1, len(pieces) - 1):
        piece = pieces[n]
        newline = b"\r\n" if piece.startswith(b"\r\n") else b"\n"
        head, blank, rest = piece[len(newline) :].partition(newline + newline)
        if not re.search(rb"(?im)^content-id:", head):
            head += newline + b"Content-ID: <item-%d>" % n
        pieces[n] = newline + head + blank + rest
    body = delimiter.join(pieces)
    headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    headers["Content-Length"] = str(len(body))
    return headers, body


def mend(server: GcsServer, log: Path) -> GcsServer:
    """`server` behind a proxy (in a process of its own: `proxyproc`) that mends its batch
    requests (`add_batch_content_ids`); `log` lists the requests it passed on."""
    shim = ProcessProxy(server.host_port, log, mend_batch=True)
    return GcsServer(f"http://{shim.host_port}", server.process, shim)


def new_bucket(server: GcsServer) -> str:
    """Create a bucket with a fresh name and return the name."""
    name = f"t-{uuid.uuid4().hex[:20]}"
    server.create_bucket(name)
    return name


FAR_FUTURE = "2099-01-01T00:00:00Z"


def environment(server: GcsServer, trap: TrapEndpoint, home: Path) -> Dict[str, Optional[str]]:
    """Environment changes (None: unset) that point both layers at `server` (see the module's
    docstring): STORAGE_EMULATOR_HOST, a credentials file that never needs a refresh, no gcloud
    configuration, and the GCE metadata server's address at the trap."""
    credentials = home / "gcs-credentials.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "tfrb-test",
                "client_secret": "tfrb-test",
                "refresh_token": "never-used",
                "token": "tfrb-test-token",
                "expiry": FAR_FUTURE,
            }
        )
    )
    trap_host = trap.url.split("://", 1)[1]
    changes: Dict[str, Optional[str]] = {k: None for k in os.environ if k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_"))}
    changes.update(
        {
            "STORAGE_EMULATOR_HOST": server.endpoint,
            "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
            "GOOGLE_CLOUD_PROJECT": "tfrb-test",
            "CLOUDSDK_CONFIG": str(home / "no-gcloud-config"),
            "NO_GCE_CHECK": "true",
            "GCE_METADATA_HOST": trap_host,
            "GCE_METADATA_ROOT": trap_host,
            "GCE_METADATA_IP": trap_host,
        }
    )
    return changes


@dataclass
class GcsBucket:
    """One test's bucket on the session's server, the environment pointing at it."""

    server: GcsServer
    bucket: str

    def uri(self, key: str, via: Optional[str] = None) -> str:
        """`gs://bucket/key`: reached through STORAGE_EMULATOR_HOST, or with `via` (a proxy's
        host:port) through the query string that overrides it."""
        if via is None:
            return f"gs://{self.bucket}/{key}"
        return f"gs://{self.bucket}/{key}" + self.server.query.replace(self.server.host_port, via)

    def upload(self, local: Path, key: str) -> None:
        """Upload a file and its index (when it has one) under `key` and the index's name."""
        from tfrecord_beam._tfindex import default_index_path

        self.server.put(self.bucket, key, local.read_bytes())
        index = Path(default_index_path(str(local)))
        if index.exists():
            self.server.put(self.bucket, default_index_path(key), index.read_bytes())

    def keys(self, prefix: str = "") -> List[str]:
        return self.server.keys(self.bucket, prefix)
