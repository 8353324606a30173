"""Parquet <-> TFRecord conversion stages that stream, in memory bounded by one batch.

Parquet -> TFRecord: the plan comes from the Parquet footers (row counts per row group; no
data is read): the rows are cut into `num_shards` equal contiguous ranges, each a list of
(file, row group, rows) pieces, and one Beam element per shard streams its pieces: record
batches of a row group -> `ExampleEncoder.encode_framed` -> the shard's `RecordWriter`.
Nothing but the plan goes through Beam; the check is the planned row count of each shard.

TFRecord -> Parquet: the input byte ranges are cut into `num_files` contiguous groups; one
element per output file reads its ranges chunk by chunk, decodes them into Arrow and writes
a row group whenever `row_group_rows` rows or `row_group_bytes` payload bytes are pending.
"""

from __future__ import annotations

import functools
from typing import Any, BinaryIO, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import pyarrow as pa

from tfrecord_beam import digest as _digest
from tfrecord_beam import jobs
from tfrecord_beam._schema_unify import SchemaDriftError, check_file_schema, conform_batch
from tfrecord_beam._schema_unify import unify_schemas as unify_schemas  # the jobs' face of the plan's unification
from tfrecord_beam._sizes import DEFAULT_ROW_GROUP_BYTES, DEFAULT_ROW_GROUP_ROWS
from tfrecord_beam.arrow import ArrowConversionError, ExampleEncoder, examples_to_record_batch, record_misfit
from tfrecord_beam.beam import _fs
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.beam._corrupt import CorruptRecord
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.records import ReadSpan
from tfrecord_beam.skipping import SkippingReader

BATCH_ROWS = 65536  # rows per record batch at most
BATCH_BYTES = 4 << 20  # ... and about this many (uncompressed) bytes
READ_BUFFER = 1 << 20  # Parquet pages are streamed through a buffer of this size
WRITE_BUFFER = 1 << 20  # Parquet output reaches Beam's file object in pieces of this size


# ---------------------------------------------------------------------------------------------
# Parquet -> TFRecord


class FileIdentity(NamedTuple):
    """What a Parquet file was when the job was planned: its size, modification time (as the
    jobs' filesystem layer lists it: 0 where a store gives none) and the row count of each row
    group (its footer's). A worker opening the file compares them (`check_identity`): the plan's
    row groups and row ranges are only valid for that file."""

    size: int
    mtime: float
    row_groups: Tuple[int, ...]


class Piece(NamedTuple):
    """Rows [start, stop) of one row group of one Parquet file."""

    path: str
    row_group: int
    start: int
    stop: int
    first_row: int  # the file's row number of the row group's first row (for messages)
    identity: Optional[FileIdentity] = None  # the file as planned (None: not checked)


def stat(path: str) -> Tuple[int, float]:
    """(size, modification time) of one file, through the jobs' filesystem layer."""
    from apache_beam.io.filesystems import FileSystems

    found = FileSystems.match([_fs.escape(path)], [1])[0].metadata_list
    if not found:
        raise FileNotFoundError(f"{path}: no such file")
    return int(found[0].size_in_bytes), float(found[0].last_updated_in_seconds or 0.0)


def footer(path: str) -> Tuple[pa.Schema, List[int]]:
    """(Arrow schema, row count of each row group) of a Parquet file, from its footer only."""
    schema, counts, _ = footer_and_identity(path)
    return schema, counts


def footer_and_identity(path: str) -> Tuple[pa.Schema, List[int], FileIdentity]:
    """`footer`, and the file's identity (`FileIdentity`) as read with it."""
    import pyarrow.parquet as pq

    size, mtime = stat(path)
    with _fs.open_input(path) as handle:
        meta = pq.read_metadata(handle)
    counts = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return meta.schema.to_arrow_schema(), counts, FileIdentity(size, mtime, tuple(counts))


