"""The runner matrix: every test here is marked `runners` (not run by `make test`; `make
test-runners` runs them after `make runners`) and takes the `runner` fixture, one per column,
its id the runner's name. A test module with `DRY_RUN = True` gets the dry-run columns
(`runner_matrix.is_dry_run`), every other module the columns that run jobs. The wall time of each job on each runner goes to
.runners/logs/matrix-times.json at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import runner_matrix as rm

TIMES: dict = {}
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.runners)


def pytest_generate_tests(metafunc):
    if "runner_name" in metafunc.fixturenames:
        dry = bool(getattr(metafunc.module, "DRY_RUN", False))
        names = [n for n in rm.runner_names() if rm.is_dry_run(n) == dry]
        metafunc.parametrize("runner_name", names, ids=names, scope="session")


@pytest.fixture(scope="session")
def runner(runner_name) -> rm.Runner:
    return rm.load_runner(runner_name)


@pytest.fixture
def timed():
    """record(runner, job, JobRun): keeps the job's wall time for the session's table."""

    def record(runner: rm.Runner, job: str, run: rm.JobRun) -> rm.JobRun:
        TIMES.setdefault(job, {})[runner.name] = round(run.seconds, 2)
        return run

    return record


def pytest_sessionfinish(session, exitstatus):
    if TIMES:
        path = rm.ROOT / ".runners" / "logs" / "matrix-times.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(TIMES, indent=1, sort_keys=True) + "\n")


def pytest_terminal_summary(terminalreporter):
    if TIMES:
        names = sorted({n for row in TIMES.values() for n in row}, key=rm.runner_names().index)
        terminalreporter.write_line("job wall time (s): " + " | ".join(names))
        for job, row in sorted(TIMES.items()):
            terminalreporter.write_line(f"  {job}: " + " | ".join(str(row.get(n, "-")) for n in names))
