"""Small TFRecord file sets for the torch dataset tests (ids unique across files)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from tfrecord_beam.example import encode_example
from tfrecord_beam.index import create_index
from tfrecord_beam.records import write_records


def payload(uid: int) -> bytes:
    """A record with a unique id, a variable-length float list, bytes of varying size and 0-2 tags."""
    return encode_example(
        {
            "id": ([uid], "int"),
            "vals": (np.arange(uid % 5, dtype=np.float32) + uid, "float"),
            "name": (f"r{uid}".encode(), "byte"),
            "pad": (b"x" * (uid * 37 % 300), "byte"),
            "tags": ([b"t%d" % k for k in range(uid % 3)], "byte"),
        }
    )


def write_files(
    root: Path, layout: Sequence[Tuple[str, int, bool]], first_id: int = 0
) -> Tuple[List[str], List[Optional[str]], List[int]]:
    """Write files named in `layout` as (name, record count, indexed); returns (paths, index paths, ids)."""
    paths, indexes, ids = [], [], []
    uid = first_id
    root.mkdir(parents=True, exist_ok=True)
    for name, count, indexed in layout:
        path = str(root / name)
        batch = list(range(uid, uid + count))
        uid += count
        write_records(path, [payload(i) for i in batch])
        index = path + ".tfindex" if indexed else None
        if indexed:
            create_index(path, index)
        paths.append(path)
        indexes.append(index)
        ids.extend(batch)
    return paths, indexes, ids


MIXED = [
    ("a.tfrecord", 37, True),
    ("b.tfrecord", 5, True),
    ("c.tfrecord", 23, False),
    ("d.tfrecord", 0, True),
    ("e.tfrecord", 0, False),
    ("f.tfrecord", 19, False),
    ("g.tfrecord.gz", 11, True),
    ("h.tfrecord.gz", 13, False),
    ("i.tfrecord.zlib", 3, False),
]
INDEXED = [(f"p{k}.tfrecord", n, True) for k, n in enumerate([31, 2, 17, 0, 9])]
UNINDEXED = [(f"u{k}.tfrecord", n, False) for k, n in enumerate([29, 1, 14, 40])]
COMPRESSED = [(f"z{k}.tfrecord.gz", n, k % 2 == 0) for k, n in enumerate([7, 12, 0, 5, 9])]


def ids_of(samples) -> List[int]:
    """The ids in a list of per-record dicts or of batches."""
    out: List[int] = []
    for s in samples:
        ids = s["id"]
        out.extend(int(v) for v in np.asarray(ids).reshape(-1))
    return out


def add_one_to_id(sample):
    """A picklable transform (module-level, so `spawn` workers can import it)."""
    sample = dict(sample)
    sample["id"] = sample["id"] + 1
    return sample
