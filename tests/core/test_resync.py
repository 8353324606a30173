"""The resync (`_resync.Resync`): the same answers as a naive reference, linear on crafted damage,
and byte-range reads that are exactly-once or fail loudly (issue 10, items 6 and 7)."""

from __future__ import annotations

import io
import random
import struct

import pytest
from helpers.crafted import PHANTOM_EXAMPLE, crafted_damage, phantom_file

from tfrecord_beam import _engine, records
from tfrecord_beam._engine._framing import FRAME_OVERHEAD, HEADER_SIZE, frame_header
from tfrecord_beam._resync import (
    RESYNC_DEEP_LOOKBACK,
    RESYNC_LOOKAHEAD,
    RESYNC_LOOKBACK,
    Resync,
    find_record_start,
    header_length,
)
from tfrecord_beam.errors import SplitPointError
from tfrecord_beam.index import build_index, create_index


# -- a naive reference: the rule written out directly, one candidate at a time ----------------
def _naive_record_ok(data: bytes, h: int) -> bool:
    length = header_length(data, h)
    if length is None or length > len(data) - h - FRAME_OVERHEAD:
        return False
    _, _, consumed, _ = _engine.scan_frames(data[h : h + FRAME_OVERHEAD + length], True, 1)
    return consumed == FRAME_OVERHEAD + length


def _naive_spanned(data: bytes, candidates, c: int, lookback: int) -> bool:
    for h in candidates:
        if max(0, c - lookback) <= h < c:
            end = h + FRAME_OVERHEAD + header_length(data, h)
            if c < end <= len(data) and _naive_record_ok(data, h):
                return True
    return False


def _naive_chain(data: bytes, c: int) -> bool:
    pos = c
    while pos < c + RESYNC_LOOKAHEAD and pos != len(data):
        length = header_length(data, pos)
        if length is None or length > len(data) - pos - FRAME_OVERHEAD:
            return False
        pos += FRAME_OVERHEAD + length
    return True


def naive_find(data: bytes, candidates, offset: int) -> int:
    """`candidates`: every position with a valid length CRC (the only precomputed part)."""
    for c in candidates:
        if c < offset or _naive_spanned(data, candidates, c, RESYNC_LOOKBACK):
            continue
        if _naive_record_ok(data, c) and _naive_chain(data, c):
            return c
        if not _naive_spanned(data, candidates, c, RESYNC_DEEP_LOOKBACK):
            return c
    return len(data)


def _hostile_file(rng: random.Random) -> bytes:
    """Records, nested frames, damaged payloads and headers, junk, a cut tail: small and mixed."""
    parts = []
    for _ in range(rng.randrange(1, 9)):
        kind = rng.randrange(6)
        if kind == 0:
            parts.append(_engine.frame_records([bytes(rng.randrange(256) for _ in range(rng.randrange(40)))]))
        elif kind == 1:  # a record whose payload is itself framed records
            inner = _engine.frame_records([b"in" * rng.randrange(5) for _ in range(rng.randrange(1, 4))])
            parts.append(_engine.frame_records([inner]))
        elif kind == 2:  # a valid header with a damaged payload
            parts.append(frame_header(8) + b"payload!" + bytes(4))
        elif kind == 3:
            parts.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20))))
        elif kind == 4:  # a damaged header
            frame = bytearray(_engine.frame_records([b"abc" * rng.randrange(1, 6)]))
            frame[rng.randrange(12)] ^= 1 << rng.randrange(8)
            parts.append(bytes(frame))
        else:  # framed records cut short
            frame = _engine.frame_records([b"cut" * 5])
            parts.append(frame[: rng.randrange(1, len(frame))])
    return b"".join(parts)


