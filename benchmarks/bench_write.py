"""What the safe writer (opgen.render.write) costs against writing the files naively, same run.

Baseline: `Path.write_text` of every file, no checks, no fsync (what a plain template render does).
Figures: a first write (plan + apply: path checks, temp file + fsync + rename per file, manifest),
a no-op regeneration (plan + apply when nothing changed: reads and hashes only), and a regeneration
where a tenth of the generated files changed. Project sizes: 12 files (one op) and 400 files.
Targets: first write of a one-op project under 50 ms; a no-op regeneration no slower than the naive
rewrite it replaces (ratio >= 1x).

    python benchmarks/bench_write.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opgen.render.write import PlannedFile, apply_plan, plan_changes


def project(size: int, version: int = 0) -> list[PlannedFile]:
    files = []
    for index in range(size):
        owner = "user" if index % 4 == 3 else "generated"
        changed = owner == "generated" and index % 10 == 0 and version
        body = "".join(f"def op_{index}_{line}(x):\n    return x + {line + (version if changed else 0)}\n"
                       for line in range(60))
        files.append(PlannedFile(f"pkg/sub{index % 7}/mod_{index}.py", body, owner))
    return files


def naive(root: Path, files: list[PlannedFile]) -> None:
    for file in files:
        target = root / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.content, encoding="utf-8")


def safe(root: Path, files: list[PlannedFile]) -> None:
    apply_plan(plan_changes(root, files))


def timed(runs: int, prepare, action) -> float:
    """Median seconds of `action(root)` over fresh copies made by `prepare(root)`."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as name:
            root = Path(name) / "proj"
            prepare(root)
            start = time.perf_counter()
            action(root)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(name: str, value: float, baseline: float, target: str) -> None:
    print(f"{name}: {value * 1000:.1f} ms (baseline naive write: {baseline * 1000:.1f} ms, "
          f"ratio {baseline / value:.2f}x, {target})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    for size in (12, 400):
        files, files_v2 = project(size), project(size, version=1)

        def nothing(root: Path) -> None:
            root.mkdir()

        def generated(root: Path, files=files) -> None:
            safe(root, files)

        baseline = timed(args.runs, nothing, lambda root, files=files: naive(root, files))
        first = timed(args.runs, nothing, lambda root, files=files: safe(root, files))
        noop = timed(args.runs, generated, lambda root, files=files: safe(root, files))
        update = timed(args.runs, generated, lambda root, files=files_v2: safe(root, files))
        target = "target < 50 ms" if size == 12 else "no target"
        report(f"first write, {size} files", first, baseline, target)
        report(f"no-op regeneration, {size} files", noop, baseline, "target ratio >= 1x")
        report(f"regeneration, {size} files, 10% of generated changed", update, baseline, "no target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
