"""Our `.tfindex` sidecars as Beam reads meet them.

Beam's usual write-then-read idiom reads shards back with a glob such as `prefix-*`, which
also matches the `.tfindex` file the sink writes beside every shard. Reads therefore skip
files named like an index (`*.tfindex`) that a *glob* matched, with a debug log line; a file
named exactly (no glob characters) is read as asked, and when it turns out to hold index
text instead of records, the error says so.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable, List, Optional, TypeVar

from .._tfindex import INDEX_SUFFIX
from ..errors import CorruptRecordError
from ..fs import is_glob
from . import _fs

_LOG = logging.getLogger("tfrecord_beam.beam")
#: The first line of a `.tfindex` (or `tfrecord`-package index): "offset length".
_INDEX_LINE = re.compile(rb"\d+ \d+\r?\n")

T = TypeVar("T")


def is_index_name(path: str) -> bool:
    """Whether a file is named like one of our index sidecars."""
    return path.endswith(INDEX_SUFFIX)


def without_indexes(pattern: Optional[str], items: Iterable[T], path_of=lambda item: item) -> List[T]:
    """The matches of `pattern` less the index sidecars a glob picked up (logged at debug);
    `pattern=None` for files matched elsewhere (e.g. FileMetadata from `fileio.MatchFiles`)."""
    items = list(items)
    if pattern is not None and not is_glob(pattern):
        return items
    kept = []
    for item in items:
        path = path_of(item)
        if is_index_name(path):
            _LOG.debug(
                "%s: skipping %s, a %s index sidecar, not TFRecord data", pattern or "matched files", path, INDEX_SUFFIX
            )
        else:
            kept.append(item)
    return kept


def explain_index_read_as_data(err: CorruptRecordError, file_name: str) -> CorruptRecordError:
    """`err` itself, or a clearer error when the first record of `file_name` failed because
    the file holds index text ("offset length" lines) rather than TFRecord frames."""
    if err.offset != 0:
        return err
    try:
        with _fs.open_input(file_name) as handle:
            head = handle.read(64)
    except Exception:  # the original error is the one to report
        return err
    if not _INDEX_LINE.match(head):
        return err
    return type(err)(
        err.path,
        err.offset,
        err.record_number,
        f"this is an index file (lines of 'offset length', the {INDEX_SUFFIX} format), not TFRecord "
        f"data: read the data file it describes instead ({err.reason})",
    )
