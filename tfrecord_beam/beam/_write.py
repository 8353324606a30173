"""Bounded write orchestration for `_TFRecordSink`: Beam's WriteImpl protocol, minus its
per-element costs.

Beam's `iobase.Write` re-windows every element and feeds it to a DoFn with a side input;
measured here that costs about 35 microseconds a record, ten times our framing and writing.
For bounded PCollections this transform runs the same protocol with the same sink methods:

1. the temporary directory is named when the pipeline is built (the writers create it);
2. `num_shards=0`: one temporary file per bundle, opened at the first element, closed in
   `finish_bundle`; `num_shards=N`: elements are dealt round-robin to N shards; each
   bundle's share of a shard goes on as one small list, or, when large, as a piece file
   of framed records written by the bundle (`_DealToShards`); grouped by shard, each group
   is written as one file (pieces copied frame by frame, CRCs checked);
3. after all writes (side inputs of their results): empty shards up to the shard count, then
   `sink.pre_finalize` (deletes old files with the final names), then, as a separate step,
   `sink.finalize_write`, which renames the committed temporary files (and their indexes) to
   final names and deletes the directory.

Only committed bundles' results reach step 3, so retried bundles leave no duplicates, and a
failed pipeline never reaches it, so no final name appears. Unbounded input goes through
Beam's own `Write` (`iobase.WriteImpl`), which writes and finalizes each window (or each
`triggering_frequency` fixed window) with the same sink methods, indexes included.
"""

from __future__ import annotations

import random
import uuid
from typing import List, Tuple, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.iobase import Write
from apache_beam.pvalue import AsList, AsSingleton
from apache_beam.transforms import window

from .sink import Encoded, Piece


def _temp_dir_for(file_path_prefix: str) -> str:
    base, last = FileSystems.split(file_path_prefix)
    return FileSystems.join(base, f"beam-temp-{last}-{uuid.uuid4().hex}")


def _ensure_dir(path: str) -> None:
    if not FileSystems.exists(path):
        try:
            FileSystems.mkdirs(path)
        except IOError:  # another worker made it first
            if not FileSystems.exists(path):
                raise


class _WriteBundles(beam.DoFn):
    """One temporary shard per bundle; emits its temporary path when the bundle ends."""

    def __init__(self, sink, temp_dir: str) -> None:
        self._sink = sink
        self._temp_dir = temp_dir

    def start_bundle(self):
        self._writer = None

    def process(self, element):
        writer = self._writer
        if writer is None:
            _ensure_dir(self._temp_dir)
            writer = self._writer = self._sink.open_writer(self._temp_dir, uuid.uuid4().hex)
        writer.write(element)
        if writer.at_capacity():
            self._writer = None
            yield writer.close()

    def finish_bundle(self):
        if self._writer is not None:
            writer, self._writer = self._writer, None
            yield window.GlobalWindows.windowed_value(writer.close())


#: Payload bytes the fixed-shard path keeps in memory per bundle (split evenly between the
#: shards' buffers); a shard's share beyond its buffer goes to a piece file.
KEYED_BUFFER_BYTES = 8 << 20
_MIN_KEY_BUFFER_BYTES = 64 << 10
#: With more shards than this, shares go through the GroupByKey as lists instead of piece
#: files (a bundle would hold too many files open, each of them small).
MAX_PIECE_SHARDS = 64


