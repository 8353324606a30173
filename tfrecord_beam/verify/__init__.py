"""`tfrecord_beam.verify`, kept as an import path: the module is `tfrecord_beam.cli.verify`.

A package rather than a module so that git sees the move of `verify.py` into `cli/` as a
rename; `_moved.alias` does the re-exporting.
"""

from .. import _moved
from ..cli import verify as _module

_moved.alias(globals(), _module)
