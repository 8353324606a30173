"""`.tfindex` text parsing: the compiled `index_starts` and its numpy twin agree (offsets, end,
errors and chain faults) on any text, the twin's vectorised fast path agrees with its
line-by-line parser, and `load_index` names the file, the line and what is wrong, on both
engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.parity import NATIVE, needs_native, same
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_beam import _engine, index
from tfrecord_beam._engine import _index_text as _index_text_py
from tfrecord_beam.errors import IndexMismatchError

FUZZ_CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus"
PARSERS = [pytest.param(_index_text_py.index_starts, id="pure")]
if NATIVE is not None:
    PARSERS.append(pytest.param(NATIVE.index_starts, id="native"))

FRAGMENTS = [
    "0",
    "7",
    "12",
    "007",
    "115",
    " ",
    "  ",
    "\t",
    "\r",
    "\v",
    "\f",
    "\n",
    "\n",
    "\n",
    "#",
    "#m 0 0",
    "x",
    "-1",
    "+1",
    "1_0",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999",
    "0" * 30 + "5",
    "\xff",
    "\x00",
    "1 2\n",
    "0 12\n12 5\n",
]


def _text(parts) -> bytes:
    return "".join(parts).encode("latin-1")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_engines_and_paths_agree_on_any_text(parts):
    data = _text(parts)
    assert same(_index_text_py.parse_index(data), _index_text_py._by_line(data))
    if NATIVE is not None:
        for start in (0, 12):  # a whole index, and a stretch of one whose chain begins at 12
            got, expected = NATIVE.index_starts(data, start), _index_text_py.index_starts(data, start)
            assert same(got, expected), f"{data!r} from {start}: native {got!r} != pure {expected!r}"


@needs_native
def test_engines_agree_on_the_fuzz_corpus():
    for path in sorted(FUZZ_CORPUS.iterdir()):
        data = path.read_bytes()
        assert same(NATIVE.index_starts(data), _index_text_py.index_starts(data)), path.name


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize(
    "text, pairs, error",
    [
        (b"", [], None),
        (b"0 12\n12 5", [0, 12, 12, 5], None),
        (b"0 12\r\n\n  # a comment\n\t12   5 \r\n#end 1 2\n", [0, 12, 12, 5], None),
        (b"0 12\n12 x\n", [0, 12], (_index_text_py.ERROR_NOT_PAIR, 2, 5)),
        (b"0 12\n\n#c\n12 5 7\n", [0, 12], (_index_text_py.ERROR_NOT_PAIR, 4, 9)),
        (b"0 12 # trailing comment\n", [], (_index_text_py.ERROR_NOT_PAIR, 1, 0)),
        (b"0\n", [], (_index_text_py.ERROR_NOT_PAIR, 1, 0)),
        (b"0 -1\n", [], (_index_text_py.ERROR_NOT_PAIR, 1, 0)),
        (b"9223372036854775807 0\n", [9223372036854775807, 0], None),
        (b"0 9223372036854775808\n", [], (_index_text_py.ERROR_TOO_BIG, 1, 0)),
        (b"0 1\n" + b"9" * 5000 + b" 1\n", [0, 1], (_index_text_py.ERROR_TOO_BIG, 2, 4)),
        (b"0" * 5000 + b"1 2\n", [1, 2], None),
        (b"9" * 30 + b" x\n", [], (_index_text_py.ERROR_NOT_PAIR, 1, 0)),  # not a pair comes first
    ],
)
def test_grammar(parse, text, pairs, error):
    got_starts, _, got_error, _ = parse(text)
    assert got_starts.dtype == np.int64 and got_starts.tolist() == pairs[0::2]
    assert got_error == error


@pytest.mark.parametrize("parse", PARSERS)
def test_a_stretch_of_an_index_chains_from_where_it_begins(parse):
    assert parse(b"5 3\n8 2\n", 5)[3] is None
    assert parse(b"5 3\n9 2\n", 5)[3] == (_index_text_py.CHAIN_GAP, 1, 9, 2, 8)
    assert parse(b"6 3\n", 5)[3] == (_index_text_py.CHAIN_NOT_AT_ZERO, 0, 6, 3, 0)


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize(
    "text, end, fault",
    [
        (b"", 0, None),
        (b"0 12\n12 5\n", 17, None),
        (b"3 12\n15 5\n", 20, (_index_text_py.CHAIN_NOT_AT_ZERO, 0, 3, 12, 0)),
        (b"0 12\n13 5\n20 1\n", 21, (_index_text_py.CHAIN_GAP, 1, 13, 5, 12)),
        # the first overflow comes before a gap or a start other than 0, wherever it is
        (b"1 2\n7 1\n8 9223372036854775807\n", -(2**63) + 7, (_index_text_py.CHAIN_OVERFLOW, 2, 8, 2**63 - 1, 0)),
        # a malformed line ends the entries; the chain fault is that of the entries before it
        (b"0 12\n14 5\nx\n", 19, (_index_text_py.CHAIN_GAP, 1, 14, 5, 12)),
    ],
)
def test_chain(parse, text, end, fault):
    _, got_end, _, got_fault = parse(text)
    assert (got_end, got_fault) == (end, fault)


def test_a_big_index_parses_on_the_fast_path_and_in_c():
    rng = np.random.default_rng(5)
    lengths = rng.integers(16, 1 << 40, 300_000)
    table = np.stack([np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths], axis=1)
    text = index.format_index(table)
    fast = _index_text_py._canonical(text)
    assert fast is not None and np.array_equal(fast.reshape(-1, 2), table)
    slow, error = _index_text_py._by_line(text)
    assert error is None and np.array_equal(slow, fast)
    if NATIVE is not None:
        starts, end, error, fault = NATIVE.index_starts(text)
        assert error is None and fault is None and np.array_equal(starts, table[:, 0]) and end == table[-1].sum()


@needs_native
def test_native_parse_needs_no_more_memory_than_its_offsets():
    starts, *_ = NATIVE.index_starts(b"0 1\n" * 1000 + b"#\n" * 100_000)
    assert starts.base is not None and starts.nbytes == 8 * 1000 and len(starts) == 1000


@pytest.fixture(params=PARSERS)
def engine(request, monkeypatch):
    """load_index with each engine's parser."""
    monkeypatch.setattr(_engine, "index_starts", request.param)
    return request.param


