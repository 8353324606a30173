"""A `FaultProxy` in a process of its own, for clients that hold the GIL while they wait on the
network: pyarrow's GCS file reads (`read_at`) do, so a proxy thread in the reading process
never gets to answer and the read hangs (seen with fake-gcs-server; pyarrow's S3 reads release
it, and the S3 tests keep their in-process proxy).

The child logs each request it passes on as a JSON line (method, path, Range header) in a file
the parent reads: `requests` and `ranged_gets` as on `FaultProxy`. With `mend_batch` it also
applies `gcsserver.add_batch_content_ids`. No faults: the GCS tests only count.

Run as `python -m helpers.proxyproc UPSTREAM LOG [--mend-batch]`: prints host:port, serves until
killed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .faultproxy import FaultProxy
from .processes import end_process

HERE = Path(__file__).resolve().parent


class ProcessProxy:
    """`python -m helpers.proxyproc` started and stopped from here."""

    def __init__(self, upstream: str, log: Path, mend_batch: bool = False) -> None:
        self.log = log
        args = [sys.executable, "-m", "helpers.proxyproc", upstream, str(log)] + (
            ["--mend-batch"] if mend_batch else []
        )
        self.process = subprocess.Popen(args, cwd=HERE.parent, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.host_port = self.process.stdout.readline().strip()
        if not self.host_port:
            self.stop()
            raise RuntimeError(f"the proxy to {upstream} did not start")

    @property
    def requests(self) -> List[Tuple[str, str, Optional[str]]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [tuple(json.loads(line)) for line in lines]  # type: ignore[misc]

    def ranged_gets(self, name: str = ".tfrecord") -> List[str]:
        """The Range headers of the GET requests for objects whose name holds `name`."""
        return [r for m, p, r in self.requests if m == "GET" and r is not None and name in p.split("?")[0]]

    def stop(self) -> None:
        end_process(self.process)


def _serve(upstream: str, log_path: str, mend_batch: bool) -> None:
    from .gcsserver import add_batch_content_ids

    log = open(log_path, "a", buffering=1)

    def rewrite(method: str, path: str, headers: Dict[str, str], body: Optional[bytes]):
        span = next((v for k, v in headers.items() if k.lower() == "range"), None)
        log.write(json.dumps([method, path, span]) + "\n")
        return add_batch_content_ids(method, path, headers, body) if mend_batch else (headers, body)

    with FaultProxy(upstream, rewrite=rewrite) as proxy:
        print(proxy.host_port, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], "--mend-batch" in sys.argv[3:])
