"""`tfrecord_beam.inspection`, kept as an import path: the module is `tfrecord_beam.cli.inspection`.

Every name is looked up there on use (PEP 562), so `from tfrecord_beam.inspection import
collect_stats` keeps working and nothing is copied. A package rather than a module so that git
sees the move of `inspection.py` into `cli/` as a rename.
"""

from typing import Any, List

from ..cli import inspection as _module


def __getattr__(name: str) -> Any:
    return getattr(_module, name)


def __dir__() -> List[str]:
    return dir(_module)