@pytest.mark.parametrize("paths", ["as-tuned", "numpy-windows-python-walks", "numpy-windows-c-walks"])
@pytest.mark.parametrize("seed", range(12))
def test_resync_matches_the_naive_reference(seed, paths, monkeypatch):
    """Every internal path (scalar or numpy window steps, C or remembered Python chain walks)
    gives the naive reference's answers."""
    from tfrecord_beam import _resync

    if paths != "as-tuned":
        monkeypatch.setattr(_resync, "_SMALL_STEP", 0)
        monkeypatch.setattr(_resync, "_FAST_WALKS", 0 if paths == "numpy-windows-python-walks" else 1 << 30)
    data = _hostile_file(random.Random(seed))
    raw = io.BytesIO(data)
    candidates = [h for h in range(len(data)) if header_length(data, h) is not None]
    want = [naive_find(data, candidates, offset) for offset in range(len(data) + 1)]
    shared = Resync(raw, len(data))  # one searcher, increasing offsets (as a reader uses it)
    assert [shared.find(offset) for offset in range(len(data) + 1)] == want
    backwards = Resync(raw, len(data))  # decreasing offsets restart its windows: same answers
    assert [backwards.find(offset) for offset in range(len(data), -1, -1)] == want[::-1]
    assert [find_record_start(raw, offset, len(data)) for offset in range(0, len(data) + 1, 7)] == want[::7]


def _big_sparse_file(rng: random.Random) -> bytes:
    """A few MiB of few candidates: big zero-filled records (zeros are no candidates) holding
    small frames and headers that claim long records, past the 1 MiB windows and look-ahead."""
    parts = []
    for _ in range(rng.randrange(2, 5)):
        size = rng.randrange(1 << 18, 5 << 19)
        payload = bytearray(size)
        for _ in range(rng.randrange(1, 4)):  # embedded frames, some claiming far past their record
            at = rng.randrange(size - 64)
            if rng.random() < 0.5:
                frame = _engine.frame_records([b"inner" * rng.randrange(3)])
            else:
                frame = frame_header(rng.randrange(1 << 19, 3 << 20))
            payload[at : at + len(frame)] = frame
        frame = bytearray(_engine.frame_records([bytes(payload)]))
        if rng.random() < 0.3:  # a damaged payload
            frame[HEADER_SIZE + rng.randrange(size)] ^= 1
        parts.append(bytes(frame))
    return b"".join(parts)


@pytest.mark.parametrize("paths", ["as-tuned", "numpy-windows-python-walks", "numpy-windows-c-walks"])
@pytest.mark.parametrize("seed", range(2))
def test_resync_matches_the_naive_reference_past_a_megabyte(seed, paths, monkeypatch):
    from tfrecord_beam import _resync

    if paths != "as-tuned":
        monkeypatch.setattr(_resync, "_SMALL_STEP", 0)
        monkeypatch.setattr(_resync, "_FAST_WALKS", 0 if paths == "numpy-windows-python-walks" else 1 << 30)
    rng = random.Random(100 + seed)
    data = _big_sparse_file(rng)
    candidates = [h for h in _engine.find_length_crcs(data).tolist()]
    offsets = sorted(
        {0, len(data)} | {rng.randrange(len(data)) for _ in range(4)} | {h + d for h in candidates for d in (0, 1)}
    )
    raw = io.BytesIO(data)
    shared = Resync(raw, len(data))
    for offset in offsets:
        if offset <= len(data):
            assert shared.find(offset) == naive_find(data, candidates, offset), offset


def _edge_files():
    """Hand-made layouts for the corners of the search."""
    # 1. an empty record spanning a candidate 8 bytes into it (its CRC and footer as a length
    #    field, the next 4 bytes that field's CRC): the candidate lies inside a valid record
    empty = _engine.frame_records([b""])
    field = empty[8:16]
    spanned = empty + struct.pack("<I", _engine.masked_crc32c(field))
    yield (
        "candidate-inside-an-empty-record",
        _engine.frame_records([b"a" * 30]) + spanned + _engine.frame_records([b"b"]),
    )
    # 2. deep in a big record, a small frame followed by a header claiming 1 MiB: a chain that
    #    leaves the look-ahead block by a frame that fits the file (taken for a boundary)
    payload = bytearray(3 << 20)
    at = 3 << 19
    chained = _engine.frame_records([b"x"]) + frame_header(1 << 20)
    payload[at : at + len(chained)] = chained
    yield "embedded-chain-past-the-look-ahead", _engine.frame_records([b"head", bytes(payload), b"tail"])


