"""Run every benchmark (or those named): `python -m bench [core native files torch beam pipelines blockgzip planned_blockgzip resync convert]`."""

from __future__ import annotations

import importlib
import sys

ALL = ["core", "native", "files", "torch", "beam", "pipelines", "blockgzip", "planned_blockgzip", "resync", "convert"]


def main(argv=None) -> None:
    names = (argv if argv is not None else sys.argv[1:]) or ALL
    for name in names:
        try:
            module = importlib.import_module(f"bench.bench_{name}")
        except ImportError as exc:
            print(f"(bench_{name} not available: {exc})", file=sys.stderr)
            continue
        module.main([])


if __name__ == "__main__":
    main()
