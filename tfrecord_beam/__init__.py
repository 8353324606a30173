"""tfrecord_beam: write, read, index, reshard, mix and convert TFRecord data without TensorFlow.

Also a drop-in for the `tfrecord` package: `import tfrecord_beam as tfrecord` gives the same
names (TFRecordWriter, tfrecord_loader, ...). `tfrecord_beam.torch` and `tfrecord_beam.beam`
load on first use (they need the `[torch]` / `[beam]` extras).
"""

import importlib
import sys

from . import _proto as example_pb2
from . import compat, errors, example, index, iterator_utils, records
from ._engine_info import engine_info
from ._version import __version__
from .compat import (
    TFRecordWriter,
    example_loader,
    multi_tfrecord_loader,
    sequence_loader,
    tfrecord_iterator,
    tfrecord_loader,
)
from .errors import (
    CorruptRecordError,
    CorruptStreamError,
    DecodeError,
    IndexMismatchError,
    OverwriteRefusedError,
    SplitPointError,
    TFRecordError,
    TruncatedRecordError,
)
from .example import (
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
    normalize_description,
)
from .index import (
    build_index,
    create_index,
    default_index_path,
    load_index,
    verify_index,
)
from .iterator_utils import cycle, sample_iterators, shuffle_iterator
from .records import RecordReader, RecordWriter, read_records, write_records

# `torch`, `beam`, `columnar`, `tools`, `cli` and `arrow` load on first use and stay out of `*`
__all__ = [
    "errors",
    "example",
    "index",
    "iterator_utils",
    "records",
    "example_pb2",
    "compat",
    "reader",
    "writer",
    "TFRecordWriter",
    "example_loader",
    "multi_tfrecord_loader",
    "sequence_loader",
    "tfrecord_iterator",
    "tfrecord_loader",
    "CorruptRecordError",
    "CorruptStreamError",
    "DecodeError",
    "IndexMismatchError",
    "OverwriteRefusedError",
    "SplitPointError",
    "TFRecordError",
    "TruncatedRecordError",
    "decode_example",
    "decode_sequence_example",
    "encode_example",
    "encode_sequence_example",
    "normalize_description",
    "build_index",
    "create_index",
    "default_index_path",
    "load_index",
    "verify_index",
    "cycle",
    "sample_iterators",
    "shuffle_iterator",
    "RecordReader",
    "RecordWriter",
    "read_records",
    "write_records",
    "engine_info",
    "__version__",
]

# `tfrecord.reader` / `tfrecord.writer` were modules of the `tfrecord` package: alias them.
reader = writer = compat
sys.modules[__name__ + ".reader"] = compat
sys.modules[__name__ + ".writer"] = compat
sys.modules[__name__ + ".example_pb2"] = example_pb2

_LAZY = ("torch", "beam", "columnar", "tools", "cli", "arrow")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
