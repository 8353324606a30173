"""The Beam counters tfrecord_beam reports, all in the namespace `tfrecord_beam`.

Counters are bumped once per chunk or batch, never once per record (a counter update costs
about as much as reading a small record).
"""

from __future__ import annotations

from apache_beam.metrics import Metrics

NAMESPACE = "tfrecord_beam"

RECORDS_READ = "records_read"
BYTES_READ = "bytes_read"  # payload bytes of the records read
CORRUPT_RECORDS = "corrupt_records"
RECORDS_WRITTEN = "records_written"
BYTES_WRITTEN = "bytes_written"  # payload bytes of the records written
EXAMPLES_DECODED = "examples_decoded"
EXAMPLES_ENCODED = "examples_encoded"
UNDECODABLE_RECORDS = "undecodable_records"


def counter(name: str):
    """The counter `tfrecord_beam/<name>`."""
    return Metrics.counter(NAMESPACE, name)
