"""Old import paths kept working after a module moved: `alias(globals(), module)` makes the
calling module re-export the moved module's public names (`__all__`, so `import *` works)
and look any other name up there on use (PEP 562)."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Dict, List


def alias(namespace: Dict[str, Any], module: ModuleType) -> None:
    """Make the module whose globals are `namespace` an import path of `module`."""
    names: List[str] = list(module.__all__)
    namespace.update({name: getattr(module, name) for name in names})
    namespace["__all__"] = names
    namespace["__getattr__"] = lambda name: getattr(module, name)
    namespace["__dir__"] = lambda: dir(module)