@pytest.mark.parametrize("paths", ["as-tuned", "numpy-windows-python-walks", "numpy-windows-c-walks"])
@pytest.mark.parametrize("name", [name for name, _ in _edge_files()])
def test_resync_matches_the_naive_reference_at_the_corners(name, paths, monkeypatch):
    from tfrecord_beam import _resync

    if paths != "as-tuned":
        monkeypatch.setattr(_resync, "_SMALL_STEP", 0)
        monkeypatch.setattr(_resync, "_FAST_WALKS", 0 if paths == "numpy-windows-python-walks" else 1 << 30)
    data = dict(_edge_files())[name]
    candidates = _engine.find_length_crcs(data).tolist()
    offsets = sorted({0, 1, len(data)} | {h + d for h in candidates for d in (-1, 0, 1) if 0 <= h + d <= len(data)})
    raw = io.BytesIO(data)
    got = [Resync(raw, len(data)).find(offset) for offset in offsets]
    assert got == [naive_find(data, candidates, offset) for offset in offsets]


def test_crafted_damage_is_reported_record_by_record(tmp_path):
    """Every unit of the crafted damage is two bad records (junk, then a header with a bad
    payload); a skip_corrupt read reports each once, split or not (the bench times 10 MB)."""
    pytest.importorskip("apache_beam")
    from apache_beam.io import source_test_utils

    from tfrecord_beam.beam import CorruptRecord
    from tfrecord_beam.beam.source import _TFRecordSource

    units = 300
    path = str(tmp_path / "crafted.tfrecord")
    with open(path, "wb") as out:
        out.write(crafted_damage(units))
    source = _TFRecordSource(path, skip_corrupt=True)
    got = source_test_utils.read_from_source(source)
    want = sorted([36 * u for u in range(units)] + [36 * u + 12 for u in range(units)])
    assert all(isinstance(r, CorruptRecord) for r in got)
    assert [r.offset for r in got] == want
    assert "payload CRC" in got[1].reason
    parts = []
    for split in source.split(desired_bundle_size=1000):
        parts += source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)
    assert sorted(r.offset for r in parts) == want
    headers = [36 * u + 12 for u in range(units)]
    with open(path, "rb") as raw:
        searcher = Resync(raw, 36 * units)
        for offset in range(1, 36 * units, 5):
            assert searcher.find(offset) == next((h for h in headers if h >= offset), 36 * units), offset


# -- item 7: a phantom record must not appear; a byte-range split fails loudly --------------
@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("phantom") / "phantom.tfrecord")
    payloads = phantom_file(path)
    return path, payloads


def test_phantom_file_is_what_it_claims(phantom):
    path, payloads = phantom
    assert list(records.RecordReader(path)) == payloads
    data = open(path, "rb").read()
    outer_end = build_index(path)[3].sum()
    start = outer_end - (FRAME_OVERHEAD + len(PHANTOM_EXAMPLE))
    assert data[start + HEADER_SIZE : outer_end - 4] == PHANTOM_EXAMPLE
    # the embedded frame passes both CRCs: a resync from inside the outer record lands on it
    with open(path, "rb") as raw:
        assert find_record_start(raw, len(data) // 2, len(data)) == start


def test_record_reader_byte_ranges_fail_loudly(phantom):
    path, payloads = phantom
    size = len(open(path, "rb").read())
    cut = size // 2
    with pytest.raises(SplitPointError, match="needs an index to be split") as info:
        list(records.RecordReader(path, start_offset=0, end_offset=cut, resync=True))
    assert info.value.path == path and info.value.offset == cut
    # splits that are not ambiguous still read every record exactly once
    boundaries = build_index(path)[:, 0].tolist()
    for cut in (boundaries[2] + 5, boundaries[4] + 3):
        first = list(records.RecordReader(path, start_offset=0, end_offset=cut, resync=True))
        second = list(records.RecordReader(path, start_offset=cut, end_offset=size, resync=True))
        assert first + second == payloads


def test_beam_byte_ranges_fail_loudly_and_an_index_fixes_it(phantom, tmp_path):
    pytest.importorskip("apache_beam")
    from apache_beam.io import source_test_utils

    from tfrecord_beam.beam.source import _TFRecordSource

    path, payloads = phantom
    source = _TFRecordSource(path)
    with pytest.raises(SplitPointError, match="needs an index to be split"):
        for split in source.split(desired_bundle_size=256 << 10):
            source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)
    indexed = str(tmp_path / "indexed.tfrecord")
    with open(indexed, "wb") as out:
        out.write(open(path, "rb").read())
    create_index(indexed)
    got = []
    for split in _TFRecordSource(indexed).split(desired_bundle_size=256 << 10):
        got += source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)
    assert got == payloads


