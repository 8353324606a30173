"""The identity's files part (issue 34 item 3): a copy of the whole tree elsewhere resumes
exactly; a version-1 state is accepted only where file names prove positions and splits."""

from __future__ import annotations

import itertools
import shutil

import pytest

torch = pytest.importorskip("torch")

from helpers.torch_data import ids_of  # noqa: E402

from tfrecord_beam.example import encode_example  # noqa: E402
from tfrecord_beam.index import create_index  # noqa: E402
from tfrecord_beam.records import write_records  # noqa: E402
from tfrecord_beam.torch import MultiTFRecordDataset, TFRecordDataset  # noqa: E402


def _write(path, ids):
    path.parent.mkdir(parents=True, exist_ok=True)
    write_records(str(path), [encode_example({"id": ([i], "int")}) for i in ids])
    create_index(str(path), str(path) + ".tfindex")
    return str(path)


@pytest.mark.parametrize(
    "kw", [dict(shuffle_queue_size=4, seed=2), dict(elastic=True, shuffle_queue_size=4, shuffle_block=2)]
)
def test_a_copy_of_the_tree_elsewhere_resumes_exactly(tmp_path, kw):
    paths = [_write(tmp_path / "one" / d / "x.tfrecord", range(k * 20, k * 20 + 20)) for k, d in enumerate("ab")]
    shutil.copytree(tmp_path / "one", tmp_path / "deeper" / "two")  # new mtimes, another depth

    def make(root):
        ps = [p.replace(str(tmp_path / "one"), str(root)) for p in paths]
        return TFRecordDataset(ps, [p + ".tfindex" for p in ps], ["id"], **kw)

    full = ids_of(make(tmp_path / "one").iter_worker(0, 1))
    first = make(tmp_path / "one")
    head = ids_of(itertools.islice(first.iter_worker(0, 1), 13))
    second = make(tmp_path / "deeper" / "two")
    second.load_state_dict(first.state_dict())
    assert head + ids_of(second.iter_worker(0, 1)) == full


def _as_v1(state, files):
    old = dict(state)
    identity = old.pop("identity")
    old.update(version=1, files=files, seed=identity["seed"])
    return old


def test_a_version_1_state_is_refused_where_file_names_repeat_across_splits(tmp_path):
    for d in "ab":
        _write(tmp_path / d / "x.tfrecord", range(10))
    ds = MultiTFRecordDataset(
        str(tmp_path / "{}" / "x.tfrecord"),
        str(tmp_path / "{}" / "x.tfrecord.tfindex"),
        {"a": 1, "b": 1},
        ["id"],
        infinite=False,
        elastic=True,
    )
    legacy = ["1 files, 0 bytes, 0"] * 2  # whatever version 1 wrote: names cannot prove the splits
    with pytest.raises(ValueError, match="version 1.*names repeat"):
        ds.load_state_dict(_as_v1(ds.state_dict(), legacy))
