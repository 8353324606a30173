"""A pytest plugin that records each test's CPU time (this process's, threads included, plus the
children it reaped: job subprocesses, DataLoader workers, servers stopped in its teardown) and wall
time, setup and teardown included, so a suite's cost can be compared on a machine whose wall
clock is shared with other work (issue 23 item 4).

Use: `PYTHONPATH=$PWD python -m pytest -p bench.pytest_cpu ...` with TFRB_CPU_LOG=FILE (one JSON
line per test, appended; each xdist worker appends its own lines, and one line per worker for
its start-up: imports and collection). Summarise with `python -m bench.pytest_cpu FILE`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

_START = (time.process_time(), time.perf_counter())


def _children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the test worker's zygote (tests/helpers/zygote.py) reaps the children it forks, and lives
    # past the test: what it and they spent is counted as it reports it
    zygote = sys.modules.get("helpers.zygote")
    return usage.ru_utime + usage.ru_stime + (zygote.cpu_seconds() if zygote is not None else 0.0)


def _write(line: dict[str, Any]) -> None:
    path = os.environ.get("TFRB_CPU_LOG")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")


_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The start-up cost: interpreter, plugins, test module imports, collection."""
    _write(
        {
            "id": f"<startup {_WORKER}>",
            "worker": _WORKER,
            "cpu": time.process_time() - _START[0] + _children(),
            "wall": time.perf_counter() - _START[1],
        }
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu0, child0, wall0 = time.process_time(), _children(), time.perf_counter()
    yield
    _write(
        {
            "id": item.nodeid,
            "worker": _WORKER,
            "cpu": time.process_time() - cpu0,
            "children": _children() - child0,
            "wall": time.perf_counter() - wall0,
            "end": time.time(),
        }
    )


def summarise(path: str, top: int = 40) -> None:
    """Print the `top` most expensive files and tests (CPU = own + children), and totals."""
    rows = [json.loads(line) for line in open(path)]
    tests = [r for r in rows if not r["id"].startswith("<")]
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in tests:
        f = per_file[r["id"].split("::")[0]]
        f[0] += r["cpu"] + r["children"]
        f[1] += r["children"]
        f[2] += r["wall"]
        f[3] += 1
    total_cpu = sum(r["cpu"] + r.get("children", 0.0) for r in rows)
    print(
        f"{len(tests)} tests; CPU {total_cpu:.0f} s (start-up included); wall sum {sum(r['wall'] for r in tests):.0f} s"
    )
    print("\n| file | tests | CPU s | of which children | wall s |\n|---|---|---|---|---|")
    for name, (cpu, child, wall, n) in sorted(per_file.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {name} | {n} | {cpu:.1f} | {child:.1f} | {wall:.1f} |")
    print("\n| test | CPU s | of which children | wall s |\n|---|---|---|---|")
    for r in sorted(tests, key=lambda r: -(r["cpu"] + r["children"]))[:top]:
        print(f"| {r['id']} | {r['cpu'] + r['children']:.1f} | {r['children']:.1f} | {r['wall']:.1f} |")


if __name__ == "__main__":
    summarise(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
