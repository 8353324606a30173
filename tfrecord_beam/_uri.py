"""What a path or URI says of itself, before any filesystem is asked: whether it is remote,
and where its query string starts. Kept apart from `fs` so that the modules `fs` uses
(`_bounded`, `_retry`) read the same rule without importing `fs` back."""

from __future__ import annotations

import os
from typing import Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]


def is_remote(path: PathLike) -> bool:
    """True for URIs other than file:// (these go through pyarrow.fs)."""
    path = os.fspath(path)
    return "://" in path and not path.startswith("file://")


def split_query(path: str) -> Tuple[str, str]:
    """(URI without its query string, "?query" or "") for remote URIs; local paths keep any '?'.

    The query starts at the first `?` outside a glob's bracket expression: in
    `s3://b/q[?]x*.tfrecord?endpoint_override=...` the `[?]` is part of the path (a glob class
    matching a literal `?`, as docs/torch.md says), the second `?` starts the query. The one
    rule for the CLI, the datasets and the jobs (`beam._fs`)."""
    path = os.fspath(path)
    if not is_remote(path) or "?" not in path:
        return path, ""
    at = _query_start(path)
    if at < 0:
        return path, ""
    return path[:at], path[at:]


def _query_start(path: str) -> int:
    """Index of the `?` that starts `path`'s query string (-1: none): the first `?` that is not
    inside a bracket expression `[...]` of the path (`[` then an optional `!`/`^`, a first `]`
    taken as a member, and members up to the closing `]`, none of them `/`, `=` or `&`: an
    unclosed `[` is a character of the name)."""
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "?":
            return i
        if ch == "[":
            j = i + 1
            if j < len(path) and path[j] in "!^":
                j += 1
            if j < len(path) and path[j] == "]":
                j += 1
            while j < len(path) and path[j] not in "]/=&":
                j += 1
            if j < len(path) and path[j] == "]":
                i = j + 1
                continue
        i += 1
    return -1
