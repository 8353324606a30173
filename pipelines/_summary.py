"""What a job did, for a person and for a script: `key: value` lines, then one `json:` line.

The lines name input and output as such, give the rate in records/s and MB/s, and the wall
time from the start of the process when the job runs as a command (so Python's and Beam's
start-up count, as a user's stopwatch would). Counts are written one way (`1,234,567`), sizes
as bytes with their MB, and nouns agree with their numbers ("1 file", "2 files").

The `json:` line carries counts and short facts: the list of outputs is the manifest's (it holds
every output with its records and checksum), so jobs give its path, not the list.

A dry run (`dry_run`: Dataflow's, see `_dataflow`) did no work: its summary says that nothing was
submitted and nothing committed instead of counting an output, and its `json:` line says
`"dry_run": true, "submitted": false, "committed": false`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, TextIO

from tfrecord_beam.jobtools import plural

MB = 1_000_000


def size(num_bytes: int) -> str:
    """`1,234,567 bytes (1.2 MB)`: the exact count, and the size a person compares."""
    return f"{plural(num_bytes, 'byte')} ({num_bytes / MB:,.1f} MB)"


def process_start() -> float:
    """When this process started (epoch seconds; Linux /proc), else now.

    `time.time()` at the start of `run_job` would leave out the interpreter's and the imports'
    seconds (Beam alone takes ~2 s to import), which a user waits for all the same.
    """
    try:
        with open("/proc/self/stat", "rb") as handle:
            started_ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
        return time.time() - (uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


@dataclass
class Summary:
    """What a job did: `files`, `records`, `bytes` are its output; `input_files` and
    `input_bytes` what it read (None when the job does not count them)."""

    job: str
    files: int = 0
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    input_files: Optional[int] = None
    input_bytes: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    output_noun: str = "file"
    dry_run: bool = False

    def as_dict(self) -> Dict[str, Any]:
        """The `json:` line: counts and short facts (jobs leave the list of outputs to the manifest)."""
        out: Dict[str, Any] = {
            "job": self.job,
            "files": self.files,
            "records": self.records,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
        }
        if self.input_files is not None:
            out["input_files"] = self.input_files
        if self.input_bytes is not None:
            out["input_bytes"] = self.input_bytes
        if self.dry_run:
            out.update({"dry_run": True, "submitted": False, "committed": False})
        out.update(self.extra)
        return out

    def lines(self) -> list:
        """The summary a person reads, one `key: value` per line."""
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        mb_rate = (
            (self.input_bytes if self.input_bytes else self.bytes) / MB / self.seconds if self.seconds > 0 else 0.0
        )
        out = [f"== {self.job} summary =="]
        if self.dry_run:
            out.append("dry run: the job was built and not submitted: nothing ran, nothing was committed")
            out.append(f"wall:    {self.seconds:,.1f} s")
        if self.input_files is not None:
            read = plural(self.input_files, "file")
            out.append(f"input:   {read}" + (f", {size(self.input_bytes)}" if self.input_bytes is not None else ""))
        if not self.dry_run:
            out.append(
                f"output:  {plural(self.files, self.output_noun)}, {plural(self.records, 'record')}, {size(self.bytes)}"
            )
            out.append(f"wall:    {self.seconds:,.1f} s ({rate:,.0f} records/s, {mb_rate:,.1f} MB/s)")
        for key, value in self.extra.items():
            if key in ("input_files", "input_bytes") or _is_listing(value):
                continue
            out.append(f"{key}: {_format(value)}")
        out.append("json: " + json.dumps(self.as_dict(), sort_keys=True, default=str))
        return out

    def print(self, stream: Optional[TextIO] = None) -> None:
        stream = stream or sys.stdout
        stream.write("\n".join(self.lines()) + "\n")
        stream.flush()


def _is_listing(value: Any) -> bool:
    """A list of lines (build_index's corrupt files, printed as they are found), not a list of counts."""
    if isinstance(value, (list, tuple)):  # an empty list has nothing to show
        return not value or not all(isinstance(v, int) for v in value)
    return isinstance(value, dict)


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_format(v) for v in value)
    return str(value)
