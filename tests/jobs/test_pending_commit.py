"""Issue 22 item 3: a reader of an output whose commit has begun and not finished (a
`_JOURNAL.json` in a staging directory beside it) fails saying so, in every reader that
resolves an output: the CLI, the torch datasets and the jobs' --input. Before, `count out/`
added old and new shards together with exit 0."""

import os

import pytest
from helpers.jobs import payloads, run_job, stage_shards

from pipelines import reshard
from tfrecord_beam import cli
from tfrecord_beam import manifest as mf
from tfrecord_beam.beam import commit


@pytest.fixture
def half_committed(tmp_path):
    """out/x: 3 old shards of 10, then a commit of 8 new shards of 5 killed after 5 steps (old
    manifest gone, some new shards in place); out/y: another output, complete."""
    out = tmp_path / "out"
    old = commit.Output(str(out / "x"), "test", {"run": "old"}, say=lambda m: None)
    old.commit(stage_shards(old, [(f"x-{i:05d}-of-00003", payloads(10, i)) for i in range(3)]))
    other = commit.Output(str(out / "y"), "test", {}, say=lambda m: None)
    other.commit(stage_shards(other, [("y-00000-of-00001", payloads(4))]))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, killed inside its commit
        try:
            os.environ[commit._STOP_ENV] = "5"
            commit._steps[0] = 0
            new = commit.Output(str(out / "x"), "test", {"run": "new"}, overwrite=True, say=lambda m: None)
            new.commit(stage_shards(new, [(f"x-{i:05d}-of-00008", payloads(5, 50 + i)) for i in range(8)]))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    names = os.listdir(out)
    assert "_MANIFEST.x.json" not in names and any(n.endswith("-of-00008.tfrecord") for n in names)
    assert any(n.endswith("-of-00003.tfrecord") for n in names)  # a mix: old and new shards at once
    return out


@pytest.mark.parametrize("target", ["{out}", "{out}/x", "{out}/x-*.tfrecord", "{out}/x-00000-of-00008.tfrecord"])
def test_cli_refuses_a_half_committed_output(half_committed, capsys, target):
    for command in ("count", "verify"):
        code = cli.main([command, target.format(out=half_committed)])
        err = capsys.readouterr().err
        assert code != 0, command
        assert "commit into" in err and "has begun and not finished" in err, err


def test_cli_reads_the_other_output_beside_it(half_committed, capsys):
    assert cli.main(["count", "--json", str(half_committed / "y")]) == 0
    assert '"total": 4' in capsys.readouterr().out


def test_torch_datasets_refuse_a_half_committed_output(half_committed):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    for target in (half_committed, half_committed / "x", [str(half_committed / "x-00001-of-00003.tfrecord")]):
        with pytest.raises(mf.CommitInProgressError, match="has begun and not finished"):
            TFRecordDataset(target if isinstance(target, list) else str(target), None)
    assert len(list(TFRecordDataset(str(half_committed / "y"), None))) == 4


def test_jobs_refuse_a_half_committed_input(half_committed, tmp_path, capsys):
    args = ["--input", str(half_committed / "x-*.tfrecord"), "--output_prefix", str(tmp_path / "r" / "r")]
    code, _, err = run_job(reshard.main, args + ["--num_shards", "1"], capsys)
    assert code != 0 and "has begun and not finished" in err, err


def test_after_the_next_run_finishes_the_commit_readers_see_the_new_output(half_committed, capsys):
    with pytest.raises(commit.OutputError, match="pass --overwrite"):
        commit.Output(str(half_committed / "x"), "test", say=lambda m: None)  # finishes the commit
    capsys.readouterr()
    assert cli.main(["count", "--json", str(half_committed / "x")]) == 0
    assert '"total": 40' in capsys.readouterr().out


def test_many_files_of_one_directory_are_checked_with_one_search(half_committed):
    calls = []

    def glob(pattern):
        calls.append(pattern)
        return mf.fs.expand(pattern)

    others = [str(half_committed / f"y-{i}.tfrecord") for i in range(500)]  # (names only: not read)
    mf.check_no_commit_pending(others, glob=glob)
    assert len(calls) == 1
    with pytest.raises(mf.CommitInProgressError):
        mf.check_no_commit_pending(others + [str(half_committed / "x-00002-of-00003.tfrecord")], glob=glob)
