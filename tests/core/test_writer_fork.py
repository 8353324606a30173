"""A forked child that exits normally leaves its parent's unfinished writer alone (the child's
copy of the writer and of its temporary files is the parent's to settle), and a writer whose
index cannot be opened leaves no temporary data file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tfrecord_beam.records import RecordReader, RecordWriter

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


_FORKED_CHILD = """
import atexit, gc, os, sys
from tfrecord_beam.records import RecordWriter
writer = RecordWriter(sys.argv[1], None, index_path=True)
writer.write_many([b"before"] * 10)
writer.flush()
pid = os.fork()
if pid == 0:  # the child ends as a program does: atexit handlers, then its objects collected
    sys.stderr = open(os.devnull, "w")
    atexit._run_exitfuncs()
    del writer
    gc.collect()
    os._exit(0)
os.waitpid(pid, 0)
writer.write_many([b"after"] * 5)
writer.close()
"""


def test_forked_child_exit_keeps_the_parents_writer(tmp_path):
    """In a fresh interpreter: a test process that used pyarrow's S3 before (another test in
    the same pytest worker) has an atexit finalizer that waits forever in a forked child for
    AWS threads the child does not have, which is pyarrow's, not the writer's, to answer for."""
    path = tmp_path / "a.tfrecord"
    subprocess.run([sys.executable, "-c", _FORKED_CHILD, str(path)], check=True, timeout=120)
    assert list(RecordReader(str(path))) == [b"before"] * 10 + [b"after"] * 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tfindex", "a.tfrecord"]


def test_writer_whose_index_cannot_be_opened_leaves_no_temporary_file(tmp_path):
    with pytest.raises(OSError):
        RecordWriter(str(tmp_path / "a.tfrecord"), None, index_path=str(tmp_path / "missing" / "a.tfindex"))
    assert list(tmp_path.iterdir()) == []
