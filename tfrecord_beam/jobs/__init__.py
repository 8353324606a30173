"""The planned-job engine: what the jobs (`pipelines/`) and the Beam stages built for them
(`tfrecord_beam.beam.planned`, `.shuffle`) are made of, with no Beam in it.

- `_walk`: walking a file's frames from their headers (both CRCs, or stepping over corrupt
  records with --skip_corrupt) and the digests that prove a job kept every record;
- `_plan`: surveys of the input files and plans of output shards as pieces of them;
- `_copy`: streaming a shard's pieces into a `RecordWriter`;
- `_bucketed`: the bounded spill-to-disk runs and buckets of the shuffles (mix,
  reshard --shuffle).

Why a package of its own: only the jobs and the Beam wing use it, so it does not sit among the
core's reading and writing modules, and it stays testable without Beam. The names below
(`__all__`) are its public face: code outside the package (pipelines/, tfrecord_beam/beam/)
imports them from `tfrecord_beam.jobs`, never from the private modules (tests may).
"""

from .._engine._common import VERIFY_ALL, VERIFY_LENGTHS
from .._tfindex import IndexStream
from ..digest import index_digest
from ._bucketed import RUN_BYTES, RunSpiller, Scratch, SegmentTable, bucket_of, buckets_for, write_merged
from ._copy import copy_pieces, piece_chunks
from ._plan import FileSurvey, Piece, ShardPlan, Surveyor, merge_parts, plan_contiguous, survey, survey_parts
from ._walk import add_digests, frame_digest, walk_frames, walk_frames_skipping
from ._written import ChecksumMismatch, check_meant, check_written

__all__ = [
    # how much of each frame a walk checks (lengths only, or both CRCs)
    "VERIFY_ALL",
    "VERIFY_LENGTHS",
    # walking frames and the digests of what was read
    "walk_frames",
    "walk_frames_skipping",
    "add_digests",
    "frame_digest",
    # surveys and shard plans
    "FileSurvey",
    "Surveyor",
    "survey",
    "survey_parts",
    "merge_parts",
    "Piece",
    "ShardPlan",
    "plan_contiguous",
    # copying planned pieces
    "copy_pieces",
    "piece_chunks",
    # the proof of what a shard writer (or an index stream) wrote
    "IndexStream",
    "index_digest",
    "ChecksumMismatch",
    "check_meant",
    "check_written",
    # the shuffles' bounded buckets
    "RUN_BYTES",
    "RunSpiller",
    "Scratch",
    "SegmentTable",
    "bucket_of",
    "buckets_for",
    "write_merged",
]
