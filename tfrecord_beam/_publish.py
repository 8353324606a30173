"""The one commit order for data files and their `.tfindex` files.

Readers pair a data file with the index at its default name, so no crash, kill or full disk
between two moves may leave a new data file beside an old index, or an old data file beside
a new index (a reader would skip or invent records). The order, used by `RecordWriter.close`
and by the Beam sink's finalize:

1. `remove_old_indexes`: delete the indexes at the final names of the data to be replaced;
2. the caller moves the new data in (in Beam, the sink's own finalize);
3. `move_new_indexes`: move the new indexes in.

Every state in between is a data file with its own index or with none, and a file without an
index is read by scanning, so nothing is lost or invented. A re-run replaces the lot. The
filesystem operations are passed in, so local files, pyarrow.fs URIs and Beam's FileSystems
share the order.
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence


def remove_old_indexes(
    index_finals: Sequence[str], *, exists: Callable[[str], bool], delete: Callable[[List[str]], None]
) -> None:
    """Step 1: delete whatever index is at the final index names (before any data moves)."""
    old = [path for path in index_finals if exists(path)]
    if old:
        delete(old)


def move_new_indexes(
    index_sources: Sequence[Any], index_finals: Sequence[str], *, rename: Callable[[List[Any], List[str]], object]
) -> None:
    """Step 3: move the new indexes in (after the data they describe is in place)."""
    if index_sources:
        rename(list(index_sources), list(index_finals))
