"""Files and progress as a job's launching process and its Beam stages see them: the public face
of `_fs` (every read and write through Beam's `FileSystems`, so pipeline options apply; the
same small surface as the core's `tfrecord_beam.fs`) and `_progress` (workers' progress files,
the launcher's progress lines) for `pipelines/` and any job written outside it.

Each name is the library's own (re-exported, not copied).
"""

from __future__ import annotations

from ._fs import (
    atomic_output,
    check_no_commit_pending,
    delete,
    exists,
    expand,
    file_size,
    is_dir,
    join,
    list_names,
    open_input,
    read_bytes,
    record_writer,
    set_options,
    split,
    write_bytes,
)
from ._progress import ProgressFile, reporter, write_plan

__all__ = [
    # files through Beam's FileSystems
    "set_options",
    "open_input",
    "read_bytes",
    "write_bytes",
    "record_writer",
    "atomic_output",
    "exists",
    "is_dir",
    "file_size",
    "expand",
    "list_names",
    "join",
    "split",
    "delete",
    "check_no_commit_pending",
    # progress of a running job
    "ProgressFile",
    "reporter",
    "write_plan",
]
