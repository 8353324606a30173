"""Write the golden TFRecord files with TensorFlow, read them back with TensorFlow and with the
`tfrecord` package, and record everything in manifest.json (the tests compare us with it).

Run by hand, in a separate virtual environment (TensorFlow is never a dependency):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu tfrecord==1.14.6
    /tmp/tfvenv/bin/python tests/golden/make_golden.py            # rewrites tests/golden/

The output is deterministic (seeded values, `SerializeToString(deterministic=True)`, gzip
without a timestamp as TensorFlow writes it), so a re-run reproduces the committed files
byte for byte; `--check` says whether it does without writing anything. See README.md here
for the manifest's fields.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import shutil
import struct
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1
BIG = 4096  # bytes values longer than this are recorded by length and sha256
COMPRESSION = {"NONE": "", "GZIP": "GZIP", "ZLIB": "ZLIB"}


# --- values -----------------------------------------------------------------------------------


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bytes_f(*values: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def float_bits_f(*bits: int) -> tf.train.Feature:
    """A FloatList from float32 bit patterns (NaN payloads and -0.0 survive)."""
    return tf.train.Feature(float_list=tf.train.FloatList(value=[from_bits(b) for b in bits]))


def int_f(*values: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def example(**features: tf.train.Feature) -> tf.train.Example:
    return tf.train.Example(features=tf.train.Features(feature=features))


# --- the records ------------------------------------------------------------------------------


def examples() -> List[bytes]:
    """7 Examples: edge values, random lists, empty lists and a kind-less Feature, an empty
    Example (0 bytes), two random records, an empty Features message (2 bytes)."""
    rng = random.Random(SEED)
    floats_edge = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
                   0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBFC00000]
    ints_edge = [-(1 << 63), (1 << 63) - 1, -1, 0, 1, 2147483647, -2147483648, 4294967296, 127, 128, -129]

    def random_record(optional: bool) -> tf.train.Example:
        feats = {
            "multi_bytes": bytes_f(*[bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
                                     for _ in range(rng.randrange(1, 4))]),
            "multi_float": float_bits_f(*[f32_bits(rng.uniform(-2, 2)) for _ in range(rng.randrange(1, 8))]),
            "multi_int": int_f(*[rng.randrange(-10**12, 10**12) for _ in range(rng.randrange(1, 8))]),
        }
        if optional:
            feats["optional_int"] = int_f(42)
        return example(**feats)

    records = [
        example(bytes_empty=bytes_f(b""), bytes_nul=bytes_f(b"\x00", b"a\x00b\xff\xfe\x00"),
                bytes_utf8=bytes_f("héllo wörld ✓ 日本語 🙂".encode("utf-8")),
                floats_edge=float_bits_f(*floats_edge), ints_edge=int_f(*ints_edge)),
        random_record(True),
        example(empty_bytes_list=tf.train.Feature(bytes_list=tf.train.BytesList()),
                empty_float_list=tf.train.Feature(float_list=tf.train.FloatList()),
                empty_int64_list=tf.train.Feature(int64_list=tf.train.Int64List()),
                no_kind=tf.train.Feature()),
        tf.train.Example(),
        random_record(False),
        random_record(True),
        tf.train.Example(features=tf.train.Features()),
    ]
    return [r.SerializeToString(deterministic=True) for r in records]


def sequence_examples() -> List[bytes]:
    """7 SequenceExamples: ragged steps, an empty feature_list, no context, no feature_lists."""
    rng = random.Random(SEED + 1)

    def fl(*features: tf.train.Feature) -> tf.train.FeatureList:
        return tf.train.FeatureList(feature=list(features))

    def seq(context: Optional[Dict[str, tf.train.Feature]], lists: Optional[Dict[str, tf.train.FeatureList]]):
        message = tf.train.SequenceExample()
        if context is not None:
            message.context.CopyFrom(tf.train.Features(feature=context))
        if lists is not None:
            message.feature_lists.CopyFrom(tf.train.FeatureLists(feature_list=lists))
        return message

    def random_seq() -> tf.train.SequenceExample:
        steps = rng.randrange(1, 5)
        return seq(
            {"length": int_f(steps), "name": bytes_f(b"r%d" % rng.randrange(100))},
            {"tokens": fl(*[int_f(*[rng.randrange(1000) for _ in range(rng.randrange(0, 4))]) for _ in range(steps)]),
             "weights": fl(*[float_bits_f(f32_bits(rng.random())) for _ in range(steps)])},
        )

    records = [
        seq({"length": int_f(3), "name": bytes_f(b"first"), "score": float_bits_f(0x3F000000)},
            {"empty_steps": fl(),
             "tokens": fl(int_f(1, 2, 3), int_f(4), int_f(5, 6)),
             "weights": fl(float_bits_f(0x3E800000), float_bits_f(0x7FC00000), float_bits_f(0x80000000)),
             "words": fl(bytes_f(b"a"), bytes_f(b""), bytes_f(b"\x00b"))}),
        random_seq(),
        seq(None, {"tokens": fl(int_f(7), int_f(), int_f(8, 9))}),  # no context
        seq({"length": int_f(0)}, None),  # no feature_lists
        random_seq(),
        seq({}, {}),
        random_seq(),
    ]
    return [r.SerializeToString(deterministic=True) for r in records]


def large_records() -> List[bytes]:
    """3 Examples; record 1 holds a ~2 MiB blob (larger than a 1 MiB read buffer)."""
    blob = np.random.default_rng(SEED).integers(0, 256, size=2 * 1024 * 1024 - 15, dtype=np.uint8).tobytes()
    records = [example(i=int_f(0)), example(blob=bytes_f(blob)), example(i=int_f(2), tail=bytes_f(b"end"))]
    return [r.SerializeToString(deterministic=True) for r in records]


# Hand-encoded wire bytes: valid protobuf that TensorFlow's writer never produces.


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vint(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def entry(key: Optional[str], feature: Optional[bytes]) -> bytes:
    """A Features map entry (field 1 of Features): key = field 1, value = field 2."""
    body = (ld(1, key.encode("utf-8")) if key is not None else b"") + (ld(2, feature) if feature is not None else b"")
    return ld(1, body)


def features_msg(*entries: bytes) -> bytes:
    return ld(1, b"".join(entries))  # Example.features = field 1


def hand_encoded() -> List[bytes]:
    """10 Examples in wire forms upb accepts; `content` in the manifest is what protobuf reads."""
    int_list = lambda payload: ld(3, payload)  # Feature.int64_list = 3 (Int64List.value = 1)  # noqa: E731
    float_list = lambda payload: ld(2, payload)  # noqa: E731
    bytes_list = lambda payload: ld(1, payload)  # noqa: E731
    unpacked_ints = b"".join(vint(1, v) for v in (1, -1, (1 << 63) - 1))
    unpacked_floats = b"".join(varint(1 << 3 | 5) + struct.pack("<I", b) for b in (0x3F800000, 0x7FC00000, 0x80000000))
    split_packed = ld(1, varint(1) + varint(2)) + ld(1, varint(3))
    return [
        features_msg(entry("ints", int_list(unpacked_ints))),  # unpacked repeated int64
        features_msg(entry("floats", float_list(unpacked_floats))),  # unpacked floats
        features_msg(entry("ints", int_list(split_packed))),  # a packed run split in two
        features_msg(entry("dup", bytes_list(ld(1, b"first"))), entry("dup", bytes_list(ld(1, b"second")))),  # duplicate key
        features_msg(entry("ints", int_list(ld(1, varint(5))) + float_list(ld(1, struct.pack("<I", 0))))),  # two kinds
        features_msg(entry("ints", int_list(ld(1, varint(9))))) + vint(15, 7) + ld(16, b"unknown"),  # unknown fields
        features_msg(entry("merged_a", int_list(ld(1, varint(1))))) + features_msg(entry("merged_b", int_list(ld(1, varint(2))))),  # Features twice
        features_msg(entry("ints", int_list(b""))),  # an empty list
        features_msg(entry("no_kind", None)),  # map entry without value: a Feature with no kind
        features_msg(entry(None, int_list(ld(1, varint(4))))),  # map entry without key: key ""
    ]


HAND_NOTE = ("valid protobuf encodings TF never writes: unpacked lists, split packed runs, duplicate map key, "
             "two kinds in one Feature, unknown fields, Features message repeated, empty list, map entry without "
             "value (-> Feature with no kind), map entry without key (-> key ''); content = protobuf semantics")


# --- writing with TensorFlow ------------------------------------------------------------------


def tf_write(path: str, payloads: List[bytes], compression: str) -> None:
    options = tf.io.TFRecordOptions(compression_type=COMPRESSION[compression])
    with tf.io.TFRecordWriter(path, options) as writer:
        for payload in payloads:
            writer.write(payload)


def frames(payloads: List[bytes]) -> List[Dict[str, int]]:
    out, offset = [], 0
    for payload in payloads:
        out.append({"offset": offset, "length": len(payload)})
        offset += 16 + len(payload)
    return out


# --- what readers make of a file -----------------------------------------------------------------


def enc_value(kind: str, value: Any) -> Any:
    if kind == "bytes_list":
        return {"length": len(value), "sha256": hashlib.sha256(value).hexdigest()} if len(value) > BIG else \
            base64.b64encode(value).decode("ascii")
    if kind == "float_list":
        return "0x%08x" % f32_bits(value) if not isinstance(value, int) else "0x%08x" % value
    return str(int(value))


def float_bits_of(feature) -> List[int]:
    """float32 bit patterns as stored on the wire (Python floats would quiet signalling NaNs)."""
    return [f32_bits(v) for v in feature.float_list.value]


def feature_content(feature: tf.train.Feature) -> Dict[str, Any]:
    kind = feature.WhichOneof("kind")
    if kind is None:
        return {"kind": None, "value": []}
    if kind == "float_list":
        return {"kind": kind, "value": ["0x%08x" % b for b in float_bits_of(feature)]}
    return {"kind": kind, "value": [enc_value(kind, v) for v in getattr(feature, kind).value]}


def content_of(kind: str, payload: bytes) -> Dict[str, Any]:
    if kind == "Example":
        message = tf.train.Example.FromString(payload)
        return {"features": {k: feature_content(v) for k, v in sorted(message.features.feature.items())}}
    message = tf.train.SequenceExample.FromString(payload)
    return {
        "context": {k: feature_content(v) for k, v in sorted(message.context.feature.items())},
        "feature_lists": {k: [feature_content(f) for f in v.feature]
                          for k, v in sorted(message.feature_lists.feature_list.items())},
    }


_TF_DTYPE = {"bytes_list": tf.string, "float_list": tf.float32, "int64_list": tf.int64, None: tf.int64}


def tensor_values(kind: Optional[str], tensor) -> list:
    array = tensor.numpy()
    if kind == "float_list":
        return ["0x%08x" % b for b in np.asarray(array, np.float32).reshape(-1).view(np.uint32).tolist()]
    if kind == "bytes_list":
        return [enc_value(kind, v) for v in np.asarray(array, dtype=object).reshape(-1).tolist()]
    return [str(int(v)) for v in np.asarray(array).reshape(-1).tolist()]


def _tf_message(exc: Exception) -> str:
    """TensorFlow's message, first line, without its `{{function_node ...}}` and `[Op:...]` wrapping."""
    import re

    text = str(getattr(exc, "message", exc)).strip()
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text.splitlines()[0] if text else "")
    return text.split(" [Op:")[0][:200]


