"""mix: exact per-source counts, sampling with/without repetition, determinism, manifest, bad input."""

import json
from collections import Counter

import numpy as np
import pytest
from helpers.jobs import FAST, MULTI, entries, read_shards, run_job, summary_json, write_files
from hypothesis import given
from hypothesis import strategies as st

from pipelines import mix
from pipelines._common import JobError
from tfrecord_beam.example import decode_example
from tfrecord_beam.index import verify_index


@given(st.integers(0, 10**7), st.lists(st.floats(0.001, 1000), min_size=1, max_size=8))
def test_allocation_is_exact(total, weights):
    counts = mix.allocate(total, weights)
    assert sum(counts) == total
    shares = total * np.asarray(weights) / sum(weights)
    assert np.all(np.abs(np.asarray(counts) - shares) < 1)


def test_selection_without_and_with_repetition():
    taken = mix.selection(3, 0, 100, 40)
    assert taken.sum() == 40 and taken.max() == 1
    assert np.array_equal(taken, mix.selection(3, 0, 100, 40))
    assert not np.array_equal(taken, mix.selection(4, 0, 100, 40))
    repeated = mix.selection(3, 1, 10, 25)
    assert repeated.sum() == 25 and set(repeated.tolist()) == {2, 3} and (repeated == 3).sum() == 5
    with pytest.raises(JobError, match="no records"):
        mix.selection(0, 0, 0, 5)


def _mix(tmp_path, capsys, name, seed=1, extra=(), runner=FAST):
    return run_job(
        mix.main,
        [
            "--source",
            f"{tmp_path / 'a'}/*.tfrecord=3",
            "--source",
            f"{tmp_path / 'b'}/*.tfrecord=1",
            "--total_records",
            "400",
            "--output_prefix",
            str(tmp_path / name / "m"),
            "--num_shards",
            "3",
            "--seed",
            str(seed),
            *extra,
        ]
        + runner,
        capsys,
    )


def test_mix_counts_manifest_and_interleaving(tmp_path, capsys):
    a = write_files(tmp_path / "a", "a", [200, 300], tag=1)  # 500 available, 300 wanted: sampled
    b = write_files(tmp_path / "b", "b", [40], tag=2)  # 40 available, 100 wanted: repeated
    code, out, err = _mix(tmp_path, capsys, "o1")
    assert code == 0, err
    shards = read_shards(tmp_path / "o1", "m-*-of-00003.tfrecord")
    flat = [p for s in shards for p in s]
    assert len(flat) == 400
    tags = Counter(int(decode_example(p)["tag"][0]) for p in flat)
    assert tags == {1: 300, 2: 100}
    from_a = [p for p in flat if p in set(a)]
    assert len(set(from_a)) == 300  # without replacement
    counts_b = Counter(p for p in flat if p in set(b))
    assert sorted(set(counts_b.values())) == [2, 3] and len(counts_b) == 40
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    for s in shards:  # every shard holds an equal share of each source
        per_tag = Counter(int(decode_example(p)["tag"][0]) for p in s)
        assert per_tag[1] in (100,) and per_tag[2] in (33, 34)
    assert shards[0] != sorted(shards[0])  # shuffled within the shard
    for path in (tmp_path / "o1").glob("m-*.tfrecord"):
        verify_index(str(path).replace(".tfrecord", ".tfindex"), str(path))
    manifest = json.loads((tmp_path / "o1" / "m.manifest.json").read_text())
    assert [s["selected_records"] for s in manifest["sources"]] == [300, 100]
    assert [s["available_records"] for s in manifest["sources"]] == [500, 40]
    assert manifest["sources"][1]["sampling"].startswith("repeated")
    assert sum(s["records"] for s in manifest["shards"]) == 400
    assert [sum(s["per_source"][i] for s in manifest["shards"]) for i in (0, 1)] == [300, 100]
    assert summary_json(out)["verified"].startswith("yes")