def check_identity(path: str, planned: Optional[FileIdentity], metadata) -> None:
    """SchemaDriftError unless the file a worker opened (`metadata`: its footer) is the one
    planned: same size, modification time and row groups. Otherwise the plan's row-group
    numbers and row ranges would read another file's rows (a mix of two versions, or rows
    out of range)."""
    if planned is None:
        return
    size, mtime = stat(path)
    counts = tuple(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    changed = []
    if size != planned.size:
        changed.append(f"its size is {size} bytes, {planned.size} when planned")
    if counts != planned.row_groups:
        changed.append(
            f"it holds {sum(counts)} rows in {len(counts)} row groups, {sum(planned.row_groups)} rows in "
            f"{len(planned.row_groups)} when planned"
        )
    if mtime != planned.mtime and (mtime or planned.mtime):
        changed.append(f"its modification time is {mtime}, {planned.mtime} when planned")
    if changed:
        raise SchemaDriftError(
            f"{path}: the file changed after the job was planned ({'; '.join(changed)}): its planned row "
            "groups would read other rows. Run the job again"
        )


def row_groups(path: str) -> List[int]:
    """The row count of each row group of a Parquet file (from its footer only)."""
    return footer(path)[1]


def plan_shards(
    groups: Sequence[Tuple[str, Sequence[int]]],
    num_shards: int,
    identities: Optional[Dict[str, FileIdentity]] = None,
) -> List[List[Piece]]:
    """Cut the rows of (path, row-group counts) pairs into `num_shards` contiguous ranges
    of equal size (within one row); a row group on a boundary is split between shards. Each
    piece carries its file's identity from `identities` (checked where it is read)."""
    total = sum(sum(counts) for _, counts in groups)
    bounds = [total * s // num_shards for s in range(num_shards + 1)]
    shards: List[List[Piece]] = [[] for _ in range(num_shards)]
    pos = 0
    shard = 0
    for path, counts in groups:
        first = 0
        for number, rows in enumerate(counts):
            lo, hi = pos, pos + rows
            while lo < hi:
                while bounds[shard + 1] <= lo:
                    shard += 1
                cut = min(hi, bounds[shard + 1])
                shards[shard].append(Piece(path, number, lo - pos, cut - pos, first, (identities or {}).get(path)))
                lo = cut
            pos += rows
            first += rows
    return shards


def release_memory() -> None:
    """Hand Arrow's freed memory back to the system (its allocator keeps it otherwise, which
    reads as memory growth); called once per row group, where it costs ~1%."""
    pa.default_memory_pool().release_unused()


def open_parquet(handle):
    """A ParquetFile that streams pages (memory bounded by a batch, not by a row group)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(handle, buffer_size=READ_BUFFER, pre_buffer=False)


def batch_rows(meta, row_group: int) -> int:
    """Rows per record batch for a row group: BATCH_ROWS, fewer when rows are large."""
    group = meta.row_group(row_group)
    per_row = group.total_byte_size / max(group.num_rows, 1)
    return int(max(1, min(BATCH_ROWS, BATCH_BYTES // max(per_row, 1))))


def _batches(
    parquet_file, piece: Piece, schema: pa.Schema, columns: Sequence[str]
) -> Iterator[Tuple[int, pa.RecordBatch]]:
    """(file row number, batch) of a piece's rows, read batch by batch, as the planned `schema`'s
    `columns` (those the file lacks added as nulls: `conform_batch`)."""
    row = 0
    size = batch_rows(parquet_file.metadata, piece.row_group)
    has = [c for c in columns if c in parquet_file.schema_arrow.names]
    for batch in parquet_file.iter_batches(
        batch_size=size, row_groups=[piece.row_group], columns=has, use_threads=False
    ):
        lo, hi = max(piece.start - row, 0), min(piece.stop - row, batch.num_rows)
        if lo < hi:
            yield piece.first_row + row + lo, conform_batch(batch.slice(lo, hi - lo), schema, columns)
        row += batch.num_rows
        if row >= piece.stop:
            return


def write_parquet_shard(
    spec: _stages.ShardSpec,
    shard: int,
    pieces: Sequence[Piece],
    schema: pa.Schema,
    options: dict,
    corrupt: Optional[list] = None,
    skip_corrupt: bool = False,
) -> dict:
    """Encode one shard's pieces into its TFRecord file (+ index); returns its stats. With
    `skip_corrupt`, rows that cannot be converted are listed in `corrupt` and left out."""
    corrupt = [] if corrupt is None else corrupt
    encoder = ExampleEncoder(schema, **options)
    name = spec.name(shard)
    index_path = spec.path(spec.index_name(shard)) if spec.write_index else None
    records = size = 0
    digest = (0, 0, 0)
    current: Optional[Tuple[str, BinaryIO, Any]] = None  # (path, handle, ParquetFile): one open at a time
    try:
        with _fs.record_writer(spec.path(name), spec.compression, index_path=index_path) as writer:
            for piece in pieces:  # in input order: each file's pieces are consecutive
                if current is None or current[0] != piece.path:
                    if current is not None:
                        current[1].close()
                    handle = _fs.open_input(piece.path)
                    current = (piece.path, handle, open_parquet(handle))
                    # the file as planned? (replaced since, or never seen by the launcher: fail, naming it)
                    # (its schema first: a changed column is named; then size, time and row groups)
                    check_file_schema(piece.path, current[2].schema_arrow, schema, options.get("columns"))
                    check_identity(piece.path, piece.identity, current[2].metadata)
                for first_row, batch in _batches(current[2], piece, schema, encoder.columns):
                    for framed, sizes in _encoded(encoder, batch, first_row, piece.path, skip_corrupt, corrupt):
                        writer.write_framed(framed, sizes)
                        digest = _digest.add_digests(digest, _digest.framed_digest(framed, sizes))
                        records += len(sizes)
                        size += len(framed) - 16 * len(sizes)
                release_memory()
    finally:
        if current is not None:
            current[1].close()
    # the manifest's count and checksum are of what the writer wrote, its file's size checked
    (records, size, checksum), file_bytes = jobs.check_written(
        spec.path(name), writer, _fs.file_size, meant=(records, size, digest[2])
    )
    result = {
        "shard": shard,
        "name": name,
        "records": records,
        "bytes": size,
        "checksum": checksum,
        "skipped": len(corrupt),
        "planned": sum(p.stop - p.start for p in pieces),
        "file_bytes": file_bytes,
        "groups": [records],
    }
    _stages.write_result(spec.path("_results"), f"shard-{shard:05d}.json", result)
    return result


def _encoded(encoder, batch: pa.RecordBatch, first_row: int, path: str, skip_corrupt: bool, corrupt: list):
    """(framed, frame sizes) of a batch's rows. A batch with a row that cannot be converted
    fails, naming the file and row; with `skip_corrupt` (--skip_corrupt) its rows are encoded
    one by one instead and each bad row is listed in `corrupt` (offset: its row number in the file)."""
    try:
        yield encoder.encode_framed(batch, first_row)
        return
    except ArrowConversionError as err:
        if not skip_corrupt:
            raise ArrowConversionError(f"{path}: {err}") from None
    for i in range(batch.num_rows):
        try:
            yield encoder.encode_framed(batch.slice(i, 1), first_row + i)
        except ArrowConversionError as err:
            corrupt.append(
                CorruptRecord(path, first_row + i, f"row {first_row + i} cannot be converted: {err}; skipped")
            )


class _WriteShard(beam.DoFn):
    def __init__(self, spec: _stages.ShardSpec, schema: pa.Schema, options: dict, skip_corrupt: bool) -> None:
        self.spec, self.schema, self.options, self.skip_corrupt = spec, schema, options, skip_corrupt

    def process(self, element):
        shard, pieces = element
        corrupt: list = []
        yield write_parquet_shard(self.spec, shard, pieces, self.schema, self.options, corrupt, self.skip_corrupt)
        for bad in corrupt:
            yield beam.pvalue.TaggedOutput(_stages.CORRUPT, bad)


def parquet_to_shards(
    p,
    shards: Sequence[Sequence[Piece]],
    spec: _stages.ShardSpec,
    schema: pa.Schema,
    options: dict,
    label: str = "Parquet",
    dead_letters=None,
    skip_corrupt: bool = False,
):
    """One element per shard: PCollection of the shards' result dicts (with `skip_corrupt`,
    --skip_corrupt, rows that cannot be converted go to `dead_letters`)."""
    letters = _stages.dead_letters_for(skip_corrupt, dead_letters)
    outs = (
        p
        # Create spreads its elements over workers itself (a Reshuffle inside): no second one
        | f"{label}Plan" >> beam.Create([(s, list(pieces)) for s, pieces in enumerate(shards) if pieces])
        | f"{label}Encode"
        >> beam.ParDo(_WriteShard(spec, schema, options, skip_corrupt)).with_outputs(_stages.CORRUPT, main="results")
    )
    if letters is not None:
        letters.write(outs[_stages.CORRUPT], f"{label}DeadLetters")
    return outs.results


# ---------------------------------------------------------------------------------------------
# TFRecord -> Parquet


def group_ranges(ranges: Sequence[_stages.FileRange], num_files: int) -> List[List[_stages.FileRange]]:
    """Cut the ranges (in order) into `num_files` contiguous groups of about equal bytes."""
    sizes = []
    for r in ranges:
        end = r.end if r.end is not None else _fs.file_size(r.path)
        sizes.append(max(end - r.start, 1))
    total = sum(sizes)
    out: List[List[_stages.FileRange]] = [[] for _ in range(num_files)]
    pos = 0
    for r, n in zip(ranges, sizes):
        out[min(num_files - 1, (pos + n // 2) * num_files // total)].append(r)
        pos += n
    return out


class _Pending:
    """Decoded batches waiting to become one row group."""

    def __init__(self) -> None:
        self.batches: List[pa.RecordBatch] = []
        self.rows = 0
        self.bytes = 0

    def add(self, batch: pa.RecordBatch, payload_bytes: int) -> None:
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.bytes += payload_bytes

    def take(self) -> pa.Table:
        table = pa.Table.from_batches(self.batches)
        self.batches, self.rows, self.bytes = [], 0, 0
        return table


def write_parquet_file(
    path: str,
    ranges: Sequence[_stages.FileRange],
    schema: pa.Schema,
    sequence: bool,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    coverage: Optional[list] = None,
    corrupt: Optional[list] = None,
    skip_corrupt: bool = False,
    closed: bool = False,
    hint: str = "",
) -> dict:
    """Decode the ranges' records into one Parquet file, a row group at a time; its stats.

    With `skip_corrupt` (--skip_corrupt), corrupt records are stepped over and appended to
    `corrupt` as CorruptRecords; without it they fail the write. A record that does not fit
    `schema` (with `closed`, also one holding a feature the schema lacks) fails it naming the
    file, the record's byte offset and the feature, then `hint` (how to include it)."""
    corrupt = [] if corrupt is None else corrupt
    import pyarrow.parquet as pq

    records = 0
    pending = _Pending()
    with _fs.atomic_output(path) as (handle, commit):
        # Arrow writes many small pieces; each would be a Python call on Beam's file object
        # (and a wait for the GIL while the runner's threads hold it): buffer them in Arrow.
        sink = pa.output_stream(handle, buffer_size=WRITE_BUFFER)
        writer = pq.ParquetWriter(sink, schema)
        try:
            for rng in ranges:
                reader = SkippingReader(
                    rng.path,
                    ReadSpan(
                        rng.compression, start_offset=rng.start, end_offset=rng.end, resync=rng.compression is None
                    ),
                    open_file=functools.partial(_fs.open_input, rng.path),
                    skip_corrupt=skip_corrupt,
                    on_corrupt=lambda f, o, r: corrupt.append(CorruptRecord(f, o, r)),
                )
                for chunk in reader.chunks():
                    every = chunk.payloads()
                    for lo in range(0, len(every), BATCH_ROWS):
                        payloads = every[lo : lo + BATCH_ROWS]
                        where = (rng.path, chunk.record_offsets[lo : lo + BATCH_ROWS])
                        batch = _decoded(payloads, schema, sequence, closed, where, hint)
                        pending.add(batch, int(chunk.payload_lengths[lo : lo + BATCH_ROWS].sum()))
                        records += len(payloads)
                        if pending.rows >= row_group_rows or pending.bytes >= row_group_bytes:
                            table = pending.take()
                            writer.write_table(table, row_group_size=max(table.num_rows, 1))
                            del table
                            release_memory()
                if coverage is not None:
                    first = reader.start_offset
                    size = _fs.file_size(rng.path) if rng.compression is None else None
                    end = reader.end
                    coverage.append(_stages.Coverage(rng.path, rng.start, first, first if end is None else end, size))
            if pending.rows:
                table = pending.take()
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
        finally:
            writer.close()
            sink.close()
        commit()
    return {"parquet": path.rstrip("/").rsplit("/", 1)[-1], "records": records}


def _decoded(
    payloads: List[bytes], schema: pa.Schema, sequence: bool, closed: bool, where: Tuple[str, Any], hint: str
) -> pa.RecordBatch:
    """The records as a batch of `schema`; one that does not fit fails naming the file and the
    first such record's byte offset (`where`: path, the records' offsets) and what is wrong."""
    try:
        return examples_to_record_batch(payloads, schema=schema, sequence=sequence, closed=closed)
    except (ArrowConversionError, TFRecordError, TypeError) as err:
        failure: Exception = err
    path, offsets = where
    misfits = ((i, record_misfit(p, schema, sequence=sequence, closed=closed)) for i, p in enumerate(payloads))
    i, why = next(((i, why) for i, why in misfits if why is not None), (0, None))  # only on the way to failing
    if why is None:
        why = f"(records from this one on) {failure}"
    raise ArrowConversionError(f"{path}: record at byte offset {int(offsets[i])}: {why}{'; ' + hint if hint else ''}")


class _WriteParquet(beam.DoFn):
    def __init__(
        self,
        paths: Sequence[str],
        schema: pa.Schema,
        sequence: bool,
        rows: int,
        size: int,
        results_dir: str,
        skip_corrupt: bool = False,
        closed: bool = False,
        hint: str = "",
    ) -> None:
        self.paths, self.schema, self.sequence, self.rows, self.size = list(paths), schema, sequence, rows, size
        self.results_dir, self.skip_corrupt, self.closed, self.hint = results_dir, skip_corrupt, closed, hint

    def process(self, element):
        number, ranges = element
        coverage: list = []
        corrupt: list = []
        result = write_parquet_file(
            self.paths[number],
            ranges,
            self.schema,
            self.sequence,
            self.rows,
            self.size,
            coverage,
            corrupt,
            skip_corrupt=self.skip_corrupt,
            closed=self.closed,
            hint=self.hint,
        )
        _stages.write_result(self.results_dir, f"parquet-{number:05d}.json", result)
        yield result
        for c in coverage:
            yield beam.pvalue.TaggedOutput(_stages.COVERAGE, c)
        for bad in corrupt:
            yield beam.pvalue.TaggedOutput(_stages.CORRUPT, bad)


def tfrecord_to_parquet_files(
    p,
    groups: Sequence[Sequence[_stages.FileRange]],
    paths: Sequence[str],
    schema: pa.Schema,
    sequence: bool,
    results_dir: str,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    label: str = "ToParquet",
    dead_letters=None,
    skip_corrupt: bool = False,
    closed: bool = False,
    hint: str = "",
):
    """One element per output file (every file is written, empty ones too); PCollection of
    {"parquet": name, "records": n} dicts. Fails when the ranges of an input leave a gap; with
    `skip_corrupt` corrupt records and gaps are written to `dead_letters` (a `commit.DeadLetters`)
    instead. A record that does not fit `schema` (`closed`: also one with a feature the schema
    lacks) fails the job naming file, offset and feature, then `hint` (`write_parquet_file`)."""
    letters = _stages.dead_letters_for(skip_corrupt, dead_letters)
    outs = (
        p
        | f"{label}Plan" >> beam.Create([(i, list(g)) for i, g in enumerate(groups)])  # Create spreads its elements
        | f"{label}Write"
        >> beam.ParDo(
            _WriteParquet(
                paths, schema, sequence, row_group_rows, row_group_bytes, results_dir, skip_corrupt, closed, hint
            )
        ).with_outputs(_stages.COVERAGE, _stages.CORRUPT, main="files")
    )
    gaps = _stages.check_coverages(outs[_stages.COVERAGE], label, skip_corrupt)
    if letters is not None:
        corrupt = (outs[_stages.CORRUPT], gaps) | f"{label}AllCorrupt" >> beam.Flatten()
        letters.write(corrupt, f"{label}DeadLetters")
    return outs.files


def parquet_rows(path: str) -> int:
    """Rows of a Parquet file, from its footer."""
    return sum(row_groups(path))
