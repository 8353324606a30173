"""A TCP proxy on loopback that adds a one-way delay each direction and, optionally, paces
each direction to a link rate: the emulated link where the kernel has no `tc netem` (issue 24).

    python tests/helpers/delay_proxy.py --target HOST:PORT --delay-ms 10 [--rate-bps 1e9] [--port P]

It prints `READY <port>` once listening. Each byte is delivered `delay` after it reached the
proxy (a fixed one-way delay per direction, as a wire has: bytes that arrive together leave
together, whatever the size of the reads that carried them), plus, with a rate, its
serialization time on a link of `rate` shared by every connection in that direction (one
queue per direction: a second stream waits behind the first). A new connection's first bytes
also wait one round trip (the TCP handshake a real link would cost: here the client's connect
completes at once, on loopback). Memory is bounded: each direction of a connection holds at
most `--buffer` bytes in flight (its pipes), then stops reading (TCP flow control pushes back
on the sender, as a full link would).

The bytes never enter Python: they are spliced from the socket into a pipe, which is the
delay line, and from the pipe to the other socket when due (`os.splice`, zero-copy, without
the GIL). A link costs the client host no CPU; a copying proxy cost this project's loaded
2-core VM about a tenth of a core per 40 MB/s, which the benchmark then charged to the reader.
Per connection: `--stats FILE` appends one line per closed connection (bytes each way).
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import select
import socket
import sys
import threading
import time
from typing import Deque, Optional, Tuple

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


class Direction:
    """One direction of the link: its rate and delay, and when its wire is next free."""

    def __init__(self, delay: float, rate_bps: float) -> None:
        self.delay = delay
        self.rate_bps = rate_bps
        self.free_at = 0.0  # monotonic time at which the wire finishes what it already carries
        self._lock = threading.Lock()

    def due(self, nbytes: int, now: float, not_before: float) -> float:
        """When `nbytes` that reached the link at `now` arrive at the far end."""
        start = max(now, not_before)
        if self.rate_bps <= 0:
            return start + self.delay
        with self._lock:
            start = max(start, self.free_at)
            self.free_at = start + nbytes * 8 / self.rate_bps
            return self.free_at + self.delay


def _pipe(buffer: int) -> Tuple[int, int, int]:
    """A pipe as large as `buffer` allows (the kernel caps it at fs/pipe-max-size): (read end,
    write end, capacity)."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, buffer)
    except OSError:
        try:
            with open("/proc/sys/fs/pipe-max-size") as f:
                fcntl.fcntl(w, F_SETPIPE_SZ, min(buffer, int(f.read())))
        except (OSError, ValueError):
            pass
    return r, w, fcntl.fcntl(w, F_GETPIPE_SZ)


def pump(src: socket.socket, dst: socket.socket, link: Direction, not_before: float, buffer: int) -> int:
    """Carry bytes from `src` to `dst` through pipes (the delay line: as many as `buffer` bytes
    need), each batch released at its due time (a writer thread releases them while this one
    reads); at the end, half-close `dst`. Returns the bytes carried."""
    pipes = [_pipe(buffer)]  # more are made as the bytes in flight need them, up to `buffer`
    held = [0]
    queue: Deque[Tuple[float, int, int]] = collections.deque()  # (due, bytes, pipe)
    changed = threading.Condition()
    state = {"done": False, "failed": False, "carried": 0}

    def release() -> None:
        while True:
            with changed:
                while not queue and not state["done"]:
                    changed.wait()
                if not queue:
                    break
                due, nbytes, k = queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                left = nbytes
                while left:
                    moved = os.splice(pipes[k][0], dst.fileno(), left)
                    if moved <= 0:
                        raise OSError("pipe drained early")
                    left -= moved
            except OSError:
                with changed:
                    state["failed"] = True
                    changed.notify_all()
                break
            with changed:
                queue.popleft()
                held[k] -= nbytes
                state["carried"] += nbytes
                changed.notify_all()
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    writer = threading.Thread(target=release, daemon=True)
    writer.start()
    fd = src.fileno()
    k = 0
    try:
        while True:
            with changed:
                while held[k] >= pipes[k][2] and not state["failed"]:
                    if k + 1 == len(pipes) and sum(p[2] for p in pipes) < buffer:
                        pipes.append(_pipe(buffer))  # a longer delay line
                        held.append(0)
                    if held[(k + 1) % len(pipes)] == 0:
                        k = (k + 1) % len(pipes)  # the next pipe is empty: fill it
                    else:
                        changed.wait(0.1)
                if state["failed"]:
                    break
                room = pipes[k][2] - held[k]
            select.select([fd], [], [])  # wait for data without holding pipe space
            try:
                moved = os.splice(fd, pipes[k][1], room)
            except OSError:
                moved = 0
            if moved <= 0:
                break
            due = link.due(moved, time.monotonic(), not_before)
            with changed:
                queue.append((due, moved, k))
                held[k] += moved
                changed.notify_all()
    finally:
        with changed:
            state["done"] = True
            changed.notify_all()
        writer.join()
        for r, w, _ in pipes:
            os.close(r)
            os.close(w)
    return state["carried"]


def connection(
    client: socket.socket, target: Tuple[str, int], up: Direction, down: Direction, buffer: int, stats: Optional[str]
) -> None:
    accepted = time.monotonic()
    try:
        server = socket.create_connection(target, timeout=30)
        server.settimeout(None)
    except OSError:
        client.close()
        return
    carried = [0]

    def upstream_pump() -> None:
        # the handshake's round trip: a request leaves no earlier than one RTT after connect
        carried[0] = pump(client, server, up, accepted + 2 * up.delay, buffer)

    upstream = threading.Thread(target=upstream_pump, daemon=True)
    upstream.start()
    down_bytes = pump(server, client, down, 0.0, buffer)
    upstream.join()
    client.close()
    server.close()
    if stats:
        with open(stats, "a") as f:
            f.write(f"connection up {carried[0]} down {down_bytes}\n")


def serve(target: Tuple[str, int], port: int, delay: float, rate_bps: float, buffer: int, stats: Optional[str]) -> None:
    up = Direction(delay, rate_bps)
    down = Direction(delay, rate_bps)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(256)
    print(f"READY {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=connection, args=(client, target, up, down, buffer, stats), daemon=True).start()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--port", type=int, default=0, help="loopback port to listen on (0: a free one)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay, each direction")
    parser.add_argument("--rate-bps", type=float, default=0.0, help="link rate in bit/s each direction (0: unpaced)")
    parser.add_argument("--buffer", type=int, default=4 << 20, help="bytes held per direction per connection")
    parser.add_argument("--stats", default=None, help="append one line per closed connection to this file")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    try:
        serve((host, int(port)), args.port, args.delay_ms / 1000, args.rate_bps, args.buffer, args.stats)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