def _error(exc: Exception) -> Dict[str, str]:
    return {"error": type(exc).__name__, "message": _tf_message(exc)}


def tensorflow_parse(kind: str, payload: bytes, content: Dict[str, Any]) -> Dict[str, Any]:
    """What tf.io.parse_single_(sequence_)example returns per feature, asked with its own kind."""
    if kind == "Example":
        out = {}
        for name, meta in content["features"].items():
            try:
                parsed = tf.io.parse_single_example(payload, {name: tf.io.VarLenFeature(_TF_DTYPE[meta["kind"]])})
                out[name] = {"ok": tensor_values(meta["kind"], parsed[name].values)}
            except Exception as exc:  # noqa: BLE001 - TensorFlow's verdict is the data
                out[name] = _error(exc)
        return out
    out: Dict[str, Any] = {"context": {}, "feature_lists": {}}
    for name, meta in content["context"].items():
        try:
            parsed, _ = tf.io.parse_single_sequence_example(
                payload, context_features={name: tf.io.VarLenFeature(_TF_DTYPE[meta["kind"]])})
            out["context"][name] = {"ok": tensor_values(meta["kind"], parsed[name].values)}
        except Exception as exc:  # noqa: BLE001
            out["context"][name] = _error(exc)
    for name, steps in content["feature_lists"].items():
        kind_of = steps[0]["kind"] if steps else None
        try:
            _, parsed = tf.io.parse_single_sequence_example(
                payload, sequence_features={name: tf.io.RaggedFeature(_TF_DTYPE[kind_of])})
            rows = parsed[name]
            out["feature_lists"][name] = {"ok": [tensor_values(kind_of, tf.constant(r)) for r in rows.to_list()]}
        except Exception as exc:  # noqa: BLE001
            out["feature_lists"][name] = _error(exc)
    return out


