"""Job outputs (issue 12): manifest written last, commit journal (kills at every commit step),
overwrite policy, staging of dead runs, exit codes and one-line errors, --skip_corrupt."""

import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import zygote
from helpers.fixtures import REPO
from helpers.jobs import FAST, entries, payloads, run_job, stage_shards, summary_json, write_files

import pipelines
from pipelines import _common, build_index, mix, parquet_to_tfrecord, reshard, tfrecord_to_parquet
from tfrecord_beam import manifest as mf
from tfrecord_beam.beam import commit
from tfrecord_beam.errors import CorruptRecordError
from tfrecord_beam.index import build_index as index_of
from tfrecord_beam.records import read_records, write_records

JOBS = [importlib.import_module(f"pipelines.{name}") for name in pipelines.JOBS]


def stagings(directory: Path):
    return [n for n in entries(directory) if n.startswith(commit.TEMP_PREFIX)]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def reshard_args(inputs, prefix, shards, *extra):
    return ["--input", str(inputs), "--output_prefix", str(prefix), "--num_shards", str(shards), *extra] + FAST


# -- the manifest (core) -------------------------------------------------------------------------


def test_manifest_round_trip_validation_and_names(tmp_path):
    m = mf.Manifest(
        "reshard",
        "x",
        [mf.ShardEntry("x-00000-of-00001.tfrecord", 3, 60, 12, "00ff", "x-00000-of-00001.tfindex")],
        {"num_shards": 1},
        corrupt_records=1,
        dead_letters="_CORRUPT.x.jsonl",
    )
    back = mf.Manifest.from_json(m.to_json())
    assert back == m and back.records == 3
    assert back.files() == ["x-00000-of-00001.tfrecord", "x-00000-of-00001.tfindex", "_CORRUPT.x.jsonl"]
    bad = json.loads(m.to_json())
    bad["shards"][0]["name"] = "../evil"
    with pytest.raises(mf.ManifestError, match="bad file name"):
        mf.Manifest.from_json(json.dumps(bad), "m.json")
    bad = json.loads(m.to_json())
    bad["records"] = 4
    with pytest.raises(mf.ManifestError, match="not the sum"):
        mf.Manifest.from_json(json.dumps(bad))
    with pytest.raises(mf.ManifestError, match="not JSON"):
        mf.Manifest.from_json("{", "m.json")
    assert mf.manifest_path("out/train") == "out/_MANIFEST.train.json"
    assert mf.manifest_path("s3://b/o/t?endpoint_override=h:1") == "s3://b/o/_MANIFEST.t.json?endpoint_override=h:1"
    names = [
        "x-00000-of-00002.tfrecord",
        "x-00001-of-00002.tfindex",
        "x2-00000-of-00001.tfrecord",
        "x-extra.tfrecord",
        "_MANIFEST.x.json",
        "_MANIFEST.x2.json",
        "_CORRUPT.x.jsonl",
    ]
    assert mf.owned_by_prefix("x", names) == [
        "x-00000-of-00002.tfrecord",
        "x-00001-of-00002.tfindex",
        "_MANIFEST.x.json",
        "_CORRUPT.x.jsonl",
    ]


# -- overwrite policy ----------------------------------------------------------------------------


def test_existing_output_is_an_error_unless_overwrite(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [500, 500])
    inputs, out = tmp_path / "in" / "*.tfrecord", tmp_path / "out"
    assert run_job(reshard.main, reshard_args(inputs, out / "x", 4), capsys)[0] == 0
    before = entries(out)
    code, _, err = run_job(reshard.main, reshard_args(inputs, out / "x", 2), capsys)
    assert code == 1 and "pass --overwrite" in err and len(err.strip().splitlines()) == 1
    assert entries(out) == before  # untouched, nothing staged left
    assert run_job(reshard.main, reshard_args(inputs, out / "y", 1), capsys)[0] == 0  # another output, same dir
    code, _, err = run_job(reshard.main, reshard_args(inputs, out / "x", 2, "--overwrite"), capsys)
    assert code == 0, err
    assert [n for n in entries(out) if n.startswith("x")] == [
        "x-00000-of-00002.tfindex",
        "x-00000-of-00002.tfrecord",
        "x-00001-of-00002.tfindex",
        "x-00001-of-00002.tfrecord",
    ]
    assert "y-00000-of-00001.tfrecord" in entries(out) and not stagings(out)
    manifest = mf.read_manifest(str(out / "_MANIFEST.x.json"))
    assert manifest.records == 1000 and manifest.arguments["num_shards"] == 2 and manifest.job == "reshard"
    for entry in manifest.shards:
        assert mf.check_shard(entry, str(out / entry.name), full=True) == []
    assert sum(len(list(read_records(str(out / e.name)))) for e in manifest.shards) == 1000


