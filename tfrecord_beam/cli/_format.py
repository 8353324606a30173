"""Text formatting for the `tfrecord-beam` command: tables, sizes, shortened values, progress.

Nothing here reads files; the command (`cli/__init__.py`) hands it plain values and the
statistics `inspection.py` collected. Kept apart so the command stays thin and the formatting
can be tested on its own. The dependency runs one way: this module may use `inspection`'s
results, `inspection` never imports from here.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Iterable, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from ._images import image_info

# -- sizes and numbers ----------------------------------------------------------------------


def human_bytes(count: Optional[int]) -> str:
    """1536 -> '1.5 KiB'; exact below 1 KiB; '-' for None."""
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"  # pragma: no cover


def format_number(value: Any) -> str:
    """A number for a table cell: ints exact, floats in 6 significant digits, '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.6g}"


# -- bytes values ----------------------------------------------------------------------------


def shorten_bytes(value: bytes, limit: int = 40, total_length: Optional[int] = None) -> str:
    """A bytes value for people: images noted by format and size, other values repr'd and cut.

    Valid UTF-8 is shown as text (`'héllo'`), anything else as a bytes literal (`b'\\x00a'`);
    longer values are cut to about `limit` characters and followed by their length
    (`total_length` when `value` is itself the start of a longer value).
    """
    total = len(value) if total_length is None else total_length
    image = image_info(value)
    if image is not None:
        fmt, width, height = image
        dims = f" {width}x{height}" if width is not None else ""
        return f"<{fmt}{dims}, {human_bytes(total)}>"
    try:
        text = value.decode("utf-8")
        cut = len(text) > limit
        shown = repr(text[:limit])
    except UnicodeDecodeError:
        cut = len(value) > limit
        shown = repr(value[:limit])
    if cut or total > len(value):
        shown += f"... ({total} bytes)"
    return shown


def format_values(kind: Optional[str], values: Sequence[Any], max_items: int = 8, bytes_limit: int = 40) -> str:
    """The values of one feature as a short one-line list: '[1, 2, 3, ... 97 more]'."""
    if kind is None and not len(values):
        return "(no kind set)"
    items: List[str] = []
    for value in list(values)[:max_items]:
        if isinstance(value, (bytes, bytearray)):
            items.append(shorten_bytes(bytes(value), bytes_limit))
        else:
            items.append(format_number(value))
    more = len(values) - len(items)
    if more > 0:
        items.append(f"... {more} more")
    return "[" + ", ".join(items) + "]"


# -- tables ----------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Iterable[int] = ()) -> str:
    """A plain-text table with a header rule; columns listed in `right` are right-aligned."""
    right = set(right)
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells[1:])
    return "\n".join(out)


# -- progress --------------------------------------------------------------------------------


NON_TTY_INTERVAL = 10.0  # seconds between progress lines when stderr is not a terminal


