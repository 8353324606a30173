"""The emulated link of the object-store benchmark (issue 24, item 5): tests/helpers/netlink.py.

The S3 server behind the link answers no faster than the link allows (a round trip of at least
twice the one-way delay; 50 MiB no faster than the rate), returns the bytes unchanged, its access log counts
the requests, and `stop()` leaves no namespace, veth or process behind. Both forms are tested:
the network namespace (where this process may make one: root with iproute2) and the loopback
proxy alone.
"""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from helpers import netlink

pytestmark = pytest.mark.slow

MODES = ["proxy", "netns"]
BIG = 50 << 20
# Slower than the benchmark's link (10 ms, 1 Gbit/s) so the bounds cannot be met without it:
# on this project's loaded 2-core VM a 50 MiB GET on plain loopback already takes ~0.45 s.
DELAY = 0.025
RATE = 250e6


def _start(mode: str, tmp_path) -> netlink.EmulatedLink:
    if mode == "netns" and not netlink.netns_possible():
        pytest.skip("network namespaces need root and iproute2 (`ip`, `tc`); the proxy form covers the rest")
    return netlink.EmulatedLink(tmp_path, delay=DELAY, rate_bps=RATE, use_netns=(mode == "netns")).start()


@pytest.mark.parametrize("mode", MODES)
def test_the_link_delays_and_limits_the_rate_and_counts_requests(mode, tmp_path):
    link = _start(mode, tmp_path)
    try:
        assert link.mechanism.startswith("server in network namespace") == (mode == "netns"), link.mechanism
        client = link.client_server.client()
        client.create_bucket(Bucket="linktest")
        data = os.urandom(BIG)
        (tmp_path / "buckets" / "linktest" / "big.bin").write_bytes(data)  # the posix backend's own file
        before = link.requests()

        rtts = []
        for _ in range(5):
            start = time.perf_counter()
            client.head_object(Bucket="linktest", Key="big.bin")
            rtts.append(time.perf_counter() - start)
        # a request and its answer cross the link once each way
        assert min(rtts) >= 2 * DELAY, rtts

        start = time.perf_counter()
        got = client.get_object(Bucket="linktest", Key="big.bin")["Body"].read()
        seconds = time.perf_counter() - start
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        # 50 MiB at 250 Mbit/s is 1.68 s on the wire alone
        assert seconds >= BIG * 8 / RATE * 0.95, seconds

        deadline = time.monotonic() + 10  # the log is written as each request ends
        while (counts := link.requests() - before)["s3_GetObject"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert counts["s3_HeadObject"] == 5 and counts["s3_GetObject"] == 1, counts
    finally:
        link.stop()
    assert link.leftovers() == []


@pytest.mark.parametrize("mode", MODES)
def test_stop_removes_the_namespace_and_the_processes(mode, tmp_path):
    link = _start(mode, tmp_path)
    pids = [p.pid for p in (link.proxy, link.server and link.server.process) if p is not None]
    assert pids and all(os.path.exists(f"/proc/{pid}") for pid in pids)
    if mode == "netns":
        assert link.netns in netlink.namespaces() and link.veth[0] in netlink.links()
    link.stop()
    assert link.leftovers() == []
    assert link.netns not in netlink.namespaces()
    assert link.veth[0] not in netlink.links()
    for pid in pids:  # reaped, not zombies: /proc has no entry
        assert not os.path.exists(f"/proc/{pid}"), pid


def test_a_failed_start_cleans_up(tmp_path, monkeypatch):
    """A server that cannot start (here: its binary is missing) leaves no namespace behind."""
    if not netlink.netns_possible():
        pytest.skip("network namespaces need root and iproute2")

    def no_binary():
        raise RuntimeError("no versitygw here")

    monkeypatch.setattr(netlink.s3server, "binary", no_binary)
    link = netlink.EmulatedLink(tmp_path, use_netns=True)
    with pytest.raises(RuntimeError, match="no versitygw here"):
        link.start()
    assert link.leftovers() == []
    assert link.netns not in netlink.namespaces()


def test_requests_are_counted_by_operation(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        "k b [02/December/2026:02:55:02 +0000] 127.0.0.1 k ID1 s3_GetObject x /b/x 206 - 0 0 1 1 -\n"
        "k b [02/December/2026:02:55:02 +0000] 127.0.0.1 k ID2 s3_GetObject x /b/x 206 - 0 0 1 1 -\n"
        "k b [02/December/2026:02:55:02 +0000] 127.0.0.1 k ID3 s3_HeadObject x /b/x 200 - 0 0 1 1 -\n"
    )
    assert netlink.count_requests(log) == {"s3_GetObject": 2, "s3_HeadObject": 1}
    assert netlink.count_requests(tmp_path / "missing.log") == {}


@pytest.mark.parametrize("mode", MODES)
def test_the_link_is_a_20ms_round_trip_and_carries_bulk_at_its_rate(mode, tmp_path):
    """The benchmark's delay (10 ms each way): a warm request's round trip is ~20 ms, not
    more (the delay is added once per direction, not per read call), and a bulk GET runs near
    the link's rate (the emulation's own CPU does not slow it): from both sides."""
    delay, rate = 0.010, 250e6
    if mode == "netns" and not netlink.netns_possible():
        pytest.skip("network namespaces need root and iproute2 (`ip`, `tc`); the proxy form covers the rest")
    link = netlink.EmulatedLink(tmp_path, delay=delay, rate_bps=rate, use_netns=(mode == "netns")).start()
    try:
        client = link.client_server.client()
        client.create_bucket(Bucket="rtt")
        (tmp_path / "buckets" / "rtt" / "big.bin").write_bytes(os.urandom(BIG))
        direct = link.server.client()  # the same server without the delay (the machine's own time)

        def rtt(c) -> float:
            c.head_object(Bucket="rtt", Key="big.bin")  # the connection is open from here on
            times = []
            for _ in range(15):
                start = time.perf_counter()
                c.head_object(Bucket="rtt", Key="big.bin")
                times.append(time.perf_counter() - start)
            return min(times)

        through, alone = rtt(client), rtt(direct)
        # the minimum of 15: on this loaded VM a single request alone moves between 5 and 100 ms
        assert 2 * delay <= through <= alone + 2 * delay + 0.025, (through, alone)

        def bulk(c) -> float:
            start = time.perf_counter()
            body = c.get_object(Bucket="rtt", Key="big.bin")["Body"].read()
            assert len(body) == BIG
            return time.perf_counter() - start

        # the wire time, or the machine's own time when that is longer (a loaded 2-core VM moves
        # 50 MiB through S3 in 0.5-1.5 s alone), and not more
        wire = BIG * 8 / rate
        # the kernel's tbf paces at the rate; the proxy's own pacing (no namespace: sleeps in
        # Python on a loaded VM) reaches 60-65% of it
        slack = 1.3 if mode == "netns" else 1 / 0.55
        # The better of two GETs each way (the machine is shared), taken only when needed: a
        # first GET through the link within the wire time's bound meets the bound whatever the
        # machine's own time, so the other three (each 1.7 s of waiting through the link) would
        # change nothing.
        through, alone = bulk(client), None
        if through > wire * slack + 2 * delay:
            through, alone = min(through, bulk(client)), min(bulk(direct), bulk(direct))
        bound = max(wire, alone or 0.0) * slack + 2 * delay
        assert wire * 0.95 <= through <= bound, (through, alone, wire)
    finally:
        link.stop()
    assert link.leftovers() == []


def test_the_proxy_delays_each_byte_once_whatever_the_writes():
    """Raw TCP through the proxy: a server's 40 small writes 2 ms apart arrive spread as they
    were sent, one delay later (a delay per read call would add up to 40 delays: 1.0 s)."""
    import socket
    import subprocess
    import sys
    import threading

    delay = 0.025  # 4 delays plus a loaded machine's slack stay far below 40 delays

    def attempt():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        sent = []

        def serve():
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.recv(1)
            start = time.perf_counter()
            for k in range(40):
                if k:
                    time.sleep(0.002)
                conn.sendall(b"x" * 100)
            # 78 ms, more on a loaded machine; taken at the last write (a sleep after it, which
            # a loaded machine stretches to 10-15 ms, held no byte back and made the excess short)
            sent.append(time.perf_counter() - start)
            conn.close()

        threading.Thread(target=serve, daemon=True).start()
        proxy = subprocess.Popen(
            [
                sys.executable,
                str(netlink.PROXY),
                "--target",
                f"127.0.0.1:{listener.getsockname()[1]}",
                "--delay-ms",
                str(round(delay * 1000)),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            port = int(proxy.stdout.readline().split()[1])
            start = time.perf_counter()  # the emulated handshake's round trip runs from the accept
            with socket.create_connection(("127.0.0.1", port)) as conn:
                conn.sendall(b"x")
                got = 0
                while True:
                    data = conn.recv(1 << 16)
                    if not data:
                        break
                    got += len(data)
                seconds = time.perf_counter() - start
        finally:
            proxy.terminate()
            proxy.wait()
            listener.close()
        assert got == 4000
        return seconds - sent[0]  # the wait beyond the server's own sending time

    # handshake round trip + the request + the answer, one delay each (4 delays: 0.1 s), and 0.3 s
    # of slack; 40 delays would be 1.0 s. Best of three: a run is slowed, never sped up, by the
    # other processes on the machine (at load 4-15 runs took 0.16-0.58 s beyond their sends).
    excess = []
    for _ in range(3):
        excess.append(attempt())
        assert excess[-1] >= 4 * delay, excess
        if excess[-1] <= 4 * delay + 0.3:
            break
    assert min(excess) <= 4 * delay + 0.3, excess
