"""Progress of a running job: workers count what they did, the launching process prints it.

Workers (DoFns) hold a `ProgressFile`: cumulative records and bytes of one task in one phase
("survey", "write", "index"), rewritten (atomically) at most twice a second into a shared
local directory, and also counted as Beam metrics (namespace `tfrecord_beam.progress`). A
phase's planned total is `PHASE.plan.json` in the same directory. The launching process runs
a `ProgressReporter` thread that sums the files and prints a line every few seconds: done of
planned, rate, ETA.

That works when the workers share the launcher's machine (DirectRunner / FnApiRunner, in
process or multi_processing; PrismRunner with its default LOOPBACK workers, which run in the
launching process). On other runners `progress_dir` returns None, workers only
count metrics, and the job prints one line saying where to watch them.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Callable, Dict, Optional, Tuple

from apache_beam.metrics import Metrics

NAMESPACE = "tfrecord_beam.progress"
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
_WRITE_EVERY_S = 0.5
INTERVAL_S = 5.0  # seconds between progress lines (env TFRECORD_BEAM_PROGRESS_INTERVAL overrides)


def is_local(options) -> bool:
    """Whether the runner's workers run on this machine (and can write our progress files)."""
    from apache_beam.options.pipeline_options import PortableOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    name = (runner if isinstance(runner, str) else type(runner).__name__).rsplit(".", 1)[-1]
    if name == "PrismRunner":  # its SDK workers are LOOPBACK (in this process) unless told otherwise
        return options.view_as(PortableOptions).environment_type in (None, "LOOPBACK")
    return name in LOCAL_RUNNERS


def _write_json(path: str, value: dict) -> None:
    temp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    with open(temp, "w") as handle:
        json.dump(value, handle)
    os.replace(temp, path)


def write_plan(directory: Optional[str], phase: str, records: Optional[int], nbytes: int, what: str = "") -> None:
    """Record a phase's planned total (no-op without a directory)."""
    if directory:
        _write_json(
            os.path.join(directory, f"{phase}.plan.json"),
            {"records": records, "bytes": int(nbytes), "what": what, "time": time.time()},
        )


class ProgressFile:
    """One task's cumulative count of records and bytes in one phase."""

    def __init__(self, directory: Optional[str], phase: str, task: str) -> None:
        self.directory, self.phase = directory, phase
        self.path = os.path.join(directory, f"{phase}-{task}.json") if directory else None
        self.records = self.bytes = 0
        self._written = 0.0
        self._records_metric = Metrics.counter(NAMESPACE, f"{phase}_records")
        self._bytes_metric = Metrics.counter(NAMESPACE, f"{phase}_bytes")

    def add(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        self._records_metric.inc(records)
        self._bytes_metric.inc(nbytes)
        if self.path and time.monotonic() - self._written >= _WRITE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self.path:
            self._written = time.monotonic()
            _write_json(self.path, {"records": self.records, "bytes": self.bytes})


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _interval_from_env() -> float:
    value = os.environ.get("TFRECORD_BEAM_PROGRESS_INTERVAL")
    try:
        seconds = float(value) if value else INTERVAL_S
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"TFRECORD_BEAM_PROGRESS_INTERVAL={value!r} is not a positive number of seconds")
    return seconds


class ProgressReporter:
    """A thread that prints `job: phase: done of planned, rate, ETA` every `interval` seconds.

    Use as a context manager around the pipeline run; `directory` is created and removed.
    """

    def __init__(self, job: str, emit: Callable[[str], None], interval: Optional[float] = None) -> None:
        self.job, self.emit, self.interval = job, emit, interval or _interval_from_env()
        self.directory = tempfile.mkdtemp(prefix="tfrecord_beam-progress-")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfrecord_beam-progress", daemon=True)
        self._first_seen: Dict[str, Tuple[float, int]] = {}

    def __enter__(self) -> "ProgressReporter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self.interval)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            line = self.line()
            if line:
                self.emit(line)

    def line(self) -> Optional[str]:
        """The progress line of the current phase: the latest one with work reported, else
        the latest planned (None before any plan)."""
        plans = {}
        for path in glob.glob(os.path.join(self.directory, "*.plan.json")):
            value = _read_json(path)
            if value:
                plans[os.path.basename(path)[: -len(".plan.json")]] = value
        if not plans:
            return None
        done = {}
        for phase in plans:
            records = nbytes = 0
            for part in glob.glob(os.path.join(self.directory, f"{phase}-*.json")):
                value = _read_json(part)
                if value:
                    records += value["records"]
                    nbytes += value["bytes"]
            done[phase] = (records, nbytes)
        active = [p for p in plans if done[p][1] > 0] or list(plans)
        phase = max(active, key=lambda p: plans[p]["time"])
        plan, (records, nbytes) = plans[phase], done[phase]
        now = time.time()
        start, base = self._first_seen.setdefault(phase, (plan["time"], 0)) if nbytes else (plan["time"], 0)
        rate = (nbytes - base) / max(now - start, 1e-6)
        total = plan["bytes"]
        text = f"{self.job}: {plan.get('what') or phase}: {_size(nbytes)} of {_size(total)}"
        if total:
            text += f" ({100.0 * min(nbytes / total, 1.0):.0f}%)"
        planned_records = plan.get("records")
        last = records if planned_records is None else planned_records  # the noun agrees with it
        text += f", {records:,}" + (f" of {planned_records:,}" if planned_records is not None else "")
        text += " record" if last == 1 else " records"
        text += f", {_size(rate)}/s"
        if rate > 0 and total > nbytes:
            text += f", ETA {_duration((total - nbytes) / rate)}"
        return text


class NoProgress:
    """Stands in for ProgressReporter on remote runners: one line says where to watch."""

    directory = None

    def __init__(self, job: str, emit: Callable[[str], None]) -> None:
        emit(
            f"{job}: progress is counted as Beam metrics (namespace {NAMESPACE}: *_records, *_bytes); "
            "watch them in the runner's UI or monitoring"
        )

    def __enter__(self) -> "NoProgress":
        return self

    def __exit__(self, *exc) -> None:
        return None


def reporter(job: str, options, emit: Callable[[str], None], interval: Optional[float] = None):
    """A ProgressReporter for local runners, else a NoProgress."""
    return ProgressReporter(job, emit, interval) if is_local(options) else NoProgress(job, emit)
