"""A described feature that the data does not have is a typo until shown otherwise: the torch
datasets warn naming it and the closest names (or fail with strict=True), tfrecord_to_parquet
says so on stderr; a ragged feature that torch's collate cannot stack is named (issue 15)."""

from __future__ import annotations

import warnings

import pytest

import tfrecord_beam as tfb
from tfrecord_beam._described import FeatureNameWarning, absent_features
from tfrecord_beam.errors import DecodeError

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from tfrecord_beam.torch import TFRecordDataset  # noqa: E402


def _write(path, n=12):
    with tfb.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            writer.write({"score": (float(i), "float"), "tokens": (list(range(i % 3 + 1)), "int")})
    return str(path)


def test_absent_features_names_the_closest_existing_ones():
    payloads = [tfb.encode_example({"score": 1.0, "label": 2})]
    assert absent_features(payloads, {"scroe": "float", "label": "int"}) == {"scroe": ["score"]}
    assert absent_features([], {"x": None}) == {}


def test_torch_dataset_warns_about_a_typo_once(tmp_path):
    path = _write(tmp_path / "d.tfrecord")
    ds = TFRecordDataset(path, None, {"scroe": "float"}, batch_size=4)
    with pytest.warns(FeatureNameWarning, match=r"'scroe' \(did you mean 'score'\?\)") as caught:
        list(ds)
    assert path in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a correct description says nothing
        list(TFRecordDataset(path, None, {"score": "float"}, batch_size=4))


def test_strict_makes_the_typo_an_error(tmp_path):
    path = _write(tmp_path / "d.tfrecord")
    with pytest.raises(DecodeError, match="scroe"):
        next(iter(TFRecordDataset(path, None, {"scroe": "float"}, strict=True)))


def test_collate_of_a_ragged_feature_names_it_and_what_to_do(tmp_path):
    path = _write(tmp_path / "d.tfrecord")
    loader = DataLoader(TFRecordDataset(path, None, {"score": "float", "tokens": "int"}), batch_size=4)
    with pytest.raises(RuntimeError, match=r"feature 'tokens' has \[1, 2, 3\] values.*batch_size="):
        next(iter(loader))
    fixed = DataLoader(TFRecordDataset(path, None, {"score": "float"}), batch_size=4)
    assert next(iter(fixed))["score"].shape == (4, 1)


def test_tfrecord_to_parquet_warns_about_a_described_typo(tmp_path, capsys):
    from helpers.jobs import FAST, run_job

    from pipelines import tfrecord_to_parquet

    path = _write(tmp_path / "d.tfrecord")
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        ["--input", path, "--output_prefix", str(tmp_path / "p" / "x"), "--features", "scroe:float,tokens:int"] + FAST,
        capsys,
    )
    assert code == 0, err
    assert "warning:" in err and "'scroe' (did you mean 'score'?)" in err and path in err
