"""The Beam-free helpers a job's command line and summary are built from: the public face of
the library's shared command-line internals for `pipelines/` (and any job written outside it).

Standard library only, so a job's `--help` answers before numpy, Beam or torch load. Each name
is the library's own (re-exported, not copied): the strict parser and exit statuses the
`tfrecord-beam` CLI uses too, the numeric argument types, the default sizes, the Beam-extra
check, the engine line for `--version`, and the described-but-absent feature check.
"""

from __future__ import annotations

from ._bounded import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, parse_timeout, set_remote_timeout
from ._described import absent_features, absent_names
from ._described import message as absent_features_message
from ._engine_info import describe as describe_engine
from ._extras import require_beam
from ._sizes import DEFAULT_BUFFER_BYTES, DEFAULT_ROW_GROUP_BYTES, DEFAULT_ROW_GROUP_ROWS, DEFAULT_SPLIT_BYTES
from ._usage import (
    EXIT_BAD_DATA,
    EXIT_FAILURE,
    EXIT_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    add_version,
    non_negative_int,
    plural,
    positive_int,
    repeated_flags,
    unknown_arguments_message,
    usage_error,
)

__all__ = [
    # exit statuses and the strict parser
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "EXIT_BAD_DATA",
    "EXIT_INTERRUPTED",
    "EXIT_HELP",
    "ArgumentParser",
    "UsageError",
    "add_version",
    "usage_error",
    "repeated_flags",
    "unknown_arguments_message",
    # argument types and wording
    "positive_int",
    "non_negative_int",
    "plural",
    # default sizes
    "DEFAULT_SPLIT_BYTES",
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_ROW_GROUP_ROWS",
    "DEFAULT_ROW_GROUP_BYTES",
    # the bound on each remote call (--timeout, $TFRECORD_BEAM_TIMEOUT)
    "DEFAULT_TIMEOUT_S",
    "TIMEOUT_ENV",
    "parse_timeout",
    "set_remote_timeout",
    # the environment
    "require_beam",
    "describe_engine",
    # described features the data does not have
    "absent_features",
    "absent_names",
    "absent_features_message",
]
