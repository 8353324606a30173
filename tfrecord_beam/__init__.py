"""tfrecord_beam: write, read, index, reshard, mix and convert TFRecord data without TensorFlow.

Also a drop-in for the `tfrecord` package: `import tfrecord_beam as tfrecord` gives the same
names (TFRecordWriter, tfrecord_loader, ...). `tfrecord_beam.torch` and `tfrecord_beam.beam`
load on first use (they need the `[torch]` / `[beam]` extras).
"""

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Dict

from ._version import __version__

# Every public name and the module it lives in. The package loads nothing heavy (numpy, the
# engine) until a name is used, so `tfrecord-beam --help` and the jobs' --help answer at once.
_NAMES: Dict[str, str] = {
    "errors": "",
    "example": "",
    "index": "",
    "iterator_utils": "",
    "records": "",
    "compat": "",
    "engine_info": "._engine_info",
    "TFRecordWriter": ".compat",
    "example_loader": ".compat",
    "multi_tfrecord_loader": ".compat",
    "sequence_loader": ".compat",
    "tfrecord_iterator": ".compat",
    "tfrecord_loader": ".compat",
    "CorruptRecordError": ".errors",
    "CorruptStreamError": ".errors",
    "DecodeError": ".errors",
    "IndexMismatchError": ".errors",
    "OverwriteRefusedError": ".errors",
    "SplitPointError": ".errors",
    "TFRecordError": ".errors",
    "TruncatedRecordError": ".errors",
    "decode_example": ".example",
    "decode_sequence_example": ".example",
    "encode_example": ".example",
    "encode_sequence_example": ".example",
    "normalize_description": ".example",
    "build_index": ".index",
    "create_index": ".index",
    "default_index_path": ".index",
    "load_index": ".index",
    "verify_index": ".index",
    "cycle": ".iterator_utils",
    "sample_iterators": ".iterator_utils",
    "shuffle_iterator": ".iterator_utils",
    "RecordReader": ".records",
    "RecordWriter": ".records",
    "read_records": ".records",
    "write_records": ".records",
}


def _lazy_module(name: str) -> ModuleType:
    """The submodule `name`, executed on its first attribute access (importlib's LazyLoader)."""
    full = f"{__name__}.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.find_spec(full)
    assert spec is not None and spec.loader is not None
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    spec.loader.exec_module(module)
    globals()[name] = module  # as an import would: `tfrecord_beam.NAME`
    return module


# `tfrecord.reader` / `tfrecord.writer` were modules of the `tfrecord` package: alias them.
compat = _lazy_module("compat")
example_pb2 = _lazy_module("_proto")
reader = writer = compat
sys.modules[__name__ + ".reader"] = compat
sys.modules[__name__ + ".writer"] = compat
sys.modules[__name__ + ".example_pb2"] = example_pb2

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


def __getattr__(name: str):
    """Load a public name's module on first use (and the extras' subpackages)."""
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    if name in _NAMES:
        where = _NAMES[name]
        module = importlib.import_module(where or f".{name}", __name__)
        value = module if not where else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_NAMES) | set(_LAZY))