class Progress:
    """Throttled progress lines on stderr for long scans.

    Silent for the first `delay` seconds (short commands print nothing), then one update every
    `interval` seconds redrawn in place on a terminal; one line each `NON_TTY_INTERVAL` seconds
    at most otherwise (a log keeps every line).
    """

    def __init__(
        self, enabled: bool = True, stream: Optional[TextIO] = None, delay: float = 1.0, interval: float = 1.0
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self.delay = delay
        self.interval = interval
        self._next = self.started + delay
        self._drawn = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if not self._tty:  # a log file or a pipe keeps every line: one each NON_TTY_INTERVAL at most
            self.interval = max(self.interval, NON_TTY_INTERVAL)

    def __call__(self, file_number: int, file_count: int, path: str, records: int, nbytes: Optional[int]) -> None:
        """Report that `records` records / `nbytes` bytes (None: not counted) of file `file_number` are done."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        size = "" if nbytes is None else f"{human_bytes(nbytes)}, "
        text = f"[{file_number}/{file_count}] {path}: {records} records, {size}{now - self.started:.0f} s"
        if self._tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self._drawn = True
        self.stream.flush()

    def done(self) -> None:
        """End an in-place progress line so what follows starts on a clean line."""
        if self.enabled and self._drawn and self._tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# -- one decoded record (head) -----------------------------------------------------------------


def format_feature_lines(
    features: Sequence[Tuple[str, Optional[str], Sequence[Any]]],
    indent: str = "  ",
    max_items: int = 8,
    bytes_limit: int = 40,
) -> List[str]:
    """Aligned lines `name  kind[count]  [values...]` for (name, kind, values) triples."""
    if not features:
        return [indent + "(no features)"]
    width = max(len(name) for name, _, _ in features)
    lines = []
    for name, kind, values in features:
        label = f"{kind}[{len(values)}]" if kind else "none"
        lines.append(
            f"{indent}{name.ljust(width)}  {label.ljust(11)} "
            f"{format_values(kind, values, max_items, bytes_limit)}".rstrip()
        )
    return lines


def format_sequence_lines(
    lists: Sequence[Tuple[str, Sequence[Tuple[Optional[str], Sequence[Any]]]]],
    indent: str = "  ",
    max_steps: int = 5,
    max_items: int = 8,
    bytes_limit: int = 40,
) -> List[str]:
    """Lines for SequenceExample feature lists: each name, its step count, then its first steps."""
    if not lists:
        return [indent + "(no feature lists)"]
    lines = []
    for name, steps in lists:
        lines.append(f"{indent}{name}  {len(steps)} steps")
        for number, (kind, values) in enumerate(steps[:max_steps]):
            label = f"{kind}[{len(values)}]" if kind else "none"
            lines.append(
                f"{indent}  step {number}  {label.ljust(11)} "
                f"{format_values(kind, values, max_items, bytes_limit)}".rstrip()
            )
        if len(steps) > max_steps:
            lines.append(f"{indent}  ... {len(steps) - max_steps} more steps")
    return lines


# -- inspect -----------------------------------------------------------------------------------


def _range(pair, mean=None) -> str:
    if pair is None:
        return "-"
    if mean is None:
        return f"{pair[0]}..{pair[1]}"
    return f"{pair[0]} / {mean:.2f} / {pair[1]}"


def _numeric_range(stats) -> Tuple[str, str]:
    if stats.int_range is not None:
        return format_number(stats.int_range[0]), format_number(stats.int_range[1])
    if stats.float_range is not None:
        return format_number(stats.float_range[0]), format_number(stats.float_range[1])
    return "-", "-"


def _bytes_note(stats, limit: int = 30) -> str:
    notes = []
    if stats.images:
        notes.append(", ".join(f"{n} {fmt}" for fmt, n in sorted(stats.images.items())))
    if stats.sample is not None:
        notes.append(shorten_bytes(stats.sample, limit, stats.sample_length))
    if stats.non_utf8 and not stats.images:
        notes.append(f"{stats.non_utf8} not UTF-8")
    if stats.nan_count:
        notes.append(f"{stats.nan_count} NaN")
    return "; ".join(notes)


def format_feature_table(features, total_records: int, sequence: bool = False) -> str:
    """The per-feature table of `inspect` from `FeatureStats` objects."""
    headers = ["FEATURE", "KIND", "RECORDS", "VALUES min/mean/max"]
    if sequence:
        headers += ["STEPS min/mean/max", "PER STEP"]
    headers += ["MIN", "MAX", "SAMPLE / NOTES"]
    rows = []
    for stats in features:
        row = [
            stats.name,
            stats.kind_label,
            f"{stats.records}/{total_records}",
            _range(stats.values, stats.values_mean),
        ]
        if sequence:
            row += [_range(stats.steps, stats.steps_mean), _range(stats.step_values)]
        row += list(_numeric_range(stats)) + [_bytes_note(stats)]
        rows.append(row)
    return format_table(headers, rows, right=[2])


_GZIP_LAYOUT = {
    "indexed": "gzip, block-indexed ({} members)",
    "unindexed": "gzip, blocks ({} members), no table",
    "stale": "gzip, stale member table",
    "stream": "gzip, one stream",
}


def _compression_label(info) -> str:
    """ "none", the codec's name, or for GZIP how it is laid out (block-gzip files split and seek)."""
    if info.gzip_layout is None:
        return info.compression or "none"
    state, members, _ = info.gzip_layout
    return _GZIP_LAYOUT[state].format(members)


def format_file_table(files) -> str:
    """The per-file table of `inspect` from `FileStats` objects."""
    rows = []
    for info in files:
        records = f"{info.records}" + ("" if info.complete else ("+" if info.error is None else " (error)"))
        index = "-" if info.index is None else info.index.state
        rows.append(
            [info.path, records, human_bytes(info.size), human_bytes(info.data_bytes), _compression_label(info), index]
        )
    return format_table(["FILE", "RECORDS", "SIZE", "DATA", "COMPRESSION", "INDEX"], rows, right=[1, 2, 3])


# -- schema ------------------------------------------------------------------------------------


def arrow_type_code(arrow_type) -> str:
    """Python source that builds an Arrow type: `pa.list_(pa.int64())`."""
    import pyarrow as pa

    if pa.types.is_list(arrow_type):
        return f"pa.list_({arrow_type_code(arrow_type.value_type)})"
    names = {
        pa.int64(): "int64",
        pa.float32(): "float32",
        pa.binary(): "binary",
        pa.string(): "string",
        pa.null(): "null",
    }
    return f"pa.{names.get(arrow_type, str(arrow_type))}()"


def arrow_schema_code(schema) -> str:
    """Python source of a pyarrow schema, one field a line (metadata left out)."""
    lines = ["schema = pa.schema(["]
    lines += [f"    pa.field({f.name!r}, {arrow_type_code(f.type)})," for f in schema]
    lines.append("])")
    return "\n".join(lines)


def python_dict(name: str, mapping: dict) -> str:
    """`name = {...}` with one key a line, ready to paste into Python."""
    if not mapping:
        return f"{name} = {{}}"
    body = "".join(f"    {k!r}: {v!r},\n" for k, v in mapping.items())
    return f"{name} = {{\n{body}}}"
