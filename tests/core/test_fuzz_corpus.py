"""The fuzzing regression corpus (tests/fuzz_corpus/, from fuzz/run_fuzz.sh) through both
engines, read the way the libFuzzer harness (fuzz/fuzz_core.c) reads each input: a mode byte,
then bytes that are scanned as frames and decoded as Examples and SequenceExamples, and whose
Example statistics (inspect's compiled walk) are those of the per-record parse."""

import pytest
from helpers.fixtures import FUZZ_CORPUS as CORPUS
from helpers.inspect_stats import one_buffer, stats_of
from helpers.parity import both, needs_native

from tfrecord_beam.cli.inspection import DatasetStats

NAMES = ["a", "b", "tokens", "ints", "floats", "dup", "bytes_utf8", "", "ключ", "length", "words", "weights"]


def harness_case(blob: bytes):
    """(records, names, kinds, mode) exactly as fuzz_core.c derives them."""
    mode, data = blob[0], blob[1:]
    cut = (mode * 131) % (len(data) + 1) if data else 0
    nf = 1 + (mode >> 4) % len(NAMES)
    names = [n.encode() for n in NAMES[:nf]]
    kinds = [1 + (j + mode) % 3 for j in range(nf)]
    return [data, data[:cut], data[cut:]], names, kinds, mode


@pytest.mark.parametrize("path", sorted(CORPUS.iterdir()) if CORPUS.is_dir() else [], ids=lambda p: p.name[:12])
def test_corpus_file_both_engines(path):
    records, names, kinds, mode = harness_case(path.read_bytes())
    both("scan_frames", records[0], bool(mode & 1))
    cols, err = both("decode_examples", records, names, kinds)
    if err is None:
        enc = [(n, k, c[0], c[1], c[2], c[3]) for n, k, c in zip(names, kinds, cols)]
        both("encode_examples", enc, len(records))
    half = len(names) // 2
    both("decode_sequence_examples", records, names[:half], kinds[:half], names[half:], kinds[half:])


@needs_native
@pytest.mark.parametrize("path", sorted(CORPUS.iterdir()) if CORPUS.is_dir() else [], ids=lambda p: p.name[:12])
def test_corpus_file_statistics(path):
    records, _, _, _ = harness_case(path.read_bytes())
    walked = DatasetStats()
    walked.add_payloads(*one_buffer(records))
    assert walked.to_dict() == stats_of(records).to_dict()


def test_corpus_is_there():
    assert CORPUS.is_dir() and any(CORPUS.iterdir())
