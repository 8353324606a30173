"""Apache Beam IO for TFRecord files (needs the `[beam]` extra).

    import apache_beam as beam
    from tfrecord_beam.beam import ReadFromTFRecord, WriteToTFRecord, DecodeExamples

    with beam.Pipeline() as p:
        (p | ReadFromTFRecord("data/train-*.tfrecord")        # splittable, uses .tfindex files
           | WriteToTFRecord("out/train", file_name_suffix=".tfrecord", num_shards=8))  # + .tfindex each

Public API (Beam's parameters in Beam's order and defaults; ours keyword-only):
    ReadFromTFRecord(file_pattern, coder=BytesCoder(), compression_type=AUTO, validate=True, *,
                     with_filename=False, use_index=True, verify=True, skip_corrupt=False,
                     min_bundle_size=0)
    ReadFromTFRecordBatched(same as ReadFromTFRecord): lists of records, ~1 MiB each
    ReadAllFromTFRecord(coder=BytesCoder(), compression_type=AUTO, with_filename=False, *,
                        use_index=True, verify=True, skip_corrupt=False, desired_bundle_size=64 MiB,
                        min_bundle_size=0, batched=False): for a PCollection of patterns
    With skip_corrupt=True the readers return `result.records` and `result.corrupt`.
    `.tfindex` files a glob matches are skipped (debug log line).
    WriteToTFRecord(file_path_prefix, coder=BytesCoder(), file_name_suffix='', num_shards=0,
                    shard_name_template=None, compression_type=AUTO, triggering_frequency=None, *,
                    write_index=True, max_records_per_shard=None): returns the final shard names;
                    write_index=True differs from Beam (which writes no index); unbounded input
                    gets Beam's windowed names (-W-SSSSS-of-NNNNN)
    DecodeExamples(description=None, sequence_description=None, *, sequence=None, strict=False,
                   batch_size=1024, skip_corrupt=False): `result.examples` / `result.corrupt`
                   when skipping
    EncodeExamples(*, sequence=False, batch_size=1024)
    CorruptRecord(file, offset, reason): the dead-letter element; CORRUPT_TAG = "corrupt".
    METRICS_NAMESPACE = "tfrecord_beam" (counters records_read, bytes_read, corrupt_records,
    records_written, bytes_written, examples_decoded, examples_encoded, undecodable_records).
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
