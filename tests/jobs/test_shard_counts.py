"""Arguments the inputs refute, refused before the pipeline (issue 34 item 15): mix with one
file in two sources or --total_records 0, and reshard asking far more shards than the inputs
can hold records (100,000 shards of 750 records wrote empty files for many minutes)."""

from __future__ import annotations

import os
import time

import pytest
from helpers.jobs import FAST, run_job, write_files

from pipelines import _shard_count, mix, reshard
from tfrecord_beam.index import create_index


def _mix_args(tmp_path, *sources, total="10"):
    argv = []
    for source in sources:
        argv += ["--source", source]
    return argv + ["--total_records", total, "--output_prefix", str(tmp_path / "out" / "m")] + FAST


@pytest.mark.parametrize("spelling", ["same", "glob", "relative"])
def test_mix_refuses_a_file_in_two_sources(tmp_path, capsys, monkeypatch, spelling):
    write_files(tmp_path / "a", "a", [20])
    write_files(tmp_path / "b", "b", [20])
    shared = tmp_path / "a" / "a-0.tfrecord"
    other = {
        "same": str(shared),
        "glob": str(tmp_path / "a" / "*.tfrecord"),
        "relative": os.path.join("a", "..", "a", "a-0.tfrecord"),
    }[spelling]
    monkeypatch.chdir(tmp_path)
    code, out, err = run_job(
        mix.main, _mix_args(tmp_path, f"{shared}=1", f"{tmp_path / 'b'}/*.tfrecord=1", f"{other}=2"), capsys
    )
    assert code == 2, err
    assert "a-0.tfrecord" in err and "a file may be in one source only" in err
    assert f"--source {shared}=1" in err and f"--source {other}=2" in err
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_mix_refuses_zero_total_records(tmp_path, capsys):
    write_files(tmp_path / "a", "a", [5])
    with pytest.raises(SystemExit) as info:  # argparse's usage error, before anything is opened
        mix.main(_mix_args(tmp_path, f"{tmp_path / 'a'}/*.tfrecord=1", total="0"))
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--total_records: must be at least 1, not 0" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("indexed", [True, False])
def test_reshard_refuses_far_more_shards_than_records_before_the_pipeline(tmp_path, capsys, indexed):
    write_files(tmp_path / "in", "a", [400, 350])
    if indexed:
        for name in ("a-0.tfrecord", "a-1.tfrecord"):
            create_index(str(tmp_path / "in" / name))
    argv = ["--input", str(tmp_path / "in" / "*.tfrecord"), "--output_prefix", str(tmp_path / "o" / "t")]
    started = time.monotonic()
    code, _, err = run_job(reshard.main, argv + ["--num_shards", "100000"] + FAST, capsys)
    assert code == 2, err
    assert time.monotonic() - started < 30
    assert "--num_shards 100000" in err and "100,000 shards" in err
    if indexed:
        assert "750 records (from their indexes)" in err and "99,250 shards would be empty" in err
    else:
        assert "at most" in err and "one per 16 bytes" in err
    assert not (tmp_path / "o").exists() or os.listdir(tmp_path / "o") == []


def test_reshard_by_target_bytes_is_held_to_the_same_bound(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [30])
    create_index(str(tmp_path / "in" / "a-0.tfrecord"))
    argv = ["--input", str(tmp_path / "in"), "--output_prefix", str(tmp_path / "o" / "t"), "--target_shard_bytes", "1"]
    code, _, err = run_job(reshard.main, argv + FAST, capsys)
    assert code == 2 and "--target_shard_bytes 1" in err and "30 records (from their indexes)" in err, err


def test_some_empty_shards_are_allowed_with_a_warning_up_front():
    said = []
    bound = _shard_count.RecordsBound(750, True)
    _shard_count.check_shards("reshard", "--num_shards 1500", 1500, bound, said.append)
    assert said == [
        "reshard: warning: 1,500 shards asked of inputs that hold 750 records (from their indexes): "
        "750 shards will be empty"
    ]
    _shard_count.check_shards("reshard", "--num_shards 700", 700, bound, said.append)
    _shard_count.check_shards("reshard", "--num_shards 10**6", 10**6, None, said.append)  # no bound: no word
    assert len(said) == 1
    with pytest.raises(_shard_count.jobtools.UsageError, match="ask for at most 1,774 shards"):
        _shard_count.check_shards("reshard", "--num_shards 1775", 1775, bound, said.append)


@pytest.mark.parametrize("kind", ["gzip", "large"])
def test_reshard_counts_before_the_pipeline_when_nothing_bounds_the_inputs(tmp_path, capsys, kind):
    """A compressed input without an index (no bound) or records of more than 16 bytes (the size
    bound above the count asked): the records are counted before the pipeline, and 100,000
    shards of 750 records are refused naming the numbers (attack round 4)."""
    from tfrecord_beam.records import write_records

    src = tmp_path / ("z.tfrecord.gz" if kind == "gzip" else "big.tfrecord")
    pad = 10 if kind == "gzip" else 3000
    write_records(str(src), [os.urandom(pad) for _ in range(750)], compression="gzip" if kind == "gzip" else None)
    argv = ["--input", str(src), "--output_prefix", str(tmp_path / "o" / "t"), "--num_shards", "100000"]
    code, _, err = run_job(reshard.main, argv + FAST, capsys)
    assert code == 2, err
    assert "750 records (counted)" in err and "99,250 shards would be empty" in err and "at most 1,774 shards" in err
    assert not (tmp_path / "o").exists() or os.listdir(tmp_path / "o") == []


def test_a_count_that_cannot_end_is_warned_of_once_up_front(tmp_path):
    from tfrecord_beam.records import write_records

    src = tmp_path / "z.tfrecord.gz"
    write_records(str(src), [b"x"] * 50, compression="gzip")
    said = []
    _shard_count.settle_shards(
        "reshard", "--num_shards 5000", 5000, [str(src)], "auto", os.path.getsize, said.append, budget_s=-1
    )
    assert len(said) == 1 and "warning" in said[0] and "record count is unknown" in said[0] and "5,000" in said[0]
    said.clear()  # enough records counted: no word, the count stops at the number asked
    _shard_count.settle_shards(
        "reshard", "--num_shards 1500", 1500, [str(src)] * 40, "auto", os.path.getsize, said.append
    )
    assert said == []


def test_a_target_shard_bytes_refusal_suggests_a_byte_target():
    with pytest.raises(
        _shard_count.jobtools.UsageError, match=r"ask for --target_shard_bytes 57 or more \(1,774 shards at most\)"
    ):
        _shard_count.check_shards(
            "reshard",
            "--target_shard_bytes 1",
            100_000,
            _shard_count.RecordsBound(750, True),
            print,
            total_bytes=100_000,
        )