@pytest.mark.parametrize("prefix", ["out/", "", "out/."])
def test_prefix_without_a_name_part_is_an_error(tmp_path, capsys, prefix):
    write_files(tmp_path / "in", "a", [5])
    code, _, err = run_job(
        reshard.main, reshard_args(tmp_path / "in" / "*", prefix and str(tmp_path) + "/" + prefix, 1), capsys
    )
    assert code == 1 and "no file name part" in err


# -- commit journal: a kill at every step is completed by the next run ---------------------------


def _stage(output, shards):
    entries_ = []
    for name, records in shards:
        write_records(output.temp_path(name + ".tfrecord"), records, index_path=output.temp_path(name + ".tfindex"))
        entries_.append(
            mf.ShardEntry(
                name + ".tfrecord",
                len(records),
                os.path.getsize(output.temp_path(name + ".tfrecord")),
                index=name + ".tfindex",
            )
        )
    return entries_


def _commit_in_child(prefix: str, shards, stop_after: int) -> int:
    """Commit `shards` over `prefix` (with overwrite) in a forked child killed after `stop_after` steps."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.environ[commit._STOP_ENV] = str(stop_after)
            commit._steps[0] = 0
            output = commit.Output(prefix, "test", {"run": "new"}, overwrite=True, say=lambda m: None)
            output.commit(_stage(output, shards))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status


def test_a_kill_at_any_commit_step_leaves_old_or_incomplete_and_the_next_run_completes(tmp_path):
    prefix = str(tmp_path / "x")
    old = [("x-00000-of-00002", payloads(5)), ("x-00001-of-00002", payloads(5, 1))]
    new = [("x-00000-of-00001", payloads(7, 2))]
    seen_states = set()
    for stop_after in range(1, 11):  # 9 steps in this commit; 10: it runs through
        for n in os.listdir(tmp_path):
            (tmp_path / n).unlink() if (tmp_path / n).is_file() else None
        first = commit.Output(prefix, "test", {"run": "old"}, overwrite=True, say=lambda m: None)
        first.commit(_stage(first, old))
        status = _commit_in_child(prefix, new, stop_after)
        killed = os.WIFSIGNALED(status)
        assert killed == (stop_after < 10)
        found = mf.find_manifest(prefix)
        if found:  # whatever a reader finds complete is consistent
            manifest = mf.read_manifest(found)
            for entry in manifest.shards:
                assert mf.check_shard(entry, str(tmp_path / entry.name), full=True) == []
            seen_states.add(manifest.arguments["run"])
        else:
            seen_states.add("incomplete")
        notes = []
        with pytest.raises(commit.OutputError, match="pass --overwrite"):  # completed, then it is existing output
            commit.Output(prefix, "test", {}, say=notes.append)
        assert (len(notes) == 1 and "completing the interrupted commit" in notes[0]) == killed
        manifest = mf.read_manifest(mf.find_manifest(prefix))
        assert manifest.arguments["run"] == "new" and manifest.records == 7
        assert sorted(entries(tmp_path)) == [
            "_MANIFEST.x.json",
            "x-00000-of-00001.tfindex",
            "x-00000-of-00001.tfrecord",
        ]
    assert seen_states == {"old", "incomplete", "new"}


def test_reshard_killed_in_its_commit_then_rerun(tmp_path, capsys):
    data = write_files(tmp_path / "in", "a", [300])
    inputs, out = tmp_path / "in" / "*.tfrecord", tmp_path / "out"
    # an earlier output of 4 shards (committed as a reshard run commits it) for the killed run to overwrite
    old = commit.Output(str(out / "x"), "reshard", {"num_shards": 4}, say=lambda m: None)
    old.commit(stage_shards(old, [(f"x-{k:05d}-of-00004", data[k * 75 : (k + 1) * 75]) for k in range(4)]))
    assert mf.read_manifest(str(out / "_MANIFEST.x.json")).records == 300
    env = dict(os.environ, PYTHONPATH=str(REPO), TFRECORD_BEAM_COMMIT_STOP_AFTER="4")
    proc = zygote.run(  # forked from the worker's zygote: the child's pid is its own, SIGKILL ends it
        [sys.executable, "-m", "pipelines.reshard"] + reshard_args(inputs, out / "x", 2, "--overwrite"),
        env=env,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "_MANIFEST.x.json").exists() and stagings(out)  # incomplete, and says so
    code, _, err = run_job(reshard.main, reshard_args(inputs, out / "x", 3, "--overwrite"), capsys)
    assert code == 0 and "completing the interrupted commit of a dead reshard run" in err
    manifest = mf.read_manifest(str(out / "_MANIFEST.x.json"))
    assert len(manifest.shards) == 3 and manifest.records == 300
    assert sorted(n for n in entries(out) if n.endswith(".tfrecord")) == [e.name for e in manifest.shards]
    assert not stagings(out)


def test_sigint_during_the_commit_finishes_it_and_exits_130(tmp_path):
    write_files(tmp_path / "in", "a", [100])
    env = dict(
        os.environ, PYTHONPATH=str(REPO), TFRECORD_BEAM_COMMIT_STOP_AFTER="2", TFRECORD_BEAM_COMMIT_STOP_SIGNAL="INT"
    )
    proc = zygote.run(  # the zygote's child has a fresh interpreter's SIGINT handler
        [sys.executable, "-m", "pipelines.reshard"] + reshard_args(tmp_path / "in" / "*", tmp_path / "o" / "x", 2),
        env=env,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130
    lines = [text for text in proc.stderr.splitlines() if not text.startswith("[")]  # progress lines start with [time]
    assert lines == ["reshard: interrupted after the output was committed"]
    assert mf.read_manifest(str(tmp_path / "o" / "_MANIFEST.x.json")).records == 100


# -- staging of other runs -----------------------------------------------------------------------


def _fake_staging(directory: Path, prefix: str, **owner):
    staging = directory / (commit.TEMP_PREFIX + "feedfacecafe")
    staging.mkdir(parents=True)
    (staging / "x-00000-of-00001.tfrecord").write_bytes(b"partial")
    record = {
        "host": socket.gethostname(),
        "pid": dead_pid(),
        "output": prefix,
        "job": "reshard",
        "started_utc": "T",
        "pid_space": commit._pid_space(),
    }
    record.update(owner)
    if owner.get("no_owner") is None:
        (staging / commit.OWNER).write_text(json.dumps(record))
    return staging


def test_staging_of_dead_runs_is_removed_and_live_runs_are_left_alone(tmp_path):
    prefix = str(tmp_path / "x")
    notes = []
    staging = _fake_staging(tmp_path, prefix)
    output = commit.Output(prefix, "test", say=notes.append)
    assert not staging.exists() and "removing staging of a dead reshard run" in notes[0]
    output.abort()
    live = _fake_staging(tmp_path, prefix, pid=os.getpid(), proc_start=commit._process_start())
    with pytest.raises(commit.OutputError, match="is writing this output now"):
        commit.Output(prefix, "test", say=notes.append)
    assert live.exists() and (live / "x-00000-of-00001.tfrecord").exists()
    for n in os.listdir(live):
        os.remove(live / n)
    live.rmdir()
    remote = _fake_staging(tmp_path, prefix, host="some-other-host", pid=1)
    with pytest.raises(commit.OutputError, match="another host"):
        commit.Output(prefix, "test", say=notes.append)
    assert remote.exists()
    (remote / commit.OWNER).write_text(
        json.dumps(
            {"host": socket.gethostname(), "pid": dead_pid(), "output": prefix, "pid_space": "another container"}
        )
    )
    with pytest.raises(commit.OutputError, match="cannot tell"):  # same host name, other pids: unknown
        commit.Output(prefix, "test", say=notes.append)
    (remote / commit.OWNER).unlink()  # no owner record: left alone, mentioned
    notes.clear()
    commit.Output(str(tmp_path / "x"), "test", say=notes.append).abort()
    assert remote.exists() and "no owner record" in notes[0]
    other = _fake_staging(tmp_path / "d2", str(tmp_path / "d2" / "other"))  # another output's: not ours
    commit.Output(str(tmp_path / "d2" / "x"), "test", say=notes.append).abort()
    assert other.exists()


def test_of_two_runs_started_together_only_the_first_commits(tmp_path):
    prefix = str(tmp_path / "x")
    late = commit.Output(prefix, "test", say=lambda m: None)
    early = _fake_staging(tmp_path, prefix, pid=os.getpid(), proc_start=commit._process_start(), started=0)
    with pytest.raises(commit.OutputError, match="is writing this output too"):
        late.commit(_stage(late, [("x-00000-of-00001", payloads(3))]))
    late.abort()
    assert mf.find_manifest(prefix) is None and early.exists()


def test_dead_writers_temp_files_are_found(tmp_path):
    from tfrecord_beam import fs

    mine = tmp_path / f".a.tfindex{fs.TEMP_MARK}{fs.temp_owner_tag()}-0123456789ab"
    dead = tmp_path / f".a.tfindex{fs.TEMP_MARK}{dead_pid()}@{fs._HOST}-0123456789ab"
    elsewhere = tmp_path / f".a.tfindex{fs.TEMP_MARK}1@otherhost-0123456789ab"
    for p in (mine, dead, elsewhere):
        p.write_bytes(b"x")
    assert fs.stale_temp_files(str(tmp_path)) == [str(dead)]


def test_build_index_removes_temporaries_of_dead_writers(tmp_path, capsys):
    from tfrecord_beam import fs

    write_files(tmp_path, "a", [10])
    dead = tmp_path / f".a-0.tfindex{fs.TEMP_MARK}{dead_pid()}@{fs._HOST}-0123456789ab"
    dead.write_bytes(b"half an index")
    code, _, err = run_job(build_index.main, ["--input", str(tmp_path / "*.tfrecord")] + FAST, capsys)
    assert code == 0 and not dead.exists() and "no longer running" in err
    assert entries(tmp_path) == ["a-0.tfindex", "a-0.tfrecord"]


# -- exit codes and one-line errors for every job ------------------------------------------------


def _job_args(job, tmp_path: Path, out_prefix: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_files(tmp_path / "in", "a", [20])
    pq.write_table(pa.table({"a": [1, 2]}), str(tmp_path / "in" / "t.parquet"))
    tf = str(tmp_path / "in" / "*.tfrecord")
    if job is build_index:
        return ["--input", tf, "--output_dir", out_prefix]
    if job is mix:
        return ["--source", tf + "=1", "--total_records", "5", "--output_prefix", out_prefix]
    if job is parquet_to_tfrecord:
        return ["--input", str(tmp_path / "in" / "t.parquet"), "--output_prefix", out_prefix]
    return ["--input", tf, "--output_prefix", out_prefix] + (["--num_shards", "1"] if job is reshard else [])


@pytest.mark.parametrize("job", JOBS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_job_sigint_is_130_with_one_line_and_no_staging(job, tmp_path, capsys, monkeypatch):
    def interrupted(build, options):
        raise RuntimeError("Traceback ...\nKeyboardInterrupt [while running 'WriteShards']")

    monkeypatch.setattr(_common, "run_pipeline", interrupted)
    code, out, err = run_job(job.main, _job_args(job, tmp_path, str(tmp_path / "o" / "x")) + FAST, capsys)
    assert code == 130
    lines = err.strip().splitlines()
    assert "interrupted" in lines[-1] and sum("interrupted" in text or "rror" in text for text in lines) == 1
    assert "Traceback" not in err and not stagings(tmp_path / "o")


@pytest.mark.parametrize("job", JOBS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_job_checks_an_unwritable_output_before_any_work(job, tmp_path, capsys, monkeypatch):
    from tfrecord_beam.beam import stages

    def no_work(*a, **k):
        raise AssertionError("work started before the output location was checked")

    monkeypatch.setattr(_common, "run_pipeline", no_work)
    monkeypatch.setattr(stages, "plan_ranges", no_work)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = run_job(job.main, _job_args(job, tmp_path, str(blocker / "x")) + FAST, capsys)
    assert code == 1 and "cannot write to output location" in err and len(err.strip().splitlines()) == 1


PROGRESS_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] reshard: ")  # the plan and progress lines are timestamped


def test_one_line_even_from_worker_processes_and_verbose_shows_the_traceback(tmp_path, capfd):
    from helpers.jobs import MULTI

    write_files(tmp_path / "in", "a", [50])
    path = tmp_path / "in" / "a-0.tfrecord"
    raw = bytearray(path.read_bytes())
    raw[700] ^= 0xFF
    path.write_bytes(bytes(raw))
    args = ["--input", str(path), "--output_prefix", str(tmp_path / "o" / "x"), "--num_shards", "1"]
    code, _, err = run_job(reshard.main, args + MULTI, capfd)  # capfd: the workers' stderr too
    lines = err.strip().splitlines()
    progress = [line for line in lines if PROGRESS_LINE.match(line)]  # one every 5 s: more on a slow machine
    assert code == 1 and "Traceback" not in err, err
    assert len(lines) - len(progress) == 1 and lines[-1].startswith("reshard: error:"), err  # the one error line
    code, _, err = run_job(reshard.main, reshard_args(path, tmp_path / "o" / "x", 1, "--verbose"), capfd)
    assert code == 1 and "Traceback" in err and err.strip().splitlines()[-1].startswith("reshard: error:")


# -- --skip_corrupt ------------------------------------------------------------------------------


def _damaged(path: Path, n: int):
    """A file of n records with record 10's payload and record n-100's length field damaged."""
    data = payloads(n)
    write_records(str(path), data)
    offsets = index_of(str(path))[:, 0]
    raw = bytearray(path.read_bytes())
    raw[int(offsets[10]) + 14] ^= 0xFF  # payload byte: payload CRC fails, length still sound
    raw[int(offsets[n - 100]) + 2] ^= 0xFF  # length field: its CRC fails, resync needed
    path.write_bytes(bytes(raw))
    return data, [int(offsets[10]), int(offsets[n - 100])]


def _dead_letters(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_reshard_skip_corrupt_counts_lists_and_records_in_the_manifest(tmp_path, capsys):
    path = tmp_path / "in" / "a.tfrecord"
    path.parent.mkdir()
    data, bad = _damaged(path, 300)
    out = tmp_path / "o"
    code, _, err = run_job(reshard.main, reshard_args(path, out / "x", 2, "--split_bytes", "3000"), capsys)
    # without it the job fails naming the file and one of the damaged records (the planned path's
    # header survey meets the damaged length first)
    assert code == 1 and str(path) in err and any(f"byte offset {b}" in err for b in bad)
    code, stdout, err = run_job(
        reshard.main, reshard_args(path, out / "x", 2, "--split_bytes", "3000", "--skip_corrupt"), capsys
    )
    assert code == 0, err
    summary = summary_json(stdout)
    assert summary["corrupt_records"] == 2 and summary["records"] == 298
    letters = _dead_letters(out / "_CORRUPT.x.jsonl")
    assert sorted(e["offset"] for e in letters) == bad and {e["file"] for e in letters} == {str(path)}
    assert all("CRC" in e["reason"] for e in letters)
    manifest = mf.read_manifest(str(out / "_MANIFEST.x.json"))
    assert manifest.corrupt_records == 2 and manifest.dead_letters == "_CORRUPT.x.jsonl" and manifest.records == 298
    got = sorted(p for e in manifest.shards for p in read_records(str(out / e.name)))
    assert got == sorted(p for i, p in enumerate(data) if i not in (10, 200))


def test_skip_corrupt_in_the_other_jobs(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in" / "a.tfrecord"
    path.parent.mkdir()
    _damaged(path, 300)
    code, stdout, err = run_job(
        mix.main,
        [
            "--source",
            f"{path}=1",
            "--total_records",
            "100",
            "--output_prefix",
            str(tmp_path / "m" / "x"),
            "--skip_corrupt",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err  # planned, like reshard (tests/jobs/test_pipelines_skip_corrupt.py)
    assert summary_json(stdout)["corrupt_records"] == 2 and len(_dead_letters(tmp_path / "m" / "_CORRUPT.x.jsonl")) == 2
    code, stdout, err = run_job(
        tfrecord_to_parquet.main,
        ["--input", str(path), "--output_prefix", str(tmp_path / "p" / "x"), "--skip_corrupt"] + FAST,
        capsys,
    )
    assert code == 0, err
    assert summary_json(stdout)["records"] == 298 and len(_dead_letters(tmp_path / "p" / "_CORRUPT.x.jsonl")) == 2
    pq.write_table(pa.table({"l": pa.array([[1], [2, None], [3]], pa.list_(pa.int64()))}), str(tmp_path / "n.parquet"))
    code, stdout, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "n.parquet"), "--output_prefix", str(tmp_path / "t" / "x"), "--skip_corrupt"] + FAST,
        capsys,
    )
    assert code == 0, err
    letters = _dead_letters(tmp_path / "t" / "_CORRUPT.x.jsonl")
    assert (
        summary_json(stdout)["records"] == 2
        and len(letters) == 1
        and "null value inside a list" in letters[0]["reason"]
    )
    assert mf.read_manifest(str(tmp_path / "t" / "_MANIFEST.x.json")).corrupt_records == 1
    code, stdout, err = run_job(build_index.main, ["--input", str(path), "--skip_corrupt"] + FAST, capsys)
    assert code == 0 and summary_json(stdout)["corrupt_records"] == 1
    assert _dead_letters(tmp_path / "in" / "_CORRUPT.build_index.jsonl")[0]["file"] == str(path)


def test_coverage_gaps_become_dead_letters_with_skip_corrupt():
    from tfrecord_beam.beam import stages

    parts = [stages.Coverage("f", 0, 0, 100, 300), stages.Coverage("f", 100, 150, 300, 300)]
    with pytest.raises(CorruptRecordError):
        stages.check_coverage("f", parts)
    (gap,) = stages.check_coverage("f", parts, skip_corrupt=True)
    assert gap.file == "f" and gap.offset == 100 and "100..150" in gap.reason


# -- readers of outputs --------------------------------------------------------------------------


def test_cli_and_torch_read_an_output_through_its_manifest(tmp_path, capsys):
    from tfrecord_beam import cli

    write_files(tmp_path / "in", "a", [400])
    out = tmp_path / "o"
    assert run_job(reshard.main, reshard_args(tmp_path / "in" / "*", out / "x", 2), capsys)[0] == 0
    write_records(str(out / "stray-0.tfrecord"), payloads(3))  # not part of the output
    capsys.readouterr()
    assert cli.main(["count", "--json", str(out / "x")]) == 0
    counted = json.loads(capsys.readouterr().out)
    assert counted["total"] == 400 and {f["source"] for f in counted["files"]} == {"manifest"}
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    with pytest.raises(mf.ManifestError, match="stray-0.tfrecord"):  # the directory rule: not a silent pick
        TFRecordDataset(str(out), None, {"i": "int"})
    os.remove(out / "stray-0.tfrecord")
    ds = TFRecordDataset(str(out), None, {"i": "int"})
    assert sorted(int(r["i"][0]) for r in ds) == list(range(400))
    assert ds.sources[0].index_paths[0].endswith(".tfindex")  # indexes come from the manifest
    shard = out / "x-00001-of-00002.tfrecord"
    write_records(str(out / "x-00000-of-00002.tfrecord"), payloads(3), index_path=True)
    with pytest.raises(mf.ManifestError, match="changed after the job committed it"):
        TFRecordDataset(str(out / "x"), None)
    records = list(read_records(str(shard)))
    records[5] = records[5][:-1] + bytes([records[5][-1] ^ 1])  # same size, valid CRCs, other data
    write_records(str(shard), records, index_path=str(out / "x-00001-of-00002.tfindex"))
    assert cli.main(["verify", str(out / "x")]) == 3
    assert "checksum" in capsys.readouterr().out


def test_torch_skip_corrupt_counts_across_workers(tmp_path):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from tfrecord_beam.torch import IndexedTFRecordDataset, TFRecordDataset

    path = tmp_path / "a.tfrecord"
    data, _ = _damaged(path, 300)
    with pytest.raises(CorruptRecordError):
        list(TFRecordDataset(str(path), None, {"i": "int"}))
    ds = TFRecordDataset(str(path), None, {"i": "int"}, skip_corrupt=True)
    got = sorted(int(r["i"][0]) for r in DataLoader(ds, batch_size=None, num_workers=2))
    assert got == [i for i in range(300) if i not in (10, 200)] and ds.corrupt_records == 2
    clean = tmp_path / "b.tfrecord"
    write_records(str(clean), data, index_path=True)
    raw = bytearray(clean.read_bytes())
    raw[int(index_of(str(clean))[50, 0]) + 14] ^= 0xFF
    clean.write_bytes(bytes(raw))
    indexed = TFRecordDataset(str(clean), str(tmp_path / "b.tfindex"), {"i": "int"}, skip_corrupt=True, batch_size=64)
    assert (
        sum(len(b["i"]) for b in indexed.iter_worker(0, 3))
        + sum(len(b["i"]) for b in indexed.iter_worker(1, 3))
        + sum(len(b["i"]) for b in indexed.iter_worker(2, 3))
        == 299
        and indexed.corrupt_records == 1
    )
    mapped = IndexedTFRecordDataset(str(path), None, {"i": "int"}, skip_corrupt=True)
    assert len(mapped) == 298 and mapped.corrupt_records == 2


def test_a_launcher_stopped_by_sigterm_mid_job_aborts_its_output(tmp_path):
    """`kill PID` (a scheduler's timeout, systemd, a CI runner cancelling) of a launcher in the
    middle of its pipeline: one line, exit 143, and nothing under the output that looks
    complete or is left over (no manifest, no shard, no staging). It used to die at once, its
    staging (and on a job service, its still-running job) left behind."""
    import threading
    import time

    chunk = [bytes([i % 251]) * 4096 for i in range(2000)]
    (tmp_path / "in").mkdir()
    for k in range(8):
        write_records(str(tmp_path / "in" / f"x-{k}.tfrecord"), chunk)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO), TFRECORD_BEAM_PROGRESS_INTERVAL="0.1")
    job = subprocess.Popen(
        [sys.executable, "-m", "pipelines.reshard", "--input", str(tmp_path / "in"), "--output_prefix", str(out / "r")]
        + ["--num_shards", "4", "--shuffle", "--runner=FnApiRunner"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err: list = []
    reader = threading.Thread(target=lambda: err.extend(job.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not any(" of " in line and "records" in line for line in err):  # a progress line: it is running
        assert job.poll() is None, "".join(err)[-3000:]
        assert time.monotonic() < deadline, "no progress line after 300 s"
        time.sleep(0.05)
    assert stagings(out), "the staging should exist while the job runs"
    job.send_signal(signal.SIGTERM)
    code = job.wait(timeout=120)
    reader.join(10)
    lines = [line.rstrip("\n") for line in err]
    assert code == 143, lines[-20:]
    assert lines[-1] == "reshard: terminated (SIGTERM); the output was not committed", lines[-5:]
    assert entries(out) == [], entries(out)  # nothing that looks complete, nothing left over
