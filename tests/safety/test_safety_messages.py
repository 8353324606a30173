"""Messages that must be true and short (issue 22 item 10): a list<struct> column, a bad URI
option, more shards than records."""

import pyarrow as pa
import pytest
from helpers.jobs import run_job, summary_json, write_files

from tfrecord_beam.arrow import ArrowConversionError, ExampleEncoder
from tfrecord_beam.cli import main as cli_main


@pytest.mark.parametrize("flatten", [True, False])
def test_a_list_of_structs_is_not_blamed_on_flatten_structs(flatten):
    schema = pa.schema([("x", pa.list_(pa.struct([("a", pa.int64())])))])
    with pytest.raises(ArrowConversionError) as info:
        ExampleEncoder(schema, flatten_structs=flatten)
    message = str(info.value)
    assert "list<struct>" in message and "top-level struct columns only" in message
    assert "need flatten_structs=True" not in message


def test_a_bad_uri_option_is_one_line(capsys):
    assert cli_main(["count", "s3://bucket/x.tfrecord?no_such_option=1"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no_such_option" in err and "Traceback" not in err


def test_more_shards_than_records_warns_and_counts_the_empty_ones(tmp_path, capsys):
    from pipelines import reshard

    write_files(tmp_path / "in", "a", [3])
    argv = ["--input", str(tmp_path / "in"), "--output_prefix", str(tmp_path / "o" / "t"), "--num_shards", "5"]
    code, out, err = run_job(reshard.main, argv, capsys)
    assert code == 0, err
    assert summary_json(out)["records"] == 3
    assert "warning: 2 of 5 shards are empty (3 records)" in err


def test_reshard_shuffle_reports_progress_with_two_workers(tmp_path, capsys, monkeypatch):
    import re

    from pipelines import reshard
    from tfrecord_beam.beam import _progress

    monkeypatch.setattr(_progress, "INTERVAL_S", 0.1)
    write_files(tmp_path / "in", "a", [400, 400])
    argv = ["--input", str(tmp_path / "in"), "--output_prefix", str(tmp_path / "o" / "t"), "--num_shards", "2"]
    argv += ["--shuffle", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    code, out, err = run_job(reshard.main, argv, capsys)
    assert code == 0, err
    assert summary_json(out)["records"] == 800
    done = re.findall(r"reshard --shuffle: (?:reading into buckets|writing 2 shards): ([\d.,]+ \w?B) of", err)
    assert done and any(size != "0 B" for size in done), err
