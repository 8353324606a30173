"""reshard: exact multiset, balance, indexes, shuffle determinism, compression, the proof, failures."""

from collections import Counter

import pytest
from helpers import codecs
from helpers.jobs import FAST, entries, read_shards, run_job, summary_json, write_files

from pipelines import reshard
from tfrecord_beam import compression
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.digest import payload_digest
from tfrecord_beam.errors import CorruptRecordError
from tfrecord_beam.index import build_index, verify_index


def test_reshard_keeps_the_multiset_and_balances(tmp_path, capsys):
    data = write_files(tmp_path / "in", "a", [700, 1, 0, 1300])
    out = tmp_path / "out"
    code, stdout, err = run_job(
        reshard.main,
        ["--input", str(tmp_path / "in" / "*.tfrecord"), "--output_prefix", str(out / "part"), "--num_shards", "3"]
        + FAST,
        capsys,
    )
    assert code == 0, err
    shards = read_shards(out, "part-*-of-00003.tfrecord")
    assert len(shards) == 3
    assert [p for s in shards for p in s] == data  # contiguous ranges: the input, in order
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1
    for shard in sorted(out.glob("part-*.tfrecord")):
        verify_index(str(shard).replace(".tfrecord", ".tfindex"), str(shard))
    summary = summary_json(stdout)
    assert summary["records"] == len(data) and summary["files"] == 3
    assert summary["verified"].startswith("yes")
    assert "reshard:" in err  # progress on stderr
    assert not [e for e in entries(out) if e.startswith(".")]


# --shuffle's determinism for a seed (and that another seed gives another order, every record
# once): tests/jobs/test_pipelines_shuffle.py (test_same_seed_same_output_however_split, across
# splits and buffers; test_every_record_exactly_once_and_the_same_on_either_runner, across runners).


@pytest.mark.parametrize("kind", codecs.STREAMS)  # GZIP out: test_pipelines_blockgzip
def test_compression_in_and_out_and_target_bytes(tmp_path, capsys, kind):
    data = write_files(tmp_path / "in", "z", [400, 100], suffix=".tfrecord.gz")
    out = tmp_path / "out"
    code, stdout, err = run_job(
        reshard.main,
        [
            "--input",
            str(tmp_path / "in" / "*.gz"),
            "--output_prefix",
            str(out / "y"),
            "--target_shard_bytes",
            "2000",
            "--output_compression",
            kind,
            "--balance",
            "bytes",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    n = summary_json(stdout)["output_shards"]
    total = sum(p.stat().st_size for p in (tmp_path / "in").iterdir())
    assert n == -(-total // 2000) > 1
    shards = read_shards(out, "y-*.tfrecord" + compression.suffix(kind))
    assert len(shards) == n and Counter(p for s in shards for p in s) == Counter(data)
    for shard in out.glob("y-*.tfrecord" + compression.suffix(kind)):
        verify_index(str(shard) + ".tfindex", str(shard))


# reshard on multi_processing (2 worker processes): its output is exactly the input, in order, in
# tests/jobs/test_planned_blockgzip.py (block-gzip, balance bytes, equal to the uncompressed run) and
# tests/jobs/test_pipelines_skip_corrupt.py (plain, gzip and zlib inputs); a multiset-only check here
# cost one more pair of worker start-ups (~10 CPU s) and proved nothing those do not.


def test_corrupt_input_fails_and_leaves_nothing(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [200])
    path = tmp_path / "in" / "a-0.tfrecord"
    raw = bytearray(path.read_bytes())
    raw[3000] ^= 0xFF
    path.write_bytes(bytes(raw))
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_job(
        reshard.main, ["--input", str(path), "--output_prefix", str(out / "p"), "--num_shards", "2"] + FAST, capsys
    )
    assert code == 1
    assert "a-0.tfrecord" in err and "CRC" in err
    assert entries(out) == []


def test_corrupt_record_at_a_split_point_is_not_skipped(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [300])
    path = tmp_path / "in" / "a-0.tfrecord"
    offsets = build_index(str(path))[:, 0]
    victim = int(offsets[offsets >= 4000][0])  # the first record header of the second range
    raw = bytearray(path.read_bytes())
    raw[victim : victim + 8] = b"\xff" * 8  # its length field: range 2 resyncs past it, range 1 stops before it
    path.write_bytes(bytes(raw))
    code, _, err = run_job(
        reshard.main,
        [
            "--input",
            str(path),
            "--output_prefix",
            str(tmp_path / "o" / "p"),
            "--num_shards",
            "1",
            "--split_bytes",
            "4000",
        ]
        + FAST,
        capsys,
    )
    assert code == 1 and "a-0.tfrecord" in err and str(victim) in err  # named, never skipped
    assert entries(tmp_path / "o") == []


def test_no_match_and_unwritable_output(tmp_path, capsys):
    code, _, err = run_job(
        reshard.main,
        ["--input", str(tmp_path / "nothing*"), "--output_prefix", str(tmp_path / "o" / "p"), "--num_shards", "1"]
        + FAST,
        capsys,
    )
    assert code == 1 and "matches no files" in err
    write_files(tmp_path / "in", "a", [5])
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = run_job(
        reshard.main,
        ["--input", str(tmp_path / "in" / "*"), "--output_prefix", str(blocker / "p"), "--num_shards", "1"] + FAST,
        capsys,
    )
    assert code == 1 and "cannot write to output location" in err


def test_coverage_gap_and_checksum_mismatch_are_errors():
    parts = [_stages.Coverage("f", 0, 0, 100, 300), _stages.Coverage("f", 100, 150, 300, 300)]
    with pytest.raises(CorruptRecordError, match="bytes 100..150"):
        _stages.check_coverage("f", parts)
    _stages.check_coverage("f", [_stages.Coverage("f", 0, 0, 150, 300), _stages.Coverage("f", 100, 150, 300, 300)])
    with pytest.raises(CorruptRecordError, match="bytes 150..300"):
        _stages.check_coverage("f", [_stages.Coverage("f", 0, 0, 150, 300)])
    a = payload_digest([b"x", b"y"])
    assert a == payload_digest([b"y", b"x"])
    with pytest.raises(_stages.ChecksumMismatch):
        _stages.check_digests(a, payload_digest([b"x", b"x"]), "test")
