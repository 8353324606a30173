"""`tfrecord_beam.inspection`, kept as an import path: the module is `tfrecord_beam.cli.inspection`.

A package rather than a module so that git sees the move of `inspection.py` into `cli/` as a
rename; `_moved.alias` does the re-exporting.
"""

from .. import _moved
from ..cli import inspection as _module

_moved.alias(globals(), _module)
