"""One rule for what a directory argument means (issue 22 items 5 and 10), tested against every
reader: the CLI commands, the torch dataset and a job's --input.

A directory with no committed output of the kind read means its data files (another kind's
manifest, e.g. a Parquet output written beside its TFRecord input, changes nothing); one
output and no other data files means that output; anything else is refused, naming both."""

import shutil

import pytest
from helpers.jobs import run_job, summary_json, write_files

from tfrecord_beam import manifest as mf
from tfrecord_beam.cli import main as cli_main

COMMANDS = ["count", "verify", "inspect", "schema", "head"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """data/ (30 records in 3 files) with a tfrecord_to_parquet output written into it; two/
    with two reshard outputs; one_plus/ with one output and a loose data file; bare/ holding an
    output's shards without its manifest."""
    from pipelines import reshard, tfrecord_to_parquet

    root = tmp_path_factory.mktemp("dirs")
    write_files(root / "data", "a", [10, 10, 10])
    for main, argv in [
        (tfrecord_to_parquet.main, ["--input", str(root / "data"), "--output_prefix", str(root / "data" / "aspq")]),
        (
            reshard.main,
            ["--input", str(root / "data"), "--output_prefix", str(root / "two" / "x"), "--num_shards", "2"],
        ),
        (
            reshard.main,
            ["--input", str(root / "data"), "--output_prefix", str(root / "two" / "y"), "--num_shards", "1"],
        ),
    ]:
        assert main(argv) == 0
    shutil.copytree(root / "two", root / "one_plus")
    for name in (root / "one_plus").iterdir():
        if name.name.startswith(("y-", "_MANIFEST.y")):
            name.unlink()
    shutil.copy(root / "data" / "a-0.tfrecord", root / "one_plus" / "loose.tfrecord")
    shutil.copytree(root / "two", root / "bare")
    (root / "bare" / "_MANIFEST.x.json").unlink()
    return root


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_with_another_kinds_output_means_its_data_files(outputs, command, capsys):
    code = cli_main([command, str(outputs / "data")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "3 files, " in captured.err and ", 0 records" not in captured.err
    if command == "count":
        assert captured.out.strip().splitlines()[-1].split()[0] == "30"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_with_two_outputs_is_refused_naming_both(outputs, command, capsys):
    assert cli_main([command, str(outputs / "two")]) == 2
    err = capsys.readouterr().err
    assert "_MANIFEST.x.json" in err and "_MANIFEST.y.json" in err


@pytest.mark.parametrize("command", ["count", "verify"])
def test_a_directory_with_one_output_and_a_loose_file_is_refused(outputs, command, capsys):
    assert cli_main([command, str(outputs / "one_plus")]) == 2
    assert "loose.tfrecord" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["count", "verify"])
def test_one_output_by_its_prefix_or_alone_in_its_directory(outputs, command, capsys):
    assert cli_main([command, str(outputs / "two" / "x")]) == 0
    assert "2 files, 30 records" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["count", "verify"])
def test_a_prefix_without_its_manifest_is_an_incomplete_output(outputs, command, capsys):
    assert cli_main([command, str(outputs / "bare" / "x")]) == 2
    err = capsys.readouterr().err
    assert "incomplete output" in err and "_MANIFEST.x.json" in err and "No such file" not in err


def test_a_parquet_output_named_to_a_tfrecord_reader_is_refused(outputs, capsys):
    assert cli_main(["count", str(outputs / "data" / "aspq")]) == 2
    assert "Parquet output" in capsys.readouterr().err


def test_torch_dataset_follows_the_same_rule(outputs):
    from tfrecord_beam.torch import TFRecordDataset

    assert len(list(TFRecordDataset(str(outputs / "data"), None))) == 30  # was IsADirectoryError
    assert len(list(TFRecordDataset(str(outputs / "two" / "x"), None))) == 30
    with pytest.raises(mf.ManifestError, match="2 outputs"):
        TFRecordDataset(str(outputs / "two"), None)
    with pytest.raises(FileNotFoundError, match="incomplete output"):
        TFRecordDataset(str(outputs / "bare" / "x"), None)


def test_a_job_input_follows_the_same_rule(outputs, tmp_path, capsys):
    from pipelines import reshard

    def run(source, out):
        argv = ["--input", str(source), "--output_prefix", str(tmp_path / out / "t"), "--num_shards", "1"]
        return run_job(reshard.main, argv, capsys)

    code, out, err = run(outputs / "data", "o1")
    assert code == 0, err
    assert summary_json(out)["records"] == 30
    code, _, err = run(outputs / "two", "o2")
    assert code == 1 and "2 outputs" in err  # not a silent merge of both
    code, out, err = run(outputs / "two" / "x", "o3")  # an output by its prefix
    assert code == 0, err
    assert summary_json(out)["records"] == 30
    code, _, err = run(outputs / "one_plus", "o4")
    assert code == 1 and "loose.tfrecord" in err
