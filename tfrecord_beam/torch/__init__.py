"""PyTorch datasets over TFRecord files (needs the `[torch]` extra).

`from tfrecord_beam.torch import TFRecordDataset` works as `from tfrecord.torch import
TFRecordDataset` did, with exactly-once sharding over DDP ranks and DataLoader workers,
seeded shuffling, resumable iteration, batched tensors and a map-style indexed dataset.
"""

from ._collate import Sample, SequenceBatch
from .dataset import IndexedTFRecordDataset, MultiTFRecordDataset, TFRecordDataset

__all__ = ["TFRecordDataset", "MultiTFRecordDataset", "IndexedTFRecordDataset", "Sample", "SequenceBatch"]
