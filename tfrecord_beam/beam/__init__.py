"""Apache Beam IO for TFRecord files (needs the `[beam]` extra).

    import apache_beam as beam
    from tfrecord_beam.beam import ReadFromTFRecord, WriteToTFRecord, DecodeExamples

    with beam.Pipeline() as p:
        (p | ReadFromTFRecord("data/train-*.tfrecord")        # splittable, uses .tfindex files
           | WriteToTFRecord("out/train", file_name_suffix=".tfrecord", num_shards=8))  # + .tfindex each

Public API (each class's own docstring and signature are the reference; `help(ReadFromTFRecord)`):
    ReadFromTFRecord         records of files matching a pattern, split inside files (by the
                             `.tfindex` records, else by byte ranges with a resync)
    ReadFromTFRecordBatched  the same, as lists of records (~1 MiB each): fewer elements
    ReadAllFromTFRecord      the same for a PCollection of patterns
    WriteToTFRecord          shards plus a `.tfindex` each (Beam writes no index); returns the
                             final shard names; unbounded input gets Beam's windowed names
    DecodeExamples / EncodeExamples   payloads <-> Example / SequenceExample dicts, in batches
    CorruptRecord, CORRUPT_TAG        the dead-letter element and its tag: with
                             skip_corrupt=True the readers and DecodeExamples return tagged
                             outputs (`result.records` / `result.examples` and `result.corrupt`)
    METRICS_NAMESPACE        the namespace of the counters (their names: `_metrics.py`)
The readers and the writer take Beam's parameters in Beam's order with Beam's defaults (as
`apache_beam.io.tfrecordio`); our additions are keyword-only. `.tfindex` files a glob matches
are skipped (debug log line).
"""

from .._extras import require_beam

require_beam()  # a clear error without the [beam] extra; Beam's import-time log noise dropped

from ._corrupt import CORRUPT_TAG, CorruptRecord  # noqa: E402
from ._metrics import NAMESPACE as METRICS_NAMESPACE  # noqa: E402
from .transforms import (  # noqa: E402
    DecodeExamples,
    EncodeExamples,
    ReadAllFromTFRecord,
    ReadFromTFRecord,
    ReadFromTFRecordBatched,
    WriteToTFRecord,
)

__all__ = [
    "ReadFromTFRecord",
    "ReadFromTFRecordBatched",
    "ReadAllFromTFRecord",
    "WriteToTFRecord",
    "DecodeExamples",
    "EncodeExamples",
    "CorruptRecord",
    "CORRUPT_TAG",
    "METRICS_NAMESPACE",
]
