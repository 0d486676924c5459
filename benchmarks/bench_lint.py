"""opgen lint vs ruff vs a libcst-based linter, on the same tree in the same run.

Tree: the installed torch package's Python files (about 2,300 files). Prints each figure next to its
baseline and the ratio. Targets (issue 4): opgen lint no slower than `ruff check --no-cache`, at least
50x faster than a libcst-based linter (torchfix, else fixit, else a libcst parse + PositionProvider
visit, said so), and a single small file in under 0.3 s wall, cold.

The libcst linter is timed on a fixed slice (every 10th file) because the whole tree takes about
15 minutes; opgen lint is timed on the same slice for the direct ratio, and the slice time is scaled
by the file count for the whole-tree estimate. Set OPGEN_BENCH_LIBCST_LINTER to a torchfix or fixit
executable (default: looked up on PATH and in /tmp/bench-venv/bin).

    python benchmarks/bench_lint.py [--runs 3] [--tree PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import find_tool, skipped

ROOT = Path(__file__).resolve().parents[1]
SMALL_FILE = ROOT / "tests" / "fixtures" / "lint" / "good.py"


def _wall(command: list[str], runs: int, cwd: Path | None = None) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return times


def _python_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*.py") if "__pycache__" not in p.parts)


def _libcst_linter() -> list[str] | None:
    override = os.environ.get("OPGEN_BENCH_LIBCST_LINTER")
    candidates = [override] if override else []
    candidates += [shutil.which("torchfix"), "/tmp/bench-venv/bin/torchfix", shutil.which("fixit"),
                   "/tmp/bench-venv/bin/fixit"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            if Path(candidate).name == "torchfix":
                return [candidate, "--select", "ALL"]
            return [candidate, "lint"]
    return None


def _libcst_visit(files: list[Path]) -> float:
    """Fallback: what any libcst linter pays at least (parse + PositionProvider + a visit)."""
    import libcst
    from libcst.metadata import MetadataWrapper, PositionProvider

    class Visitor(libcst.CSTVisitor):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def visit_Call(self, node):
            self.get_metadata(PositionProvider, node)

    start = time.perf_counter()
    failures = 0
    for path in files:
        try:
            MetadataWrapper(libcst.parse_module(path.read_bytes())).visit(Visitor())
        except Exception:  # noqa: BLE001  (a file libcst cannot parse still costs its time)
            failures += 1
    if failures:
        print(f"  (libcst could not parse {failures} files)")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=None)
    args = parser.parse_args(argv)
    tree = args.tree or Path(importlib.util.find_spec("torch").origin).parent
    files = _python_files(tree)
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    print(f"tree: {tree} ({len(files)} .py files, {lines:,} lines), {os.cpu_count()} cores, "
          f"median of {args.runs} cold runs")

    opgen = [sys.executable, "-m", "opgen", "lint", "--exit-zero", str(tree)]
    ruff_path = find_tool("ruff")
    ruff = [ruff_path or "ruff", "check", "--no-cache", "--exit-zero", "-q", str(tree)]
    opgen_times, ruff_times = [], []
    for _ in range(args.runs):  # interleaved, so a change in machine load hits both alike
        opgen_times += _wall(opgen, 1)
        if ruff_path:
            ruff_times += _wall(ruff, 1)
    opgen_s = statistics.median(opgen_times)
    if ruff_path:
        ruff_s = statistics.median(ruff_times)
        print(f"opgen lint, whole tree: {opgen_s:.2f} s (baseline: ruff check --no-cache {ruff_s:.2f} s, "
              f"ratio {opgen_s / ruff_s:.2f}x, target <= 1x: {'met' if opgen_s <= ruff_s else 'MISSED'})")
    else:
        print(f"opgen lint, whole tree: {opgen_s:.2f} s")
        skipped("baseline ruff check --no-cache", f"ruff is neither next to {sys.executable} nor on PATH: "
                "pip install ruff")

    slice_files = files[::10]
    with tempfile.TemporaryDirectory() as scratch:
        slice_root = Path(scratch) / "slice"
        for index, path in enumerate(slice_files):
            target = slice_root / f"{index:04}_{path.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        opgen_slice = statistics.median(_wall([sys.executable, "-m", "opgen", "lint", "--exit-zero",
                                               str(slice_root)], args.runs))
        linter = _libcst_linter()
        if linter is None and importlib.util.find_spec("libcst") is None:
            skipped("baseline libcst-based linter", "neither torchfix/fixit nor libcst is installed: "
                    "pip install -e '.[bench]'")
            linter_missing = True
        elif linter is not None:
            name = Path(linter[0]).name
            libcst_s = statistics.median(_wall([*linter, str(slice_root)], 1))
            what = f"{name} (libcst-based linter)"
            linter_missing = False
        else:
            libcst_s = _libcst_visit(sorted(slice_root.iterdir()))
            what = "libcst parse+PositionProvider visit (torchfix/fixit not installed)"
            linter_missing = False
    if not linter_missing:
        scale = len(files) / len(slice_files)
        slice_ratio = libcst_s / opgen_slice
        whole_ratio = libcst_s * scale / opgen_s
        print(f"opgen lint, slice of {len(slice_files)} files (every 10th): {opgen_slice:.2f} s (baseline: {what} "
              f"{libcst_s:.1f} s, speed-up {slice_ratio:.0f}x, target >= 50x: "
              f"{'met' if slice_ratio >= 50 else 'MISSED'})")
        print(f"opgen lint, whole tree: {opgen_s:.2f} s (baseline: {what} scaled from the slice "
              f"{libcst_s * scale:.0f} s, speed-up {whole_ratio:.0f}x, target >= 50x: "
              f"{'met' if whole_ratio >= 50 else 'MISSED'})")

    small = _wall([sys.executable, "-m", "opgen", "lint", str(SMALL_FILE)], 10)
    bare = _wall([sys.executable, "-c", "pass"], 10)
    small_s, bare_s = statistics.median(small), statistics.median(bare)
    print(f"opgen lint, one small file cold: {small_s:.3f} s (baseline: python -c pass {bare_s:.3f} s, "
          f"ratio {small_s / bare_s:.1f}x, target < 0.3 s: {'met' if small_s < 0.3 else 'MISSED'})")


if __name__ == "__main__":
    main()
