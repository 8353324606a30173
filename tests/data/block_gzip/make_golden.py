"""Make (and check with TensorFlow) the golden block-gzip file the tests read.

    PYTHONPATH=. python tests/data/block_gzip/make_golden.py write       # our writer -> golden.tfrecord.gz (+ .tfindex, manifest.json)
    /work/tfvenv/bin/python tests/data/block_gzip/make_golden.py check-tf  # TensorFlow reads it identically

`write` uses tfrecord_beam's RecordWriter (block-gzip, 4 KiB blocks so that the small file has
many members). `check-tf` imports only TensorFlow: `TFRecordDataset(compression_type="GZIP")`
must yield the same records (count and order-dependent hash) as the manifest; it then records
TensorFlow's version in the manifest. TensorFlow is never a dependency of the package.
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "golden.tfrecord.gz"


def digest(payloads) -> str:
    return hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in payloads)).hexdigest()


def payloads():
    """Deterministic records of 0..2999 bytes with some repetition (so they compress)."""
    out = []
    for i in range(600):
        size = (i * 7919) % 3000
        out.append((b"record-%05d:" % i + bytes((i * j) % 251 for j in range(64))) * (size // 76 + 1))
    return out


def write() -> None:
    from tfrecord_beam import blockgzip
    from tfrecord_beam.records import RecordWriter

    recs = payloads()
    path = HERE / NAME
    with RecordWriter(str(path), index_path=True, block_bytes=4096) as writer:
        writer.write_many(recs)
    table = blockgzip.member_table_for(str(path))
    manifest = {"file": NAME, "records": len(recs), "sha256": digest(recs), "members": len(table),
                "block_bytes": 4096, "tensorflow_checked": None}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest))


def check_tf() -> None:
    import tensorflow as tf

    manifest = json.loads((HERE / "manifest.json").read_text())
    got = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(HERE / manifest["file"]), compression_type="GZIP")]
    ok = len(got) == manifest["records"] and digest(got) == manifest["sha256"]
    print(json.dumps({"tensorflow": tf.__version__, "records": len(got), "identical": ok}))
    if not ok:
        sys.exit(1)
    manifest["tensorflow_checked"] = tf.__version__
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    {"write": write, "check-tf": check_tf}[sys.argv[1]]()
