"""`tfrecord_beam.inspection`, kept as an import path: the module is `tfrecord_beam.cli.inspection`.

Its public names are re-exported (`__all__`, so `import *` works); any other name is looked up
there on use (PEP 562). A package rather than a module so that git
sees the move of `inspection.py` into `cli/` as a rename.
"""

from typing import Any, List

from ..cli import inspection as _module
from ..cli.inspection import *  # noqa: F403 - the public names, for `import *` and help()
from ..cli.inspection import __all__  # noqa: F401


def __getattr__(name: str) -> Any:
    return getattr(_module, name)


def __dir__() -> List[str]:
    return dir(_module)
