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


def torch_npu_wheel(version: str = "2.13.0") -> tuple[Path | None, str]:
    """The torch-npu wheel a benchmark reads: $OPGEN_TORCH_NPU_WHEEL, else one pip downloads (once) into
    ~/.cache/opgen-bench/wheels. (None, the reason) when neither works (offline, say)."""
    given = os.environ.get("OPGEN_TORCH_NPU_WHEEL")
    if given:
        return (Path(given), "") if Path(given).is_file() else (None, f"OPGEN_TORCH_NPU_WHEEL={given} is no file")
    cache = Path.home() / ".cache" / "opgen-bench" / "wheels"
    found = sorted(cache.glob(f"torch_npu-{version}-*.whl"))
    if not found:
        import subprocess

        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               f"torch-npu=={version}", "-d", str(cache)], capture_output=True, text=True, check=False)
        found = sorted(cache.glob(f"torch_npu-{version}-*.whl"))
        if not found:
            return None, f"pip could not download torch-npu {version}: {(done.stderr or done.stdout).strip()[-200:]}"
    return found[0], ""
