"""A stale index is found by comparing it with the data a chunk at a time (`IndexCheck`,
`verify_index`'s walk), and reported in the same words, naming the same record, as the
whole-file comparison: differences and record counts beyond the first chunk and window.
count reads a valid index in pieces, and trusts exactly the indexes `index_status` does."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.parity import NATIVE

from tfrecord_beam import _engine, _tfindex, index, records
from tfrecord_beam._engine import _framing, _index_text
from tfrecord_beam.cli import inspection
from tfrecord_beam.cli.inspection import collect_stats, count_records, index_status
from tfrecord_beam.cli.verify import verify_file
from tfrecord_beam.errors import IndexMismatchError
from tfrecord_beam.index import build_index, default_index_path, first_difference, write_index

N = 3000  # 1,016-byte frames: 3 MB, three reader chunks of 1 MiB


def _sizes(case):
    sizes = [1000] * N
    if case == "moved boundary":  # the same bytes, one record boundary moved at record 2500
        sizes[2500], sizes[2501] = 900, 1100
    elif case == "one more record":
        sizes.append(5)
    elif case == "one record less":
        sizes.pop()
    return sizes


@pytest.mark.parametrize("case", ["moved boundary", "one more record", "one record less"])
def test_chunked_comparison_reports_what_the_whole_one_does(tmp_path, monkeypatch, case):
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, [b"x" * 1000] * N, index_path=False)
    old = build_index(path)
    records.write_records(path, [b"y" * n for n in _sizes(case)], index_path=False)
    write_index(old, default_index_path(path))  # now stale
    expected = first_difference(old, build_index(path), "the data")
    assert expected is not None and expected[0] >= 2500  # beyond the first chunk

    assert index_status(path, frames=build_index(path)).detail == expected[1]  # the whole rows at once
    stats = collect_stats([path])
    assert (stats.files[0].index.state, stats.files[0].index.detail) == ("stale", expected[1])
    result = verify_file(path)
    assert result.index.state == "stale" and result.index.detail == expected[1]

    monkeypatch.setattr(index, "WALK_WINDOW", 4096)  # verify_index walks the headers in windows
    with pytest.raises(IndexMismatchError) as info:
        index.verify_index(default_index_path(path), path)
    whole = first_difference(old, build_index(path), path)
    assert info.value.record_number == whole[0] and f"{whole[1]} (stale index)" in str(info.value)


def test_chunked_comparison_passes_a_valid_index(tmp_path, monkeypatch):
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, [bytes(n % 2000) for n in range(N)], index_path=True)  # with its index
    monkeypatch.setattr(index, "WALK_WINDOW", 4096)
    assert np.array_equal(index.verify_index(default_index_path(path), path), build_index(path))
    assert collect_stats([path]).files[0].index.state == "valid"
    assert verify_file(path).index.state == "valid"


def _damaged_index(text: bytes, damage: str) -> bytes:
    lines = text.split(b"\n")
    if damage == "malformed late line":
        lines[-20] = b"12 x"
    elif damage == "gap late":  # an offset one byte off, far from the first piece
        offset, length = lines[-20].split()
        lines[-20] = b"%d %s" % (int(offset) + 1, length)
    elif damage == "first not at zero":
        offset, length = lines[0].split()
        lines[0] = b"%d %s" % (int(offset) + 1, length)
    elif damage == "comments and blanks":  # skipped by the grammar (a member table, say)
        lines[100:100] = [b"", b"# a comment", b""]
        lines.append(b"# trailing table")
    elif damage == "one entry less":
        del lines[-2]
    elif damage == "long line":  # longer than a piece, still one well-formed entry
        lines[50] = lines[50].replace(b" ", b" " * 300)
    return b"\n".join(lines)


INDEX_DAMAGE = ["none", "malformed late line", "gap late", "first not at zero", "comments and blanks"]
INDEX_DAMAGE += ["one entry less", "long line", "data grew"]
STARTS = [pytest.param(_index_text.index_starts, id="pure")]
if NATIVE is not None:
    STARTS.append(pytest.param(NATIVE.index_starts, id="native"))


@pytest.mark.parametrize("starts", STARTS)
@pytest.mark.parametrize("damage", INDEX_DAMAGE)
def test_count_trusts_an_index_exactly_when_index_status_does(tmp_path, monkeypatch, damage, starts):
    """count parses the index in pieces (here 64 bytes: many lines cut across); it answers
    from the index exactly when `index_status` calls it valid, else it scans."""
    monkeypatch.setattr(_tfindex, "INDEX_PIECE", 64)
    monkeypatch.setattr(_engine, "index_starts", starts)
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, [bytes(n % 37) for n in range(500)], index_path=True)
    ipath = default_index_path(path)
    with open(ipath, "rb") as handle:
        text = handle.read()
    with open(ipath, "wb") as handle:
        handle.write(_damaged_index(text, damage))
    if damage == "data grew":
        with open(path, "ab") as handle:
            handle.write(_framing.frame_records([b"more"]))
    state = index_status(path).state
    assert count_records(path) == (500 + (damage == "data grew"), "index" if state == "valid" else "scan")
    assert (state == "valid") == (damage in ("none", "comments and blanks", "long line"))


def test_count_from_an_index_holds_a_piece_not_the_index(tmp_path, monkeypatch):
    """Counting from a valid index of 200 k records allocates about one piece's entries:
    `load_index` made the (n, 2) array (16 B a record, 3.2 MB here) and its starts."""
    n = 200_000
    path = _indexed_file(tmp_path, n, monkeypatch)
    counted, peak = _traced_peak(count_records, path)
    assert counted == (n, "index")
    assert peak < 1 << 20, peak


def _indexed_file(tmp_path, n: int, monkeypatch) -> str:
    """A file of n 4-byte records with its valid index, the index read in 64 KiB pieces."""
    monkeypatch.setattr(_tfindex, "INDEX_PIECE", 1 << 16)
    path = str(tmp_path / "many.tfrecord")
    with open(path, "wb") as handle:
        handle.write(_framing.frame_records([b"abcd"]) * n)
    index.write_index(index.frame_index([20] * n), default_index_path(path))
    return path


def _traced_peak(function, *args):
    """(function(*args), the peak of Python allocations while it ran)."""
    import tracemalloc

    tracemalloc.start()
    try:
        return function(*args), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _whole_file_status(path: str):
    """(state, detail) as the whole-index comparison gave them: `load_index`'s error, else
    `first_difference` with every row of the data, else the size check."""
    try:
        whole = index.load_index(default_index_path(path))
    except IndexMismatchError as exc:
        return "invalid", str(exc)
    difference = first_difference(whole, build_index(path), "the data")
    return ("stale", difference[1]) if difference is not None else ("valid", "")


def _overflow_after_gap(text: bytes) -> bytes:
    """A gap early and an offset + length past 2**63 late: `load_index` names the overflow."""
    lines = text.split(b"\n")
    offset, length = lines[10].split()
    lines[10] = b"%d %s" % (int(offset) + 1, length)
    offset, _ = lines[-20].split()
    lines[-20] = b"%s %d" % (offset, (1 << 63) - 1)
    return b"\n".join(lines)


CHECK_DAMAGE = INDEX_DAMAGE + ["overflow after gap", "gap at a piece start", "moved boundary"]


@pytest.mark.parametrize("starts", STARTS)
@pytest.mark.parametrize("damage", CHECK_DAMAGE)
def test_index_check_in_pieces_reports_what_the_whole_index_does(tmp_path, monkeypatch, damage, starts):
    """inspect and verify parse the index in pieces (here 64 bytes) in step with the data's
    chunks (here a few records: the reader's chunk bytes made small) and give the state and
    the words, line and record numbers the whole loaded index gave."""
    monkeypatch.setattr(_tfindex, "INDEX_PIECE", 64)
    monkeypatch.setattr(_tfindex._engine, "index_starts", starts)
    path = str(tmp_path / "d.tfrecord")
    sizes = [n % 37 for n in range(500)]
    records.write_records(path, [bytes(n) for n in sizes], index_path=True)
    ipath = default_index_path(path)
    with open(ipath, "rb") as handle:
        text = handle.read()
    if damage == "overflow after gap":
        text = _overflow_after_gap(text)
    elif damage == "gap at a piece start":  # the first entry of some piece is one byte off
        lines = text.split(b"\n")
        at = next(i for i in range(1, len(lines)) if sum(len(x) + 1 for x in lines[:i]) > 64 * 3)
        at = max(i for i in range(at) if (sum(len(x) + 1 for x in lines[:i]) <= 64 * 3))
        offset, length = lines[at].split()
        lines[at] = b"%d %s" % (int(offset) + 1, length)
        text = b"\n".join(lines)
    elif damage == "moved boundary":  # well formed, stale: data record 300 is one byte longer
        sizes[300] += 1
        records.write_records(path, [bytes(n) for n in sizes], index_path=False)
    else:
        text = _damaged_index(text, damage)
    with open(ipath, "wb") as handle:
        handle.write(text)
    if damage == "data grew":
        with open(path, "ab") as handle:
            handle.write(_framing.frame_records([b"more"]))
    expected = _whole_file_status(path)
    assert expected[0] == (
        "valid"
        if damage in ("none", "comments and blanks", "long line")
        else "stale"
        if damage in ("one entry less", "data grew", "moved boundary")
        else "invalid"
    )
    assert (index_status(path).state == "valid") == (expected[0] == "valid")
    info = collect_stats([path]).files[0].index
    assert (info.state, info.detail) == expected
    result = verify_file(path)
    assert (result.index.state, result.index.detail) == expected
    frames = build_index(path)
    status = inspection.IndexCheck(path)
    for lo in range(0, len(frames), 7):  # chunks of 7 rows: pieces and chunks out of step
        status.add(frames[lo : lo + 7])
    assert (status.status().state, status.status().detail) == expected


def test_index_check_holds_a_piece_not_the_index(tmp_path, monkeypatch):
    """verify with a valid index of 500 k records allocates about a reader chunk (1 MiB and
    its rows, read ahead) and the index rows that chunk is compared with (5.2 MB for 300 k to 1 M
    records): loading the whole index held 24 B a record (11.2 MB peak here)."""
    n = 500_000
    result, peak = _traced_peak(verify_file, _indexed_file(tmp_path, n, monkeypatch))
    assert result.records == n and result.index.state == "valid" and not result.problems
    assert peak < 7 << 20, peak
