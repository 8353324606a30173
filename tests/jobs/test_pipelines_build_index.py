"""build_index: indexes equal a sequential scan, corrupt files listed with record and offset, options."""

import numpy as np
import pytest
from helpers.jobs import FAST, MULTI, entries, run_job, summary_json, write_files

from pipelines import build_index as job
from tfrecord_beam.index import build_index, load_index, verify_index


def test_indexes_match_a_sequential_scan(tmp_path, capsys):
    write_files(tmp_path, "a", [500, 0, 1, 20])
    write_files(tmp_path, "g", [300], suffix=".tfrecord.gz")
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "*.tfrecord*"), "--verify"] + FAST, capsys)
    assert code == 0, err
    for data in list(tmp_path.glob("a-*.tfrecord")) + list(tmp_path.glob("*.gz")):
        index = str(data).replace(".tfrecord", ".tfindex") if data.suffix == ".tfrecord" else str(data) + ".tfindex"
        assert np.array_equal(load_index(index), build_index(str(data)))
        verify_index(index, str(data))
    summary = summary_json(out)
    assert summary["indexed_files"] == 5 and summary["records"] == 821 and summary["corrupt_files"] == 0


def _flip_a_length(path):
    """Record 37's length made exactly one record longer (it swallows the next record): the
    record and its byte offset."""
    good = build_index(str(path))
    raw = bytearray(path.read_bytes())
    victim = 37
    length = int(good[victim, 1]) - 16 + int(good[victim + 1, 1])
    raw[int(good[victim, 0]) : int(good[victim, 0]) + 8] = length.to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    return victim, int(good[victim, 0])


def _check_flipped(out: str, code: int, name: str, victim: int, offset: int, indexed: int) -> None:
    assert code == 3
    summary = summary_json(out)
    assert summary["corrupt_files"] == 1 and summary["indexed_files"] == indexed
    [line] = summary["corrupt"]
    assert name in line and f"record {victim}" in line and f"byte offset {offset}" in line
    assert "length CRC" in line


def test_output_dir_skip_existing_and_a_flipped_length_on_multi_processing(tmp_path, capsys):
    """One multi_processing run (2 workers) for both: the indexes go to --output_dir, none
    beside the data, and a file whose record 37's length was made one record longer gets no
    index and is reported (test_a_flipped_length_is_never_indexed's case, in other processes);
    then --skip_existing indexes only what is missing."""
    write_files(tmp_path / "d", "a", [50, 60, 100])
    victim, offset = _flip_a_length(tmp_path / "d" / "a-2.tfrecord")
    idx = tmp_path / "idx"
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "d" / "*"), "--output_dir", str(idx)] + MULTI, capsys)
    _check_flipped(out, code, "a-2.tfrecord", victim, offset, indexed=2)
    assert entries(idx) == ["a-0.tfindex", "a-1.tfindex"]
    assert entries(tmp_path / "d") == ["a-0.tfrecord", "a-1.tfrecord", "a-2.tfrecord"]
    verify_index(str(idx / "a-1.tfindex"), str(tmp_path / "d" / "a-1.tfrecord"))
    (idx / "a-0.tfindex").unlink()
    code, out, err = run_job(
        job.main, ["--input", str(tmp_path / "d" / "*"), "--output_dir", str(idx), "--skip_existing"] + FAST, capsys
    )
    assert code == 3 and summary_json(out)["skipped_files"] == 1 and summary_json(out)["indexed_files"] == 1
    assert entries(idx) == ["a-0.tfindex", "a-1.tfindex"]


def test_corrupt_files_are_listed_counted_and_get_no_index(tmp_path, capsys):
    write_files(tmp_path, "a", [100, 100])
    bad = tmp_path / "a-1.tfrecord"
    raw = bytearray(bad.read_bytes())
    raw[2500] ^= 0x01
    bad.write_bytes(bytes(raw))
    trunc = tmp_path / "a-2.tfrecord"
    trunc.write_bytes((tmp_path / "a-0.tfrecord").read_bytes()[:-3])
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "*.tfrecord"), "--verify"] + FAST, capsys)
    assert code == 3
    summary = summary_json(out)
    assert summary["corrupt_files"] == 2 and summary["indexed_files"] == 1
    assert any("a-1.tfrecord" in line and "CRC" in line for line in summary["corrupt"])
    assert any("a-2.tfrecord" in line for line in summary["corrupt"])
    assert entries(tmp_path) == ["a-0.tfindex", "a-0.tfrecord", "a-1.tfrecord", "a-2.tfrecord"]
    assert "corrupt, no index written" in err


def test_a_flipped_length_is_never_indexed(tmp_path, capsys):
    """Issue 10 item 10: record 0's length made exactly one record longer used to give a
    99-entry index, exit 0 (length CRCs were not checked without --verify). (On
    multi_processing: test_output_dir_skip_existing_and_a_flipped_length_on_multi_processing.)"""
    write_files(tmp_path, "a", [100])
    path = tmp_path / "a-0.tfrecord"
    victim, offset = _flip_a_length(path)
    code, out, err = run_job(job.main, ["--input", str(path)] + FAST, capsys)
    _check_flipped(out, code, "a-0.tfrecord", victim, offset, indexed=0)
    assert entries(tmp_path) == ["a-0.tfrecord"]


def test_large_records_are_walked_by_their_headers(tmp_path, capsys):
    """Records bigger than the walker's seek threshold (payloads skipped), mixed with small ones."""
    from tfrecord_beam.jobs._walk import SEEK_FRAME_BYTES
    from tfrecord_beam.records import write_records

    sizes = [10, SEEK_FRAME_BYTES * 3, 5, SEEK_FRAME_BYTES, SEEK_FRAME_BYTES * 700, 0, 3] * 3
    write_records(str(tmp_path / "big.tfrecord"), [bytes([i]) * n for i, n in enumerate(sizes)])
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "big.tfrecord")] + FAST, capsys)
    assert code == 0, err
    assert np.array_equal(load_index(str(tmp_path / "big.tfindex")), build_index(str(tmp_path / "big.tfrecord")))
    assert summary_json(out)["records"] == len(sizes)


def test_no_matching_files(tmp_path, capsys):
    code, _, err = run_job(job.main, ["--input", str(tmp_path / "none*")] + FAST, capsys)
    assert code == 1 and "matches no files" in err


@pytest.mark.parametrize("flag", ["--input_compression", "--compression"])  # the jobs' name, and the old one
def test_input_compression_flag_and_its_old_name(tmp_path, capsys, flag):
    from tfrecord_beam.records import write_records

    data = str(tmp_path / "z.bin")  # no suffix: the flag says what it is
    write_records(data, [b"a", b"bb", b"ccc"], compression="zstd")
    code, out, err = run_job(job.main, ["--input", data, flag, "ZST"] + FAST, capsys)
    assert code == 0, err
    assert summary_json(out)["records"] == 3
    assert np.array_equal(load_index(data + ".tfindex"), build_index(data, "zstd"))
