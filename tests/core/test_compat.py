"""The `tfrecord` package's API, as its README uses it, with its bugs fixed."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers.fixtures import REPO

import tfrecord_beam as tfrecord
from tfrecord_beam import index, iterator_utils


def _write_examples(path, n=10, **kw):
    with tfrecord.TFRecordWriter(str(path), **kw) as writer:
        for i in range(n):
            writer.write({"image": (b"img%d" % i, "byte"), "label": (i / 2, "float"), "index": (i, "int")})
    return path


def test_seed_readme_write_and_read(tmp_path):
    # the `tfrecord` README, verbatim but for the import line
    writer = tfrecord.TFRecordWriter(str(tmp_path / "data.tfrecord"))
    writer.write(
        {
            "image": (b"\x89PNG...", "byte"),
            "label": (0.5, "float"),
            "index": (7, "int"),
        }
    )
    writer.close()
    loader = tfrecord.tfrecord_loader(
        str(tmp_path / "data.tfrecord"),
        None,
        {
            "image": "byte",
            "label": "float",
            "index": "int",
        },
    )
    records = list(loader)
    assert records[0]["image"] == b"\x89PNG..." and records[0]["label"].tolist() == [0.5]
    assert records[0]["index"].tolist() == [7]


def test_seed_readme_sequence_example(tmp_path):
    writer = tfrecord.TFRecordWriter(str(tmp_path / "data.tfrecord"))
    writer.write(
        {"length": (3, "int"), "label": (1, "int")},
        {"tokens": ([[0, 0, 1], [0, 1, 0], [1, 0, 0]], "int"), "seq_labels": ([0, 1, 1], "int")},
    )
    writer.write(
        {"length": (3, "int"), "label": (1, "int")},
        {"tokens": ([[0, 0, 1], [1, 0, 0]], "int"), "seq_labels": ([0, 1], "int")},
    )
    writer.close()
    context_description = {"length": "int", "label": "int"}
    sequence_description = {"tokens": "int ", "seq_labels": "int"}  # the seed README's stray space
    loader = tfrecord.tfrecord_loader(
        str(tmp_path / "data.tfrecord"), None, context_description, sequence_description=sequence_description
    )
    (ctx0, seq0), (ctx1, seq1) = list(loader)
    assert ctx0["length"].tolist() == [3] and [t.tolist() for t in seq1["tokens"]] == [[0, 0, 1], [1, 0, 0]]
    assert [s.tolist() for s in seq0["seq_labels"]] == [[0], [1], [1]]


def test_submodule_names_of_the_tfrecord_package():
    from tfrecord_beam.reader import tfrecord_loader  # noqa: F401
    from tfrecord_beam.tools.tfrecord2idx import create_index, create_indices, main  # noqa: F401
    from tfrecord_beam.writer import TFRecordWriter  # noqa: F401

    assert tfrecord.iterator_utils.shuffle_iterator is iterator_utils.shuffle_iterator
    assert tfrecord.example_pb2.Example is tfrecord._proto.Example
    assert tfrecord.tools.tfrecord2idx.create_index is create_index


def test_index_without_shard_reads_from_the_first_record(tmp_path):
    path = _write_examples(tmp_path / "d.tfrecord")
    index.create_index(path)
    got = [r["index"][0] for r in tfrecord.tfrecord_loader(str(path), str(tmp_path / "d.tfindex"))]
    assert got == list(range(10))


@pytest.mark.parametrize("with_index", [True, False])
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_shards_cover_every_record_exactly_once(tmp_path, with_index, compression):
    name = "d.tfrecord.gz" if compression else "d.tfrecord"
    path = _write_examples(tmp_path / name, n=23)
    idx = index.create_index(path) if with_index else None
    idx_path = index.default_index_path(str(path)) if with_index else None
    for count in (1, 2, 3, 5, 30):
        seen = []
        for shard in range(count):
            seen.extend(int(r["index"][0]) for r in tfrecord.tfrecord_loader(str(path), idx_path, shard=(shard, count)))
        assert sorted(seen) == list(range(23)), count
    assert idx is None or len(idx) == 23


def test_kept_records_do_not_change_under_you(tmp_path):
    path = _write_examples(tmp_path / "d.tfrecord", n=5)
    views = list(tfrecord.tfrecord_iterator(str(path)))
    assert len({bytes(v) for v in views}) == 5


def test_gzip_with_index_reads_each_shard_in_one_pass(tmp_path, monkeypatch):
    from tfrecord_beam import _streams

    path = _write_examples(tmp_path / "d.tfrecord.gz", n=40)
    index.create_index(path)
    made = []
    real = _streams.InflatingReader.__init__

    def counting(self, *a, **k):
        made.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(_streams.InflatingReader, "__init__", counting)
    got = list(tfrecord.tfrecord_loader(str(path), index.default_index_path(str(path)), shard=(1, 2)))
    assert [int(r["index"][0]) for r in got] == list(range(20, 40))
    assert len(made) == 1


def test_missing_feature_does_not_crash(tmp_path):
    path = tmp_path / "d.tfrecord"
    with tfrecord.TFRecordWriter(str(path)) as writer:
        writer.write({"a": (1, "int")})
        writer.write({"b": (2.0, "float")})
    got = list(tfrecord.tfrecord_loader(str(path), None, {"a": "int", "b": "float"}))
    assert got[1]["a"].size == 0 and got[0]["b"].size == 0
    with pytest.raises(KeyError, match="record 1: feature 'a' is missing"):
        list(tfrecord.tfrecord_loader(str(path), None, {"a": "int"}, strict=True))


def test_corrupt_data_is_detected(tmp_path):
    path = _write_examples(tmp_path / "d.tfrecord", n=3)
    data = bytearray(path.read_bytes())
    data[20] ^= 4
    path.write_bytes(bytes(data))
    with pytest.raises(tfrecord.CorruptRecordError, match="record 0"):
        list(tfrecord.tfrecord_loader(str(path), None))


def test_multi_loader_mixes_and_finite_mode_ends(tmp_path):
    _write_examples(tmp_path / "a.tfrecord", n=30)
    _write_examples(tmp_path / "b.tfrecord", n=10)
    it = tfrecord.multi_tfrecord_loader(
        str(tmp_path / "{}.tfrecord"), None, {"a": 0.5, "b": 0.5}, infinite=False, seed=1
    )
    got = list(it)
    assert len(got) == 40
    again = [
        r["index"][0]
        for r in tfrecord.multi_tfrecord_loader(
            str(tmp_path / "{}.tfrecord"), None, {"a": 0.5, "b": 0.5}, infinite=False, seed=1
        )
    ]
    assert again == [r["index"][0] for r in got]


def test_iterator_utils_never_touch_the_global_rng():
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    list(iterator_utils.shuffle_iterator(iter(range(100)), 10, seed=5))
    list(iterator_utils.sample_iterators([lambda: iter(range(5)), lambda: iter(range(7))], [1, 2], infinite=False))
    assert np.random.random() == expected


def test_shuffle_iterator_is_a_seeded_permutation():
    a = list(iterator_utils.shuffle_iterator(iter(range(200)), 16, seed=3))
    b = list(iterator_utils.shuffle_iterator(iter(range(200)), 16, seed=3))
    assert a == b and sorted(a) == list(range(200)) and a != list(range(200))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sorted(iterator_utils.shuffle_iterator(iter(range(3)), 10)) == [0, 1, 2]
    assert any("less than the queue size" in str(w.message) for w in caught)


def test_sample_iterators_follows_the_ratios():
    draws = iterator_utils.sample_iterators([lambda: iter(["a"] * 10), lambda: iter(["b"] * 10)], [3, 1], seed=0)
    counts = {"a": 0, "b": 0}
    for _, item in zip(range(8000), draws):
        counts[item] += 1
    assert abs(counts["a"] / 8000 - 0.75) < 0.03
    with pytest.raises(ValueError, match="ratios"):
        next(iterator_utils.sample_iterators([lambda: iter([1])], [-1]))


def test_cycle_of_an_empty_iterator_ends():
    assert list(iterator_utils.cycle(lambda: iter([]))) == []


# --- tfrecord2idx -----------------------------------------------------------------------

from tfrecord_beam.tools import tfrecord2idx  # noqa: E402


def test_tfrecord2idx_single_file_and_directory(tmp_path, capsys):
    _write_examples(tmp_path / "a.tfrecord", n=4)
    _write_examples(tmp_path / "b.tfrecord.gz", n=3)
    assert tfrecord2idx.main([str(tmp_path / "a.tfrecord"), str(tmp_path / "custom.idx")]) == 0
    assert len(index.load_index(tmp_path / "custom.idx")) == 4
    assert tfrecord2idx.main([str(tmp_path)]) == 0
    assert len(index.load_index(tmp_path / "a.tfindex")) == 4
    assert len(index.load_index(tmp_path / "b.tfrecord.gz.tfindex")) == 3
    assert "2 of 2 files indexed, 7 records" in capsys.readouterr().err
    assert tfrecord2idx.main([str(tmp_path / "*.tfrecord*"), "--verify"]) == 0


def test_tfrecord2idx_corrupt_file_exits_3_without_partial_index(tmp_path, capsys):
    path = _write_examples(tmp_path / "a.tfrecord", n=4)
    path.write_bytes(path.read_bytes()[:-7])
    assert tfrecord2idx.main([str(path)]) == 3  # bad data reported
    err = capsys.readouterr().err
    assert "a.tfrecord, record 3" in err and "truncated" in err and "no index written" in err
    assert not (tmp_path / "a.tfindex").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["a.tfrecord"]
    assert tfrecord2idx.main([str(tmp_path / "nothing-*.tfrecord")]) == 1


def test_tfrecord2idx_module_runs_without_warnings(tmp_path):
    path = _write_examples(tmp_path / "a.tfrecord", n=2)
    env = dict(os.environ, TFRECORD_BEAM_PURE="1")  # the same with or without the compiled core
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tfrecord_beam.tools.tfrecord2idx", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr
    assert (tmp_path / "a.tfindex").read_text().count("\n") == 2
