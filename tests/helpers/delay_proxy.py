"""A TCP proxy on loopback that adds a one-way delay each direction and, optionally, paces
each direction to a link rate: the emulated link where the kernel has no `tc netem` (issue 24).

    python tests/helpers/delay_proxy.py --target HOST:PORT --delay-ms 10 [--rate-bps 1e9] [--port P]

It prints `READY <port>` once listening. Each byte is delivered `delay` after it left the
sender, plus its serialization time on a link of `rate` shared by every connection in that
direction (one queue per direction, as on a real link: a second stream waits behind the
first). A new connection's first bytes also wait one round trip (the TCP handshake a real
link would cost: here the client's connect completes at once, on loopback). Memory is
bounded: each direction of a connection holds at most `--buffer` bytes in flight, then stops
reading (TCP flow control pushes back on the sender, as a full link would).

Threads with blocking sockets, not asyncio: the copies run without the GIL, and on this
project's loaded 2-core VM an asyncio version carried a third of the bytes per second.
"""

from __future__ import annotations

import argparse
import collections
import socket
import sys
import threading
import time
from typing import Deque, Tuple

CHUNK = 1024 * 1024


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


def pump(src: socket.socket, dst: socket.socket, link: Direction, not_before: float, buffer: int) -> None:
    """Carry bytes from `src` to `dst`, each chunk released at its due time (a writer thread
    releases them while this one reads); at the end, half-close `dst`."""
    queue: Deque[Tuple[float, bytes]] = collections.deque()
    changed = threading.Condition()
    held = 0
    done = False

    def release() -> None:
        nonlocal held
        while True:
            with changed:
                while not queue and not done:
                    changed.wait()
                if not queue:
                    break
                due, data = queue[0]
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
            with changed:
                queue.popleft()
                held -= len(data)
                changed.notify_all()
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    writer = threading.Thread(target=release, daemon=True)
    writer.start()
    while True:
        with changed:
            while held > buffer and writer.is_alive():
                changed.wait(0.1)
        try:
            data = src.recv(CHUNK)
        except OSError:
            data = b""
        if not data or not writer.is_alive():
            break
        due = link.due(len(data), time.monotonic(), not_before)
        with changed:
            queue.append((due, data))
            held += len(data)
            changed.notify_all()
    with changed:
        done = True
        changed.notify_all()
    writer.join()


def connection(client: socket.socket, target: Tuple[str, int], up: Direction, down: Direction, buffer: int) -> None:
    accepted = time.monotonic()
    try:
        server = socket.create_connection(target, timeout=30)
        server.settimeout(None)
    except OSError:
        client.close()
        return
    # the handshake's round trip: a request leaves no earlier than one RTT after connect
    upstream = threading.Thread(target=pump, args=(client, server, up, accepted + 2 * up.delay, buffer), daemon=True)
    upstream.start()
    pump(server, client, down, 0.0, buffer)
    upstream.join()
    client.close()
    server.close()


def serve(target: Tuple[str, int], port: int, delay: float, rate_bps: float, buffer: int) -> None:
    up = Direction(delay, rate_bps)
    down = Direction(delay, rate_bps)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(256)
    print(f"READY {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=connection, args=(client, target, up, down, buffer), daemon=True).start()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--port", type=int, default=0, help="loopback port to listen on (0: a free one)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay, each direction")
    parser.add_argument("--rate-bps", type=float, default=0.0, help="link rate in bit/s each direction (0: unpaced)")
    parser.add_argument("--buffer", type=int, default=4 << 20, help="bytes held per direction per connection")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    try:
        serve((host, int(port)), args.port, args.delay_ms / 1000, args.rate_bps, args.buffer)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