@pytest.mark.parametrize(
    "text, line, record, words",
    [
        ("0 20\nnot numbers\n", 2, 1, "is not 'offset length': 'not numbers'"),
        ("0 20\n\n# c\n20 20 20\n", 4, 1, "is not 'offset length': '20 20 20'"),
        ("0 20\n20 99999999999999999999\n", 2, 1, "(20 99999999999999999999): a number does not fit in 64 bits"),
        ("0 20\n\n20 9223372036854775807\n", 3, 1, "offset + length overflows 64 bits"),
        ("\n5 20\n", 2, 0, "does not start at offset 0"),
        ("0 20\n# c\n25 20\n", 3, 1, "not contiguous (offset 25, but the entry before ends at 20)"),
    ],
)
def test_load_index_names_file_line_and_fault(tmp_path, engine, text, line, record, words):
    path = tmp_path / "bad.tfindex"
    path.write_text(text)
    with pytest.raises(IndexMismatchError) as info:
        index.load_index(path)
    err = info.value
    assert err.path == str(path) and err.record_number == record
    assert f"index line {line}" in err.reason and words in err.reason, err.reason
    assert str(path) in str(err)


def test_load_index_reads_what_it_wrote_with_a_member_table(tmp_path, engine):
    table = np.array([[0, 20], [20, 30], [50, 16]], dtype=np.int64)
    path = tmp_path / "x.tfindex"
    path.write_bytes(index.format_index(table) + b"#block-gzip 1\n#m 0 0\n#end 40 66\n")
    loaded = index.load_index(path)
    assert loaded.dtype == np.int64 and loaded.shape == (3, 2) and np.array_equal(loaded, table)
    path.write_bytes(b"")
    assert index.load_index(path).shape == (0, 2)
