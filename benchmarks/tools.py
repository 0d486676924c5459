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


BENCH_CACHE = Path(os.environ.get("OPGEN_BENCH_CACHE") or Path.home() / ".cache" / "opgen-bench")


def cached_wheel(requirement: str, *, offline: bool = False) -> tuple[Path | None, str]:
    """`NAME==VERSION`'s wheel (or sdist) in BENCH_CACHE/wheels, downloaded once with pip; (None, the
    reason) when it is not there and cannot be had (offline, no network, no such version)."""
    import subprocess

    wheels = BENCH_CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    name, version = requirement.split("==")
    prefix = f"{name.replace('-', '_').lower()}_{version}"

    def found() -> list[Path]:
        return sorted(p for p in wheels.iterdir() if p.name.lower().replace("-", "_").startswith(prefix))

    if not found():
        if offline:
            return None, f"{requirement} is not in {wheels} and --offline was given"
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--timeout", "30",
                               "--retries", "1", requirement, "-d", str(wheels)],
                              capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0 or not found():
            return None, f"pip download {requirement} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return found()[0], ""


def torch_npu_wheel(version: str = "2.13.0", *, offline: bool = False) -> tuple[Path | None, str]:
    """The torch-npu wheel a benchmark reads: $OPGEN_TORCH_NPU_WHEEL, else `cached_wheel`."""
    given = os.environ.get("OPGEN_TORCH_NPU_WHEEL")
    if given:
        return (Path(given), "") if Path(given).is_file() else (None, f"OPGEN_TORCH_NPU_WHEEL={given} is no file")
    return cached_wheel(f"torch-npu=={version}", offline=offline)
