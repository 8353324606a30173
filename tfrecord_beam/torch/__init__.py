"""PyTorch datasets over TFRecord files (needs the `[torch]` extra).

`from tfrecord_beam.torch import TFRecordDataset` works as `from tfrecord.torch import
TFRecordDataset` did, with exactly-once sharding over DDP ranks and DataLoader workers,
seeded shuffling, resumable iteration, batched tensors and a map-style indexed dataset.
"""

from .._extras import require

require("torch", "tfrecord_beam.torch")

from ._collate import Sample, SequenceBatch  # noqa: E402
from .dataset import IndexedTFRecordDataset, MultiTFRecordDataset, TFRecordDataset  # noqa: E402

__all__ = ["TFRecordDataset", "MultiTFRecordDataset", "IndexedTFRecordDataset", "Sample", "SequenceBatch"]
