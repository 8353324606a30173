"""Bounded write orchestration for `_TFRecordSink`: Beam's WriteImpl protocol, minus its
per-element costs.

Beam's `iobase.Write` re-windows every element and feeds it to a DoFn with a side input;
measured here that costs about 35 microseconds a record, ten times our framing and writing.
For bounded PCollections this transform runs the same protocol with the same sink methods:

1. the temporary directory is named when the pipeline is built (the writers create it);
2. `num_shards=0`: one temporary file per bundle, opened at the first element, closed in
   `finish_bundle`; `num_shards=N`: elements are dealt round-robin to N keys, encoded, sent
   on in lists of about 1-2 MiB per key, grouped, one file per key;
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
from typing import List, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.iobase import Write
from apache_beam.pvalue import AsList, AsSingleton
from apache_beam.transforms import window

from .sink import Encoded


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


#: Payload bytes the fixed-shard path buffers per bundle before handing them to its
#: GroupByKey (split evenly between the shards' buffers).
KEYED_BUFFER_BYTES = 8 << 20
_MIN_KEY_BUFFER_BYTES = 64 << 10


class _RoundRobinBatches(beam.DoFn):
    """Deals elements round-robin to `count` shards, as Beam's WriteImpl does, but sends each
    shard's share on in lists of encoded payloads (about KEYED_BUFFER_BYTES / count each)
    instead of one keyed element per record: the GroupByKey then moves a few large
    elements, not one per record. Memory: at most about KEYED_BUFFER_BYTES per bundle."""

    def __init__(self, sink, count: int) -> None:
        self._sink = sink
        self._count = count
        self._limit = max(_MIN_KEY_BUFFER_BYTES, KEYED_BUFFER_BYTES // count)

    def start_bundle(self):
        self._next = random.randrange(self._count)
        self._buffers = [[] for _ in range(self._count)]
        self._sizes = [0] * self._count

    def process(self, element):
        key = self._next = (self._next + 1) % self._count
        payloads = self._sink.encode_payloads(element)
        buffer = self._buffers[key]
        if len(payloads) == 1:
            buffer.append(payloads[0])
            self._sizes[key] += len(payloads[0])
        else:  # a list element stays whole, in order, in one shard
            buffer.extend(payloads)
            self._sizes[key] += sum(map(len, payloads))
        if self._sizes[key] >= self._limit:
            yield key, buffer
            self._buffers[key], self._sizes[key] = [], 0

    def finish_bundle(self):
        for key, buffer in enumerate(self._buffers):
            if buffer:
                yield window.GlobalWindows.windowed_value((key, buffer))
        self._buffers = [[] for _ in range(self._count)]
        self._sizes = [0] * self._count


class _WriteGroup(beam.DoFn):
    """One temporary shard per key group (fixed shard count) from its lists of payloads."""

    def __init__(self, sink, temp_dir: str) -> None:
        self._sink = sink
        self._temp_dir = temp_dir

    def process(self, keyed):
        _ensure_dir(self._temp_dir)
        writer = self._sink.open_writer(self._temp_dir, uuid.uuid4().hex)
        for payloads in keyed[1]:
            writer.write(Encoded(payloads))
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
                | "Key" >> beam.ParDo(_RoundRobinBatches(sink, num_shards)).with_output_types(Tuple[int, List[bytes]])
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
