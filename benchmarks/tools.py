"""Finding the command-line tools a benchmark compares against."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_tool(name: str) -> str | None:
    """`name` installed next to the running interpreter (a venv whose bin/ is not on PATH), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def skipped(what: str, reason: str) -> None:
    """A baseline that cannot run here: say so and why, and let the other figures go on."""
    print(f"{what}: skipped ({reason})")