def test_shuffle_buffer_changes_the_work_not_the_output(tmp_path, capsys):
    """--shuffle_buffer_bytes sets the runs' and buckets' sizes (64 KiB: many runs and buckets
    of a few records); the shards are their records in key order, so they come out byte for
    byte the same as with the default buffer; a buffer under 64 KiB is refused."""
    from tfrecord_beam.records import RecordWriter

    rng = np.random.default_rng(3)
    for name, files in (("a", 3), ("b", 1)):
        (tmp_path / name).mkdir()
        for k in range(files):
            with RecordWriter(str(tmp_path / name / f"{name}-{k}.tfrecord")) as writer:
                writer.write_many([rng.bytes(int(n)) for n in rng.integers(1, 6000, 150)])
    assert _mix(tmp_path, capsys, "default", seed=2)[0] == 0
    code, _, err = _mix(tmp_path, capsys, "small", seed=2, extra=["--shuffle_buffer_bytes", "65536"])
    assert code == 0, err
    default, small = (read_shards(tmp_path / n, "m-*.tfrecord") for n in ("default", "small"))
    assert sum(map(len, default)) == 400 and small == default
    code, _, err = _mix(tmp_path, capsys, "tiny", seed=2, extra=["--shuffle_buffer_bytes", "1000"])
    assert code == 1 and "--shuffle_buffer_bytes must be at least 65536" in err


@pytest.mark.parametrize(
    "source,message",
    [
        ("{a}/*.tfrecord=0", "positive"),
        ("{a}/*.tfrecord=-1", "positive"),
        ("{a}/*.tfrecord=abc", "number"),
        ("{a}/*.tfrecord", "GLOB=WEIGHT"),
        ("{a}/nothing*=1", "matches no files"),
    ],
)
def test_bad_sources_fail_cleanly(tmp_path, capsys, source, message):
    write_files(tmp_path / "a", "a", [10])
    out = tmp_path / "o"
    code, _, err = run_job(
        mix.main,
        ["--source", source.format(a=tmp_path / "a"), "--total_records", "5", "--output_prefix", str(out / "m")] + FAST,
        capsys,
    )
    assert code == 1 and message in err
    assert entries(out) == []


def test_empty_source_fails_and_leaves_nothing(tmp_path, capsys):
    write_files(tmp_path / "a", "a", [10])
    write_files(tmp_path / "b", "b", [0])
    code, _, err = _mix(tmp_path, capsys, "o")
    assert code == 1 and "no records" in err
    assert entries(tmp_path / "o") == []


