"""Ending the server and proxy processes the fixtures start: one way for all of them."""

from __future__ import annotations

import subprocess
from typing import Optional


def end_process(process: Optional[subprocess.Popen], grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; reaped either way (None or already ended: nothing)."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
