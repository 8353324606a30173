"""build_index: indexes equal a sequential scan, ranges in parallel, corrupt files listed, options."""

import numpy as np

from pipeline_helpers import FAST, MULTI, entries, run_job, summary_json, write_files
from pipelines import build_index as job
from tfrecord_beam.index import build_index, load_index, verify_index


def test_indexes_match_a_sequential_scan(tmp_path, capsys):
    write_files(tmp_path, "a", [500, 0, 1, 20])
    write_files(tmp_path, "g", [300], suffix=".tfrecord.gz")
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "*.tfrecord*"), "--split_bytes", "3000", "--verify"] + FAST, capsys)
    assert code == 0, err
    for data in list(tmp_path.glob("a-*.tfrecord")) + list(tmp_path.glob("*.gz")):
        index = str(data).replace(".tfrecord", ".tfindex") if data.suffix == ".tfrecord" else str(data) + ".tfindex"
        assert np.array_equal(load_index(index), build_index(str(data)))
        verify_index(index, str(data))
    summary = summary_json(out)
    assert summary["indexed_files"] == 5 and summary["records"] == 821 and summary["corrupt_files"] == 0


def test_output_dir_skip_existing_and_multi_processing(tmp_path, capsys):
    write_files(tmp_path / "d", "a", [50, 60])
    idx = tmp_path / "idx"
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "d" / "*"), "--output_dir", str(idx)] + MULTI, capsys)
    assert code == 0, err
    assert entries(idx) == ["a-0.tfindex", "a-1.tfindex"]
    assert entries(tmp_path / "d") == ["a-0.tfrecord", "a-1.tfrecord"]
    verify_index(str(idx / "a-1.tfindex"), str(tmp_path / "d" / "a-1.tfrecord"))
    (idx / "a-0.tfindex").unlink()
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "d" / "*"), "--output_dir", str(idx), "--skip_existing"] + FAST, capsys)
    assert code == 0 and summary_json(out)["skipped_files"] == 1 and summary_json(out)["indexed_files"] == 1
    assert entries(idx) == ["a-0.tfindex", "a-1.tfindex"]


def test_corrupt_files_are_listed_counted_and_get_no_index(tmp_path, capsys):
    write_files(tmp_path, "a", [100, 100])
    bad = tmp_path / "a-1.tfrecord"
    raw = bytearray(bad.read_bytes())
    raw[2500] ^= 0x01
    bad.write_bytes(bytes(raw))
    trunc = tmp_path / "a-2.tfrecord"
    trunc.write_bytes((tmp_path / "a-0.tfrecord").read_bytes()[:-3])
    code, out, err = run_job(job.main, ["--input", str(tmp_path / "*.tfrecord"), "--verify", "--split_bytes", "1000"] + FAST, capsys)
    assert code == 2
    summary = summary_json(out)
    assert summary["corrupt_files"] == 2 and summary["indexed_files"] == 1
    assert any("a-1.tfrecord" in line and "CRC" in line for line in summary["corrupt"])
    assert any("a-2.tfrecord" in line for line in summary["corrupt"])
    assert entries(tmp_path) == ["a-0.tfindex", "a-0.tfrecord", "a-1.tfrecord", "a-2.tfrecord"]
    assert "corrupt, no index written" in err


def test_ranges_that_do_not_tile_the_file_are_rescanned(tmp_path):
    write_files(tmp_path, "a", [30])
    path = str(tmp_path / "a-0.tfrecord")
    full = build_index(path)
    frames = ("frames", 0, 0, full[:10, 0], full[:10, 1], None)
    later = ("frames", 999, int(full[12, 0]), full[12:, 0], full[12:, 1], None)  # records 10, 11 missing
    (tmp_path / "out").mkdir()
    job.assemble(path, [later, frames], False, str(tmp_path / "out"))
    assert np.array_equal(load_index(str(tmp_path / "out" / "a-0.tfindex")), full)


def test_no_matching_files(tmp_path, capsys):
    code, _, err = run_job(job.main, ["--input", str(tmp_path / "none*")] + FAST, capsys)
    assert code == 1 and "matches no files" in err
