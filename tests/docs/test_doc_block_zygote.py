"""The doc-block runner's zygote (helpers/zygote.py, used by helpers/doc_blocks.py; the rest of
its contract is tests/project/test_zygote.py's) runs a block as `python -c` would: the
heavy libraries it imported before forking must not make a block pass that fails for a reader
(a submodule some other library loaded, reached as an attribute without its import), and what
a block defines lives in `__main__` (plain pickle finds it there)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.doc_blocks import _block_env, run_python

pytest.importorskip("apache_beam")
pytest.importorskip("torch")


CASES = {
    # pyarrow alone does not load pyarrow.parquet or pyarrow.fs (Beam, preloaded, does)
    "submodule-unimported": "import pyarrow as pa\nprint(pa.parquet.__name__)",
    "submodule-fs-unimported": "import pyarrow as pa\nprint(pa.fs.__name__)",
    "submodule-imported": "import pyarrow.parquet\nimport pyarrow\nprint(pyarrow.parquet.core.__name__)",
    "from-import": "from pyarrow import parquet\nprint(parquet.__name__)",
    "through-beam": "import apache_beam, pyarrow\nprint(pyarrow.parquet.__name__)",
    "main-pickle": "import pickle\nclass C:\n    pass\nprint(type(pickle.loads(pickle.dumps(C()))).__name__)",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_block_runs_as_python_c_runs_it(name, tmp_path):
    code = CASES[name]
    real = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_block_env(), capture_output=True, text=True, timeout=300
    )
    forked = run_python(code, tmp_path)
    assert (forked.returncode == 0, forked.stdout) == (real.returncode == 0, real.stdout), (
        f"python -c: {real.returncode} {real.stdout!r} {real.stderr[-500:]}\n"
        f"zygote: {forked.returncode} {forked.stdout!r} {forked.stderr[-500:]}"
    )
