"""An HTTP proxy on loopback in front of the S3 server that counts requests and injects faults.

The client talks to the proxy as if it were the server (endpoint_override = the proxy): each
request is passed on unchanged (the Host header too, so SigV4 signatures still match) and the
answer passed back, unless `fault(method, path, headers)` says otherwise for that request:

* `("status", 503)`: answer with that status and an S3 error body, without asking the server;
* `("stall", seconds)`: wait that long before doing anything (the client times out first);
* `("cut", n)`: pass the server's headers and only n bytes of the body, then close;
* `("hang", n)`: pass the server's headers and only n bytes of the body, then send nothing
  more, the connection held open until the proxy stops (a server stalling mid-body).

`requests` lists (method, path, Range header) of every request that arrived, faults included;
`served` lists (method, path, body bytes) of every answer the server gave.
`rewrite(method, path, headers, body) -> (headers, body)` may change a request before it is
passed on (helpers/gcsserver.py mends fake-gcs-server's batch requests with it).
"""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

Fault = Optional[Tuple[str, int]]
FaultRule = Callable[[str, str, Any], Fault]  # (method, path, headers: an email.message.Message)
Rewrite = Callable[[str, str, Dict[str, str], Optional[bytes]], Tuple[Dict[str, str], Optional[bytes]]]

_ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
    b"<Message>injected by the test proxy</Message></Error>"
)


class FaultProxy:
    """A threaded proxy to `upstream` ("127.0.0.1:PORT"); use as a context manager."""

    def __init__(self, upstream: str, fault: Optional[FaultRule] = None, rewrite: Optional[Rewrite] = None) -> None:
        self.upstream = upstream
        self.fault: FaultRule = fault or (lambda method, path, headers: None)
        self.rewrite = rewrite
        self.requests: List[Tuple[str, str, Optional[str]]] = []
        self.served: List[Tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # ends the "hang" faults
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY on the client's connection: an answer goes out as two writes (the
            # headers, then the body), and with Nagle's algorithm the second waited for the
            # client's delayed ACK of the first, 40 ms an answer (a gs:// exists() took 90 ms
            # through the proxy, 5 ms with this; each GCS test's requests all pass the proxy)
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host_port = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def ranged_gets(self, name: str = ".tfrecord") -> List[str]:
        """The Range headers of the GET requests seen for objects whose key holds `name`
        (default: the data files, not their indexes)."""
        with self._lock:
            return [r for m, p, r in self.requests if m == "GET" and r is not None and name in p.split("?")[0]]

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        method, path = handler.command, handler.path
        headers = {k: v for k, v in handler.headers.items()}
        body = _read_body(handler)
        if body is not None and "chunked" in handler.headers.get("Transfer-Encoding", ""):
            headers = {k: v for k, v in headers.items() if k.lower() != "transfer-encoding"}
            headers["Content-Length"] = str(len(body))
        if self.rewrite is not None:
            headers, body = self.rewrite(method, path, headers, body)
        with self._lock:
            self.requests.append((method, path, handler.headers.get("Range")))
        fault = self.fault(method, path, handler.headers)  # case-insensitive names
        try:
            if fault is not None and fault[0] == "stall":
                time.sleep(fault[1])
                handler.close_connection = True
                return
            if fault is not None and fault[0] == "status":
                handler.send_response(fault[1])
                handler.send_header("Content-Type", "application/xml")
                handler.send_header("Content-Length", str(len(_ERROR_BODY)))
                handler.end_headers()
                if method != "HEAD":
                    handler.wfile.write(_ERROR_BODY)
                return
            upstream = http.client.HTTPConnection(self.upstream, timeout=60)
            try:
                upstream.request(method, path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
            finally:
                upstream.close()
            with self._lock:
                self.served.append((method, path, len(data)))
            handler.send_response(answer.status, answer.reason)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    handler.send_header(key, value)
            size = answer.getheader("Content-Length") if method == "HEAD" else None
            handler.send_header("Content-Length", size or str(len(data)))
            handler.end_headers()
            if method == "HEAD":
                return
            if fault is not None and fault[0] == "hang":
                handler.wfile.write(data[: fault[1]])
                handler.wfile.flush()
                self._stopping.wait(120)
                handler.close_connection = True
                return
            if fault is not None and fault[0] == "cut":
                handler.wfile.write(data[: fault[1]])
                handler.wfile.flush()
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, OSError):
            handler.close_connection = True


def _read_body(handler: http.server.BaseHTTPRequestHandler) -> Optional[bytes]:
    """A request's body: Content-Length bytes, or the chunks of a chunked one; None if none."""
    if "chunked" in handler.headers.get("Transfer-Encoding", ""):
        parts = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length", "0") or 0)
    return handler.rfile.read(length) if length else None
