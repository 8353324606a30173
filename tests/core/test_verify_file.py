"""`verify_file` called directly (the command's tests go through `tfrecord-beam verify`): every
kind of problem with its offset and record number, where checking goes on and where it stops,
the result's counts, and the command's summary line and exit status over the same files."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pytest
from helpers import codecs

from tfrecord_beam import compression
from tfrecord_beam.cli import main as cli_main
from tfrecord_beam.cli.verify import VerifyResult, verify_file
from tfrecord_beam.index import create_index, default_index_path
from tfrecord_beam.records import FRAME_OVERHEAD, write_records

N = 8


def _payloads():
    return [bytes([65 + i]) * (50 + 13 * i) for i in range(N)]


def _file(tmp_path: Path, name: str = "data.tfrecord"):
    """An uncompressed file of N records; (path, record offsets, frame sizes)."""
    path = tmp_path / name
    payloads = _payloads()
    write_records(str(path), payloads)
    sizes = [len(p) + FRAME_OVERHEAD for p in payloads]
    offsets = [sum(sizes[:i]) for i in range(N)]
    assert path.stat().st_size == sum(sizes)
    return path, offsets, sizes


def _flip(path: Path, *positions: int) -> None:
    data = bytearray(path.read_bytes())
    for at in positions:
        data[at] ^= 0x40
    path.write_bytes(bytes(data))


def _where(result: VerifyResult):
    return [(p.kind, p.offset, p.record) for p in result.problems]


def test_clean_file_counts_progress_and_index_states(tmp_path):
    path, offsets, sizes = _file(tmp_path)
    seen = []
    result = verify_file(str(path), progress=lambda records, nbytes: seen.append((records, nbytes)))
    assert result.ok and result.complete and result.problems == []
    assert (result.records, result.data_bytes, result.compression) == (N, sum(sizes), None)
    assert seen[-1] == (N, sum(sizes))
    assert result.index.state == "absent"
    create_index(str(path))
    assert verify_file(str(path)).index.state == "valid"
    as_dict = json.loads(json.dumps(verify_file(str(path)).to_dict()))
    assert as_dict["ok"] is True and as_dict["index"]["state"] == "valid" and as_dict["compression"] == "none"


def test_payload_crc_problems_are_skipped_one_record_each_with_exact_numbers(tmp_path):
    path, offsets, sizes = _file(tmp_path)
    _flip(path, offsets[1] + 14, offsets[5] + 20)  # inside two payloads: their lengths stay sound
    result = verify_file(str(path))
    assert _where(result) == [("corrupt", offsets[1], 1), ("corrupt", offsets[5], 5)]
    assert all("skipped this record" in p.message and str(path) in p.message for p in result.problems)
    assert result.complete and not result.ok
    assert result.records == N - 2 and result.data_bytes == sum(sizes) - sizes[1] - sizes[5]
    assert result.index is None  # the index is checked only over clean data


def test_lost_length_resyncs_and_numbers_records_again_only_when_the_length_was_right(tmp_path):
    path, offsets, _ = _file(tmp_path)
    _flip(path, offsets[2] + 1, offsets[6] + 20)  # the length itself, then a later payload
    result = verify_file(str(path))
    assert _where(result) == [("corrupt", offsets[2], 2), ("corrupt", offsets[6], None)]
    assert f"resynced at byte offset {offsets[3]}" in result.problems[0].message
    assert "record numbers after it unknown" in result.problems[0].message
    assert result.complete and result.records == N - 2

    path, offsets, _ = _file(tmp_path, "crc.tfrecord")
    _flip(path, offsets[2] + 9, offsets[6] + 20)  # the length's CRC: the length is still the true one
    result = verify_file(str(path))
    assert _where(result) == [("corrupt", offsets[2], 2), ("corrupt", offsets[6], 6)]
    assert "unknown" not in result.problems[0].message


@pytest.mark.parametrize("keep", [5, 20], ids=["in-header", "in-payload"])
def test_truncation_stops_the_check_at_the_last_record(tmp_path, keep):
    path, offsets, sizes = _file(tmp_path)
    path.write_bytes(path.read_bytes()[: offsets[-1] + keep])
    result = verify_file(str(path))
    assert _where(result) == [("truncated", offsets[-1], N - 1)]
    assert not result.complete and result.records == N - 1 and result.data_bytes == sum(sizes[:-1])


def test_max_problems_stops_early(tmp_path):
    path, offsets, _ = _file(tmp_path)
    _flip(path, *(offsets[i] + 14 for i in (1, 3, 5)))
    result = verify_file(str(path), max_problems=2)
    assert _where(result) == [("corrupt", offsets[1], 1), ("corrupt", offsets[3], 3)]
    assert not result.complete


def test_stale_and_invalid_indexes_are_problems(tmp_path):
    path, offsets, sizes = _file(tmp_path)
    other = tmp_path / "other.tfrecord"
    write_records(str(other), [b"x" * 7] * N)
    create_index(str(other))
    Path(default_index_path(str(path))).write_bytes(Path(default_index_path(str(other))).read_bytes())
    result = verify_file(str(path))
    assert result.records == N and result.complete  # the data itself is fine
    assert [p.kind for p in result.problems] == ["index"] and result.index.state == "stale"
    detail = f"record 0: index says offset 0 length {7 + FRAME_OVERHEAD} but the data has offset 0 length {sizes[0]}"
    assert result.problems[0].message == f"{default_index_path(str(path))}: stale index: {detail}"

    Path(default_index_path(str(path))).write_text("not an index\n")
    result = verify_file(str(path))
    assert [p.kind for p in result.problems] == ["index"] and result.index.state == "invalid"


def test_parse_reports_payloads_that_are_no_example(tmp_path):
    path = tmp_path / "junk.tfrecord"
    write_records(str(path), [b"", b"\xff\xff\xff", b""])  # b"" is an empty Example
    assert verify_file(str(path)).ok  # the framing is fine
    result = verify_file(str(path), parse=True)
    assert _where(result) == [("decode", FRAME_OVERHEAD, 1)] and result.records == 3


@pytest.mark.parametrize("kind", codecs.COMPRESSED)
def test_compressed_files(tmp_path, kind):
    """A payload CRC problem is stepped over (its length is sound); lost framing and a damaged
    or cut stream end the check, since a compressed stream cannot be searched for a resync."""
    path, offsets, sizes = _file(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[offsets[3] + 14] ^= 0x40
    packed = tmp_path / ("payload.tfrecord" + compression.suffix(kind))
    packed.write_bytes(codecs.compress(kind, bytes(raw)))
    result = verify_file(str(packed))
    assert _where(result) == [("corrupt", offsets[3], 3)] and result.complete and result.records == N - 1
    assert result.compression == kind

    raw[offsets[3] + 14] ^= 0x40
    raw[offsets[5] + 1] ^= 0x40  # a length: framing lost
    packed.write_bytes(codecs.compress(kind, bytes(raw)))
    result = verify_file(str(packed))
    assert _where(result) == [("corrupt", offsets[5], 5)] and not result.complete and result.records == 5
    assert "framing lost" in result.problems[0].message

    raw[offsets[5] + 1] ^= 0x40
    whole = codecs.compress(kind, bytes(raw))
    cut = tmp_path / ("cut.tfrecord" + compression.suffix(kind))
    cut.write_bytes(whole[: len(whole) // 2])
    result = verify_file(str(cut))
    assert [p.kind for p in result.problems] == ["truncated"] and not result.complete
    assert result.records < N and result.problems[0].offset == sum(sizes[: result.records])
    assert result.records > 0 or kind == "zstd"  # zstd decodes whole blocks (128 KiB): none before the cut


def test_damaged_gzip_stream_is_corrupt_and_ends_the_check(tmp_path):
    path, _, sizes = _file(tmp_path)
    data = bytearray(gzip.compress(path.read_bytes()))
    struct.pack_into("<I", data, len(data) - 8, struct.unpack_from("<I", data, len(data) - 8)[0] ^ 1)  # trailer CRC
    bad = tmp_path / "bad.tfrecord.gz"
    bad.write_bytes(bytes(data))
    result = verify_file(str(bad))
    assert _where(result) == [("corrupt", sum(sizes), N)] and not result.complete
    assert "cannot be inflated" in result.problems[0].message and result.records == N


def test_unreadable_files_are_problems_not_exceptions(tmp_path):
    path, _, _ = _file(tmp_path)
    result = verify_file(str(path), compression="bogus")
    assert [p.kind for p in result.problems] == ["unreadable"] and "bogus" in result.problems[0].message
    missing = tmp_path / "missing.tfrecord"
    result = verify_file(str(missing))
    assert [p.kind for p in result.problems] == ["unreadable"] and str(missing) in result.problems[0].message
    assert not result.complete and result.records == 0


def test_command_summary_and_exit_status(tmp_path, capsys):
    good, _, sizes = _file(tmp_path, "good.tfrecord")
    bad, offsets, _ = _file(tmp_path, "bad.tfrecord")
    _flip(bad, offsets[4] + 14)
    assert cli_main(["verify", str(good)]) == 0
    out = capsys.readouterr().out
    assert f"OK    {good}: {N} records" in out
    assert cli_main(["verify", str(good), str(bad)]) == 3
    out = capsys.readouterr().out
    assert f"FAIL  {bad}: 1 problem(s), {N - 1} intact records" in out
    assert cli_main(["verify", "--json", str(good), str(bad)]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and [f["ok"] for f in report["files"]] == [True, False]
    assert report["files"][1]["problems"][0]["record"] == 4
    assert sum(f["records"] for f in report["files"]) == 2 * N - 1