def test_until_exhausted_uses_the_smallest_source_whole(tmp_path, capsys):
    a = write_files(tmp_path / "a", "a", [500], tag=1)
    b = write_files(tmp_path / "b", "b", [40], tag=2)
    code, out, err = run_job(
        mix.main,
        [
            "--source",
            f"{tmp_path / 'a'}/*.tfrecord=3",
            "--source",
            f"{tmp_path / 'b'}/*.tfrecord=1",
            "--until_exhausted",
            "--output_prefix",
            str(tmp_path / "o" / "m"),
            "--num_shards",
            "2",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    flat = [p for s in read_shards(tmp_path / "o", "m-*.tfrecord") for p in s]
    assert Counter(p for p in flat if p in set(b)) == Counter(b)  # every record of b, once
    from_a = [p for p in flat if p in set(a)]
    assert len(from_a) == 120 == len(set(from_a))
    manifest = json.loads((tmp_path / "o" / "m.manifest.json").read_text())
    assert manifest["total_records"] == 160 and manifest["mode"] == "until_exhausted"
    assert mix.exhausting_total([500, 40], [3, 1]) == 160
    assert mix.exhausting_total([10, 10, 0], [1, 1, 1]) == 0


def test_corrupt_selected_record_is_named_and_nothing_is_left(tmp_path, capsys):
    write_files(tmp_path / "a", "a", [60], tag=1)
    write_files(tmp_path / "b", "b", [30], tag=2)
    path = tmp_path / "b" / "b-0.tfrecord"
    from tfrecord_beam.index import build_index

    index = build_index(str(path))
    raw = bytearray(path.read_bytes())
    raw[int(index[12, 0]) + 14] ^= 0x08  # record 12's payload: the survey (headers only) cannot see it
    path.write_bytes(bytes(raw))
    code, _, err = run_job(
        mix.main,
        [
            "--source",
            f"{tmp_path / 'a'}/*.tfrecord=1",
            "--source",
            f"{path}=1",
            "--total_records",
            "120",
            "--output_prefix",
            str(tmp_path / "o" / "m"),
            "--num_shards",
            "2",
        ]
        + FAST,
        capsys,
    )
    assert code == 1
    assert "b-0.tfrecord" in err and "record 12" in err and f"byte offset {index[12, 0]}" in err
    assert entries(tmp_path / "o") == []


@pytest.fixture(scope="module")
def command_run(tmp_path_factory):
    """`python -m pipelines.mix` on multi_processing, run once for the module: (the inputs'
    directory, its job arguments less runner and output, its process, its output directory).
    Shared by the command test and the determinism test (the slow part is the workers' start)."""
    import os
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    data = tmp_path_factory.mktemp("mix_command")
    write_files(data / "a", "a", [60])
    write_files(data / "b", "b", [60], tag=1)
    args = ["--source", f"{data / 'a'}=1", "--source", f"{data / 'b'}=1", "--total_records", "50", "--num_shards", "2"]
    out = data / "out"
    env = dict(os.environ, PYTHONPATH=str(root))
    from helpers import zygote

    # `python -m` as the zygote runs it (runpy's _run_module_as_main, as the interpreter does)
    proc = zygote.run(
        [sys.executable, "-m", "pipelines.mix", *args, "--output_prefix", str(out / "m"), *MULTI],
        cwd=root,
        env=env,
        text=True,
        timeout=300,
    )
    return data, args, proc, out


def test_mix_as_a_command_on_workers_in_other_processes(command_run):
    """`python -m pipelines.mix` on SDK workers of their own (multi_processing here; Flink's and
    Spark's workers likewise): the job's classes travel to them, so they must be found by
    module name, not as `__main__.Task` (which failed with a PicklingError)."""
    data, _, proc, out = command_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary_json(proc.stdout)["verified"].startswith("yes")
    a, b = (set(p for s in read_shards(data / n, "*.tfrecord") for p in s) for n in ("a", "b"))
    got = Counter(p for s in read_shards(out, "m-*.tfrecord") for p in s)
    assert sum(got.values()) == 50 and set(got) <= a | b and max(got.values()) == 1


def test_mix_is_deterministic_for_a_seed(command_run, tmp_path, capsys):
    """The same seed gives the same shards on another runner (the command's multi_processing
    run against the FnApiRunner here); another seed gives others."""
    _, args, proc, out = command_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, seed in (("same", "0"), ("other", "1")):  # 0: the default, which the command ran with
        code, _, err = run_job(
            mix.main, [*args, "--output_prefix", str(tmp_path / name / "m"), "--seed", seed] + FAST, capsys
        )
        assert code == 0, err
    multi, same, other = (read_shards(d, "m-*.tfrecord") for d in (out, tmp_path / "same", tmp_path / "other"))
    assert sum(map(len, same)) == 50
    assert multi == same
    assert same != other


def test_selection_and_shards_do_not_depend_on_arrival_order(tmp_path):
    """mix's output is a function of the inputs and the seed only: the surveys reach the plan,
    the tasks the readers and the segment tables each shard writer in whatever order a runner
    delivers them (Flink, Spark and Prism differ from the FnApiRunner); here every stage's
    input is permuted and the shards must come out byte for byte the same."""
    from tfrecord_beam.beam import stages
    from tfrecord_beam.jobs._plan import survey

    counts = {0: [150, 90, 60], 1: [40]}  # source 1 repeated 3x plus a sample
    files = []
    for group, sizes in counts.items():
        written = write_files(tmp_path / f"s{group}", f"s{group}", sizes, tag=group)
        assert written
        files += [(group, str(p)) for p in sorted((tmp_path / f"s{group}").glob("*.tfrecord"))]
    surveys = []
    for number, (group, path) in enumerate(files):
        with open(path, "rb") as raw:
            surveys.append(survey(raw, path, None, number, group))

    def run(order_seed: int) -> list:
        rng = np.random.default_rng(order_seed)
        shuffled = [surveys[i] for i in rng.permutation(len(surveys))]
        tasks, _, _ = mix.plan_mix(shuffled, [0.6, 0.4], [180, 130], seed=5, num_shards=3)
        spill = tmp_path / f"spill-{order_seed}"
        spill.mkdir()
        select = mix.SelectFn(5, 3, str(spill), None)
        tables = []
        for k in rng.permutation(len(tasks)):
            tables += [out for out in select.process(tasks[k]) if isinstance(out, tuple)]
        out = tmp_path / f"out-{order_seed}"
        out.mkdir()
        spec = stages.ShardSpec(str(out), "m", 3, write_index=False)
        for shard in range(3):
            mine = [t for s, t in tables if s == shard]
            mix.write_mixed_shard(shard, [mine[i] for i in rng.permutation(len(mine))], spec, None)
        return read_shards(out, "m-*.tfrecord")

    first = run(0)
    assert sum(map(len, first)) == 310
    assert run(1) == first and run(2) == first
