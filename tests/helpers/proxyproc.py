"""A `FaultProxy` in a process of its own, for clients that hold the GIL while they wait on the
network: pyarrow's GCS file reads (`read_at`) do, so a proxy thread in the reading process
never gets to answer and the read hangs (seen with fake-gcs-server; pyarrow's S3 reads release
it, and the S3 tests keep their in-process proxy).

The child logs each request that arrives as a JSON line (method, path, Range header) in a file
the parent reads: `requests` and `ranged_gets` as on `FaultProxy`. With `mend_batch` it also
applies `gcsserver.add_batch_content_ids`. With `faults` (a `RangeFaults`) it answers some
ranged GETs with a fault (`FaultProxy`'s: a status, a stall, a cut) instead of passing them on,
and logs each one it injected (`injected`).

Run as `python -m helpers.proxyproc UPSTREAM LOG [--mend-batch] [--faults JSON]`: prints
host:port, serves until killed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .faultproxy import FaultProxy
from .processes import end_process

HERE = Path(__file__).resolve().parent


@dataclass
class RangeFaults:
    """A fault rule: the first `times` GETs with a Range header for objects whose path holds
    `name` (and, when `start` is set, whose range starts at that byte) get `fault`
    (`("status", 503)`, `("stall", seconds)`, `("cut", bytes)`); the rest pass. With
    `ranged=False` the rule takes the GETs WITHOUT a Range header instead (metadata, listings,
    whole-object reads), with `ranged=None` every GET. `query`, when set, must be part of the
    request's query string (`alt=media`: a GCS download, not its metadata)."""

    fault: Tuple[str, float]
    times: int
    name: str = ".tfrecord"
    start: Optional[int] = None
    ranged: Optional[bool] = True
    query: Optional[str] = None

    def rule(self, log: Any):
        """The `FaultProxy` rule, logging each fault it injects to `log` as a JSON object."""
        lock = threading.Lock()
        hits = [0]
        kind, value = self.fault[0], self.fault[1]
        wanted = None if self.start is None else f"bytes={self.start}-"

        def decide(method: str, path: str, headers: Any):
            span = headers.get("Range")
            if method != "GET" or self.name not in path.split("?")[0]:
                return None
            if self.query is not None and self.query not in path.partition("?")[2]:
                return None
            if self.ranged is not None and (span is not None) != self.ranged:
                return None
            if wanted is not None and not span.startswith(wanted):
                return None
            with lock:
                if hits[0] >= self.times:
                    return None
                hits[0] += 1
                log.write(json.dumps({"fault": [kind, value], "range": span, "path": path, "at": time.time()}) + "\n")
                return (kind, value)

        return decide


class ProcessProxy:
    """`python -m helpers.proxyproc` started and stopped from here."""

    def __init__(
        self, upstream: str, log: Path, mend_batch: bool = False, faults: Optional[RangeFaults] = None
    ) -> None:
        self.log = log
        args = [sys.executable, "-m", "helpers.proxyproc", upstream, str(log)] + (
            ["--mend-batch"] if mend_batch else []
        )
        if faults is not None:
            args += ["--faults", json.dumps(asdict(faults))]
        self.process = subprocess.Popen(args, cwd=HERE.parent, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.host_port = self.process.stdout.readline().strip()
        if not self.host_port:
            self.stop()
            raise RuntimeError(f"the proxy to {upstream} did not start")

    def _lines(self) -> List[Any]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines]

    @property
    def requests(self) -> List[Tuple[str, str, Optional[str]]]:
        """(method, path, Range header) of every request that arrived, faulted ones included."""
        return [tuple(line) for line in self._lines() if isinstance(line, list)]  # type: ignore[misc]

    @property
    def injected(self) -> List[str]:
        """The Range header of each request answered with a fault, in order."""
        return [line["range"] for line in self._lines() if isinstance(line, dict)]

    @property
    def injected_paths(self) -> List[str]:
        """The path (query string included) of each request answered with a fault, in order."""
        return [line["path"] for line in self._lines() if isinstance(line, dict)]

    def ranged_gets(self, name: str = ".tfrecord") -> List[str]:
        """The Range headers of the GET requests for objects whose name holds `name`."""
        return [r for m, p, r in self.requests if m == "GET" and r is not None and name in p.split("?")[0]]

    def stop(self) -> None:
        end_process(self.process)


def _serve(upstream: str, log_path: str, mend_batch: bool, faults: Optional[RangeFaults]) -> None:
    from .gcsserver import add_batch_content_ids

    log = open(log_path, "a", buffering=1)
    lock = threading.Lock()

    class Lines:  # one line at a time from the proxy's threads
        def write(self, text: str) -> None:
            with lock:
                log.write(text)

    lines = Lines()

    def rewrite(method: str, path: str, headers: Dict[str, str], body: Optional[bytes]):
        span = next((v for k, v in headers.items() if k.lower() == "range"), None)
        lines.write(json.dumps([method, path, span]) + "\n")
        return add_batch_content_ids(method, path, headers, body) if mend_batch else (headers, body)

    rule = faults.rule(lines) if faults is not None else None
    with FaultProxy(upstream, rule, rewrite=rewrite) as proxy:
        print(proxy.host_port, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    rest = sys.argv[3:]
    spec = json.loads(rest[rest.index("--faults") + 1]) if "--faults" in rest else None
    _serve(sys.argv[1], sys.argv[2], "--mend-batch" in rest, RangeFaults(**spec) if spec else None)