def test_torch_dataset_without_index_fails_loudly(phantom):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from tfrecord_beam.torch import TFRecordDataset

    path, _ = phantom
    ds = TFRecordDataset(path, None)
    with pytest.raises(SplitPointError, match="needs an index to be split"):
        list(ds.iter_worker(0, 2))
    with pytest.raises(Exception, match="needs an index to be split"):
        list(DataLoader(ds, num_workers=2, batch_size=None))


def test_phantom_like_bytes_under_a_megabyte_are_still_split_exactly(tmp_path):
    """The check costs nothing in correctness: ordinary nested payloads split anywhere."""
    from helpers.beam_data import nested_payloads, write_file

    payloads = nested_payloads()
    path = write_file(tmp_path / "nested.tfrecord", payloads)
    size = len(open(path, "rb").read())
    for cut in range(1, size, 3):
        first = list(records.RecordReader(path, start_offset=0, end_offset=cut, resync=True))
        second = list(records.RecordReader(path, start_offset=cut, end_offset=size, resync=True))
        assert first + second == payloads, cut


def test_header_length_reads_only_whole_headers():
    header = frame_header(5)
    assert header_length(header) == 5
    assert header_length(header[:11]) is None
    assert header_length(b"\0" + header, 1) == 5
    assert header_length(struct.pack("<QI", 5, 0)) is None


def test_after_bad_skips_a_frame_whose_length_is_sound_and_resyncs_otherwise():
    from tfrecord_beam._engine import frame_records
    from tfrecord_beam._tfindex import frame_index

    payloads = [bytes([65 + i]) * (30 + i) for i in range(6)]
    data = bytearray(frame_records(payloads))
    offsets = frame_index([len(p) + FRAME_OVERHEAD for p in payloads])[:, 0].tolist()
    data[offsets[1] + HEADER_SIZE + 3] ^= 0xFF  # record 1: payload damaged, length sound
    data[offsets[3] + 2] ^= 0xFF  # record 3: length field damaged
    resync = records.Resync(io.BytesIO(bytes(data)), len(data))
    assert resync.after_bad(offsets[1], 1) == (offsets[2], 2, True)
    assert resync.after_bad(offsets[1]) == (offsets[2], None, True)
    assert resync.after_bad(offsets[3], 3) == (offsets[4], None, False)  # found by the search: number unknown
    assert resync.after_bad(offsets[5] + 1) == (len(data), None, False)  # nothing after: the end


def test_a_range_without_resync_checks_where_the_next_range_resyncs(phantom):
    """Issue 22 item 9: [0, cut) read without `resync`, then [cut, ..) with it, returned one
    record too many (the phantom): the end check must run whatever the first range's flag."""
    path, payloads = phantom
    size = len(open(path, "rb").read())
    cut = size // 2
    with pytest.raises(SplitPointError, match="needs an index to be split") as info:
        list(records.RecordReader(path, start_offset=0, end_offset=cut))
    assert info.value.path == path and info.value.offset == cut
    # a range ending on a record boundary (an index split) needs no search and reads as before
    boundaries = build_index(path)[:, 0].tolist()
    for i in (1, len(boundaries) // 2, len(boundaries) - 1):
        first = list(records.RecordReader(path, start_offset=0, end_offset=boundaries[i]))
        second = list(records.RecordReader(path, start_offset=boundaries[i]))
        assert first + second == payloads
    # unambiguous cuts between boundaries still partition the records, mixing the flags
    for cut in (boundaries[2] + 5, boundaries[4] + 3):
        first = list(records.RecordReader(path, start_offset=0, end_offset=cut))
        second = list(records.RecordReader(path, start_offset=cut, resync=True))
        assert first + second == payloads
