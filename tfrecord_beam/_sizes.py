"""Default sizes of the Beam stages, kept apart from them so a job's --help can show them
without importing Beam (the stages import these names from here)."""

DEFAULT_SPLIT_BYTES = 64 << 20  # a byte range read by one task (uncompressed inputs)
DEFAULT_BUFFER_BYTES = 64 << 20  # the record bytes one shuffle step holds in memory
DEFAULT_ROW_GROUP_ROWS = 131072  # rows per Parquet row group at most
DEFAULT_ROW_GROUP_BYTES = 64 << 20  # payload bytes per Parquet row group at most