def tensorflow_read(path: str, compression: str) -> Dict[str, Any]:
    """Iterate tf.data.TFRecordDataset: records yielded before the error, and the error."""
    good = 0
    try:
        for _ in tf.data.TFRecordDataset(path, compression_type=COMPRESSION[compression]):
            good += 1
    except Exception as exc:  # noqa: BLE001
        return {"good_records": good, "error": type(exc).__name__, "message": _tf_message(exc)}
    return {"good_records": good, "error": None}


# The `tfrecord` package registers tensorflow.Example in protobuf's default pool, as TensorFlow
# does, so the two cannot share a process: the package is asked in a child process.
_VAHIDK = r"""
import json, sys
from tfrecord import example_pb2, reader
from tfrecord.tools import tfrecord2idx
job = json.loads(sys.argv[1])
if job["op"] == "index":
    tfrecord2idx.create_index(job["data"], job["index"])
    print("{}")
    sys.exit(0)
cls = example_pb2.Example if job["kind"] == "Example" else example_pb2.SequenceExample
yielded, unparseable, out = 0, [], None
try:
    for record in reader.tfrecord_iterator(job["path"], None, compression_type=job["compression"]):
        try:
            cls.FromString(bytes(record))
        except Exception:
            unparseable.append(yielded)
        yielded += 1
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else ""}
result = {"records_yielded": yielded, "unparseable_records": unparseable, "error": None}
result.update(out or {})
print(json.dumps(result))
"""