class _DealToShards(beam.DoFn):
    """Deals elements round-robin to `count` shards, as Beam's WriteImpl does, without sending
    one keyed element per record through the GroupByKey.

    Each shard's share of a bundle is buffered (about KEYED_BUFFER_BYTES / count). A share
    that outgrows its buffer is written, framed, to a temporary piece file of this bundle
    (`sink.open_piece`; with more than MAX_PIECE_SHARDS shards it is sent on as a list
    instead). When the bundle ends each shard gets its piece's path (`Piece`) and/or the
    rest of its share (a list of payloads). So the GroupByKey moves names and lists of
    about a MiB, not the bulk of the bytes one record at a time, and memory stays bounded.
    A failed bundle's pieces are never named downstream and go with the temporary directory.
    """

    def __init__(self, sink, temp_dir: str, count: int) -> None:
        self._sink = sink
        self._temp_dir = temp_dir
        self._count = count
        self._limit = max(_MIN_KEY_BUFFER_BYTES, KEYED_BUFFER_BYTES // count)
        self._use_pieces = count <= MAX_PIECE_SHARDS

    def start_bundle(self):
        self._next = random.randrange(self._count)
        self._buffers = [[] for _ in range(self._count)]
        self._sizes = [0] * self._count
        self._pieces = [None] * self._count
        self._plain = self._sink.encodes_bytes_as_is()

    def process(self, element):  # a plain function, not a generator: most calls emit nothing
        key = self._next = (self._next + 1) % self._count
        if self._plain and type(element) is bytes:
            self._buffers[key].append(element)
            size = self._sizes[key] = self._sizes[key] + len(element)
        else:  # a coder's bytes, or a list element (it stays whole, in order, in one shard)
            payloads = self._sink.encode_payloads(element)
            self._buffers[key].extend(payloads)
            size = self._sizes[key] = self._sizes[key] + sum(map(len, payloads))
        return self._spill(key) if size >= self._limit else None

    def _spill(self, key: int):
        """Hand on shard `key`'s buffer: into its piece file, or as a list to emit."""
        buffer, self._buffers[key], self._sizes[key] = self._buffers[key], [], 0
        if not self._use_pieces:
            return [(key, buffer)]
        if self._pieces[key] is None:
            _ensure_dir(self._temp_dir)
            self._pieces[key] = self._sink.open_piece(self._temp_dir)
        piece = self._pieces[key][1]
        piece.add(Encoded(buffer))
        piece.flush()
        return None

    def finish_bundle(self):
        for key in range(self._count):
            if self._pieces[key] is not None:
                path, piece = self._pieces[key]
                piece.close()
                yield window.GlobalWindows.windowed_value((key, Piece(path)))
            if self._buffers[key]:
                yield window.GlobalWindows.windowed_value((key, self._buffers[key]))
        self._buffers, self._pieces = [], []


class _WriteGroup(beam.DoFn):
    """One temporary shard per key group (fixed shard count), from its pieces and lists."""

    def __init__(self, sink, temp_dir: str) -> None:
        self._sink = sink
        self._temp_dir = temp_dir

    def process(self, keyed):
        _ensure_dir(self._temp_dir)
        writer = self._sink.open_writer(self._temp_dir, uuid.uuid4().hex)
        for part in keyed[1]:
            writer.write(Piece(part) if isinstance(part, str) else Encoded(part))
        yield writer.close()


def _pad(_, sink, temp_dir: str, results, min_shards: int):
    """Empty temporary shards, so that a fixed shard count is met even with too little data."""
    missing = min_shards - len(list(results))
    if missing > 0:
        _ensure_dir(temp_dir)
    for _ in range(missing):
        yield sink.open_writer(temp_dir, uuid.uuid4().hex).close()


def _pre_finalize(_, sink, temp_dir: str, results):
    return sink.pre_finalize(temp_dir, list(results))


def _finalize(_, sink, temp_dir: str, results, pre_finalize_result):
    yield from sink.finalize_write(temp_dir, list(results), pre_finalize_result)


class WriteShards(beam.PTransform):
    """Write a bounded PCollection through a FileBasedSink; returns the final file names."""

    def __init__(self, sink) -> None:
        super().__init__()
        self._sink = sink

    def expand(self, pcoll):
        sink = self._sink
        if not pcoll.is_bounded:
            return pcoll | "Write" >> Write(sink)
        temp_dir = _temp_dir_for(sink.file_path_prefix.get())
        num_shards = sink.num_shards
        if not isinstance(pcoll.windowing.windowfn, window.GlobalWindows):
            pcoll = pcoll | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        if num_shards:
            written = (
                pcoll
                | "Deal"
                >> beam.ParDo(_DealToShards(sink, temp_dir, num_shards)).with_output_types(
                    Tuple[int, Union[str, List[bytes]]]
                )
                | "Group" >> beam.GroupByKey()
                | "WriteGroups" >> beam.ParDo(_WriteGroup(sink, temp_dir))
            )
        else:
            written = pcoll | "WriteBundles" >> beam.ParDo(_WriteBundles(sink, temp_dir))
        once = pcoll.pipeline | "Once" >> beam.Create([None])
        padding = once | "Pad" >> beam.FlatMap(_pad, sink, temp_dir, AsList(written), max(num_shards, 1))
        results = (written, padding) | "Results" >> beam.Flatten()
        # Separate steps, as in Beam's WriteImpl: a retried finalize must not re-run
        # pre_finalize (which deletes old files with the final names).
        pre = once | "PreFinalize" >> beam.Map(_pre_finalize, sink, temp_dir, AsList(results))
        finalize = beam.FlatMap(_finalize, sink, temp_dir, AsList(results), AsSingleton(pre))
        return once | "Finalize" >> finalize.with_output_types(str)
