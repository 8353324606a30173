"""The S3-protocol server behind an emulated network link (issue 24, item 5).

`EmulatedLink(data_dir).start()` runs versitygw (tests/helpers/s3server.py) behind a link
with a one-way delay (default 10 ms each way: 20 ms round trip) and a rate (1 Gbit/s):

* where the kernel allows it (root, `ip netns`, veth): the server runs in a network namespace
  of its own, joined to this one by a veth pair. The rate is the kernel's: `tc netem` (delay
  and rate) on both ends of the pair when the kernel has netem, otherwise `tbf` for the rate
  and, for the delay, the delaying proxy (helpers/delay_proxy.py) on loopback in front of the
  pair (a kernel built without CONFIG_NET_SCH_NETEM, as this project's VM, has no in-kernel
  delay).
* otherwise: the server on loopback, and the proxy adds the delay and paces to the rate.

`mechanism` says which, in words. Requests are counted from the server's access log
(`requests()`), not by the client, so a benchmark needs no counter in the code it measures.
`stop()` ends the processes and removes the namespace (and with it the veth pair);
`leftovers()` lists what is still there (the tests assert it is empty).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Counter, List, Optional

from . import s3server

PROXY = Path(__file__).resolve().parent / "delay_proxy.py"
# namespace names: <prefix><pid>-<n> (prefix "tfrb-" unless TFRB_NETNS_PREFIX says another, so
# sessions sharing a machine keep apart); veth ends: tfrb<n><pid>h / ...n
PREFIX = os.environ.get("TFRB_NETNS_PREFIX", "tfrb-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _tc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)


def namespaces() -> List[str]:
    """The names of the network namespaces `ip netns` knows."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def links() -> List[str]:
    """The names of this namespace's network interfaces."""
    out = _ip("-o", "link", "show", check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def netns_possible() -> bool:
    """Whether this process may make namespaces and veth pairs (root with iproute2)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


def remove_stale() -> None:
    """Remove namespaces a crashed earlier run left (its pid no longer alive)."""
    for name in namespaces():
        if name.startswith(PREFIX):
            pid = name[len(PREFIX) :].split("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                _ip("netns", "del", name, check=False)


def count_requests(access_log: Path) -> Counter[str]:
    """{operation: requests} from a versitygw access log (s3_GetObject, s3_HeadObject, ...)."""
    counts: Counter[str] = collections.Counter()
    if access_log.exists():
        for line in access_log.read_text(errors="replace").splitlines():
            op = next((word for word in line.split() if word.startswith("s3_")), None)
            if op is not None:
                counts[op] += 1
    return counts


class EmulatedLink:
    """versitygw over `data_dir` behind a link of `delay` seconds each way and `rate_bps`."""

    _serial = 0

    def __init__(
        self, data_dir: Path, delay: float = 0.010, rate_bps: float = 1e9, use_netns: Optional[bool] = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.delay = delay
        self.rate_bps = rate_bps
        self.use_netns = netns_possible() if use_netns is None else use_netns
        EmulatedLink._serial += 1
        n = EmulatedLink._serial
        self.netns = f"{PREFIX}{os.getpid()}-{n}"
        self.veth = (f"tfrb{n}{os.getpid()}h"[:15], f"tfrb{n}{os.getpid()}n"[:15])
        self.access_log = self.data_dir / f"access-link-{os.getpid()}-{n}.log"
        self.server: Optional[s3server.S3Server] = None
        self.proxy: Optional[subprocess.Popen] = None
        self.endpoint = ""
        self.mechanism = ""
        self._made_netns = False

    # --- start -------------------------------------------------------------------------
    def start(self) -> "EmulatedLink":
        try:
            if self.use_netns:
                self._start_in_namespace()
            else:
                self.server = s3server.start_local(self.data_dir, access_log=self.access_log, log_name="link.log")
                self._start_proxy(self.server.host_port, self.rate_bps)
                self.mechanism = (
                    f"server on loopback; delay {self.delay * 1e3:g} ms each way and rate "
                    f"{self.rate_bps / 1e9:g} Gbit/s by a loopback proxy (no network namespace)"
                )
        except BaseException:
            self.stop()
            raise
        return self

    def _subnet(self) -> str:
        """A 10.213.X.0/30 no route of this machine uses yet."""
        routes = _ip("-4", "route", "show", "table", "all", check=False).stdout
        for k in range(os.getpid() % 200, os.getpid() % 200 + 256):
            net = f"10.213.{k % 256}."
            if net not in routes:
                return net
        raise RuntimeError("no free 10.213.X.0/30 subnet for the emulated link")

    def _start_in_namespace(self) -> None:
        remove_stale()
        host_end, ns_end = self.veth
        net = self._subnet()
        _ip("netns", "add", self.netns)
        self._made_netns = True
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _ip("link", "set", ns_end, "netns", self.netns)
        _ip("addr", "add", f"{net}1/30", "dev", host_end)
        _ip("link", "set", host_end, "up")
        _ip("-n", self.netns, "addr", "add", f"{net}2/30", "dev", ns_end)
        _ip("-n", self.netns, "link", "set", ns_end, "up")
        _ip("-n", self.netns, "link", "set", "lo", "up")
        rate = f"{int(self.rate_bps)}bit"
        delay = f"{self.delay * 1e3:g}ms"
        host_q = ["qdisc", "add", "dev", host_end, "root"]
        ns_q = ["-n", self.netns, "qdisc", "add", "dev", ns_end, "root"]
        netem = _tc(*host_q, "netem", "delay", delay, "rate", rate)
        kernel_delay = netem.returncode == 0
        if kernel_delay:
            netem = _tc(*ns_q, "netem", "delay", delay, "rate", rate)
            if netem.returncode != 0:
                raise RuntimeError(f"tc netem on {ns_end} failed: {netem.stderr.strip()}")
            kind = f"netem delay {delay} and rate {self.rate_bps / 1e9:g} Gbit/s on both veth ends"
        else:
            # No netem in this kernel: the rate from tbf (a token bucket; the burst must hold a
            # whole GSO packet, 64 KiB), the delay from the proxy.
            tbf = ["tbf", "rate", rate, "burst", "256kb", "latency", "50ms"]
            for args in (host_q, ns_q):
                done = _tc(*args, *tbf)
                if done.returncode != 0:
                    raise RuntimeError(f"tc {' '.join(args + tbf)} failed: {done.stderr.strip()}")
            kind = (
                f"tbf rate {self.rate_bps / 1e9:g} Gbit/s on both veth ends; delay {delay} each way "
                f"by a loopback proxy in front (this kernel has no netem: {netem.stderr.strip()})"
            )
        self.server = s3server.start_local(
            self.data_dir,
            host=f"{net}2",
            prefix=["ip", "netns", "exec", self.netns],
            access_log=self.access_log,
            log_name="link.log",
        )
        if kernel_delay:
            self.endpoint = self.server.endpoint
        else:
            self._start_proxy(self.server.host_port, 0.0)
        self.mechanism = f"server in network namespace {self.netns} over a veth pair; {kind}"

    def _start_proxy(self, target: str, rate_bps: float) -> None:
        self.proxy = subprocess.Popen(
            [sys.executable, str(PROXY), "--target", target, "--delay-ms", f"{self.delay * 1e3:g}"]
            + ["--rate-bps", f"{rate_bps:g}"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.proxy.stdout is not None
        line = self.proxy.stdout.readline().split()
        if len(line) != 2 or line[0] != "READY":
            raise RuntimeError(f"the delay proxy did not start (exit {self.proxy.poll()}): {line}")
        self.endpoint = f"http://127.0.0.1:{line[1]}"

    # --- use ---------------------------------------------------------------------------
    @property
    def client_server(self) -> s3server.S3Server:
        """The server as clients reach it: through the link (keys as the server's)."""
        assert self.server is not None, "start() first"
        return s3server.S3Server(self.endpoint, self.server.access_key, self.server.secret_key, self.server.region)

    def requests(self) -> Counter[str]:
        """Requests the server has logged so far, by operation."""
        return count_requests(self.access_log)

    # --- stop --------------------------------------------------------------------------
    def stop(self) -> None:
        if self.proxy is not None and self.proxy.poll() is None:
            self.proxy.terminate()
            try:
                self.proxy.wait(10)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait()
        if self.server is not None:
            self.server.stop()
        if self._made_netns:
            _ip("netns", "del", self.netns, check=False)  # takes the veth pair with it
            host_end = self.veth[0]
            deadline = time.monotonic() + 5
            while host_end in links() and time.monotonic() < deadline:
                time.sleep(0.05)

    def leftovers(self) -> List[str]:
        """What of this link still exists after `stop()` (empty when it cleaned up)."""
        out = []
        if self._made_netns and self.netns in namespaces():
            out.append(f"namespace {self.netns}")
        if self._made_netns and self.veth[0] in links():
            out.append(f"veth {self.veth[0]}")
        for name, proc in (("proxy", self.proxy), ("server", self.server and self.server.process)):
            if proc is not None and proc.poll() is None:
                out.append(f"{name} pid {proc.pid}")
        return out

    def __enter__(self) -> "EmulatedLink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