def _vahidk(job: Dict[str, Any]) -> Dict[str, Any]:
    import subprocess

    done = subprocess.run([sys.executable, "-c", _VAHIDK, json.dumps(job)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def vahidk_read(path: str, compression: str, kind: str) -> Dict[str, Any]:
    """The `tfrecord` 1.14.6 package (it checks no CRC): records yielded, unparseable ones, error."""
    if compression == "ZLIB":
        return {"unsupported": "compression_type must be None or 'gzip'"}
    return _vahidk({"op": "read", "path": path, "kind": kind, "compression": "gzip" if compression == "GZIP" else None})


def vahidk_index(data: str, index: str) -> None:
    """The package's tfrecord2idx index of a plain file."""
    _vahidk({"op": "index", "data": data, "index": index})


# --- the file set -------------------------------------------------------------------------------


def readable(out: str, name: str, kind: str, compression: str, payloads: List[bytes], note: str,
             with_parse: bool) -> Dict[str, Any]:
    path = os.path.join(out, name)
    tf_write(path, payloads, compression)
    meta: Dict[str, Any] = {"kind": kind, "compression": compression, "record_count": len(payloads)}
    records = []
    for where, payload in zip(frames(payloads), payloads):
        record = dict(where, sha256=hashlib.sha256(payload).hexdigest(), content=content_of(kind, payload))
        if with_parse:
            record["tensorflow_parse"] = tensorflow_parse(kind, payload, record["content"])
        records.append(record)
    meta["records"] = records
    if compression == "NONE":
        index_name = name[: -len(".tfrecord")] + ".tfindex"
        vahidk_index(path, os.path.join(out, index_name))
        meta["index_file"] = index_name
    meta["note"] = note
    return meta


def damaged(out: str, name: str, source: str, change: Callable[[bytearray], bytearray],
            corruption: Dict[str, Any], intact: Optional[int], records_in_source: Optional[int]) -> Dict[str, Any]:
    data = change(bytearray(open(os.path.join(out, source), "rb").read()))
    open(os.path.join(out, name), "wb").write(bytes(data))
    meta: Dict[str, Any] = {"kind": "Example", "compression": "GZIP" if name.endswith(".gz") else "NONE",
                            "corruption": dict(corruption, derived_from=source)}
    if intact is not None:
        meta["intact_records_before"] = intact
    if records_in_source is not None:
        meta["records_in_source"] = records_in_source
    return meta


def flip(offset: int, mask: int = 0x10) -> Callable[[bytearray], bytearray]:
    def change(data: bytearray) -> bytearray:
        data[offset] ^= mask
        return data
    return change


def cut(size: int) -> Callable[[bytearray], bytearray]:
    return lambda data: data[:size]


def build(out: str) -> Dict[str, Any]:
    files: Dict[str, Any] = {}
    ex = examples()
    same = "same records as examples.tfrecord"
    files["examples.tfrecord"] = readable(out, "examples.tfrecord", "Example", "NONE", ex,
                                          "record 3 is an empty Example (0-byte payload); record 6 has an empty "
                                          "Features (2 bytes); record 2 has empty lists and a Feature with no kind", True)
    files["examples.tfrecord.gz"] = readable(out, "examples.tfrecord.gz", "Example", "GZIP", ex, same, False)
    files["examples.tfrecord.zlib"] = readable(out, "examples.tfrecord.zlib", "Example", "ZLIB", ex, same, False)
    for suffix, compression in (("", "NONE"), (".gz", "GZIP"), (".zlib", "ZLIB")):
        files["empty.tfrecord" + suffix] = readable(out, "empty.tfrecord" + suffix, "Example", compression, [],
                                                    "zero records, as TFRecordWriter writes them", False)
    files["large_record.tfrecord"] = readable(out, "large_record.tfrecord", "Example", "NONE", large_records(),
                                              "record 1 is ~2 MiB (larger than a 1 MiB read buffer)", False)
    files["sequence_examples.tfrecord"] = readable(
        out, "sequence_examples.tfrecord", "SequenceExample", "NONE", sequence_examples(),
        "ragged steps, an empty feature_list, records without context / without feature_lists", True)
    files["hand_encoded.tfrecord"] = readable(out, "hand_encoded.tfrecord", "Example", "NONE", hand_encoded(),
                                              HAND_NOTE, True)

    where = frames(ex)
    r2, r4 = where[2], where[4]
    n = len(ex)
    for name, offset, region, note in (
        ("corrupt_payload_bitflip.tfrecord", r2["offset"] + 12 + r2["length"] // 2, "flip_payload",
         "one bit flipped in the payload of record 2"),
        ("corrupt_length_bitflip.tfrecord", r2["offset"] + 1, "flip_length",
         "one bit flipped in the length field of record 2"),
        ("corrupt_length_crc.tfrecord", r2["offset"] + 9, "flip_length_crc", "one bit flipped in record 2's length CRC"),
        ("corrupt_data_crc.tfrecord", r2["offset"] + 12 + r2["length"] + 1, "flip_data_crc",
         "one bit flipped in record 2's payload CRC"),
    ):
        files[name] = damaged(out, name, "examples.tfrecord", flip(offset),
                              {"type": "bit_flip", "byte_offset": offset, "xor_mask": "0x10", "record": 2,
                               "region": region, "note": note}, 2, n)
    for name, size, region, note in (
        ("truncated_mid_header.tfrecord", r4["offset"] + 6, "cut_mid_header", "file ends 6 bytes into record 4's 12-byte header"),
        ("truncated_mid_payload.tfrecord", r4["offset"] + 12 + r4["length"] // 2, "cut_mid_payload",
         "file ends in the middle of record 4's payload"),
        ("truncated_mid_footer.tfrecord", r4["offset"] + 12 + r4["length"] + 2, "cut_mid_footer",
         "file ends 2 bytes into record 4's payload CRC"),
    ):
        files[name] = damaged(out, name, "examples.tfrecord", cut(size),
                              {"type": "truncate", "new_size": size, "record": 4, "region": region, "note": note}, 4, n)
    gz_size = os.path.getsize(os.path.join(out, "examples.tfrecord.gz")) * 2 // 3
    files["truncated.tfrecord.gz"] = damaged(out, "truncated.tfrecord.gz", "examples.tfrecord.gz", cut(gz_size),
                                             {"type": "truncate", "new_size": gz_size,
                                              "note": "GZIP stream cut at 2/3 of its compressed size"}, None, None)

    for name, meta in files.items():
        path = os.path.join(out, name)
        raw = open(path, "rb").read()
        meta["size"] = len(raw)
        meta["sha256"] = hashlib.sha256(raw).hexdigest()
        meta["tensorflow_read"] = tensorflow_read(path, meta["compression"])
        meta["vahidk_read"] = vahidk_read(path, meta["compression"], meta["kind"])
    return {
        "format_version": 1,
        "generator": "tests/golden/make_golden.py (seeded), TensorFlow " + tf.__version__,
        "seed": SEED,
        "tensorflow_version": tf.__version__,
        "serialization": "protobuf SerializeToString(deterministic=True): map keys sorted; hand_encoded.tfrecord excepted",
        "value_encoding": {"bytes": f"base64; values over {BIG} bytes: {{length, sha256}}",
                           "float": "float32 bit pattern as '0x%08x' hex", "int64": "decimal string",
                           "kind": "bytes_list | float_list | int64_list | null (no kind set)"},
        "files": files,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=HERE, help="where to write (default: this folder)")
    parser.add_argument("--check", action="store_true", help="regenerate in a temp dir and compare; write nothing")
    args = parser.parse_args(argv)
    out = tempfile.mkdtemp() if args.check else args.out
    manifest = build(out)
    with open(os.path.join(out, "manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write("\n")
    if not args.check:
        print(f"wrote {len(manifest['files'])} files and manifest.json to {out}")
        return 0
    differ = [n for n in sorted(os.listdir(out))
              if open(os.path.join(out, n), "rb").read() != open(os.path.join(HERE, n), "rb").read()]
    shutil.rmtree(out)
    print("identical" if not differ else "differ: " + ", ".join(differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
