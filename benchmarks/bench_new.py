"""`opgen new` wall time per example (a fresh process each, as a user runs it), next to the
interpreter's own start-up and `opgen --help` measured in the same run. Target: < 1 s per example.

    python benchmarks/bench_new.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    python = wall([sys.executable, "-c", "pass"], args.runs)
    helps = wall([sys.executable, "-m", "opgen", "--help"], args.runs)
    print(f"python -c pass: {python:.3f} s (baseline)")
    print(f"opgen --help: {helps:.3f} s (baseline python: {python:.3f} s, ratio {helps / python:.1f}x)")
    with tempfile.TemporaryDirectory() as tmp:
        worst = 0.0
        for spec in sorted((ROOT / "examples").glob("*.yaml")):
            times = []
            for run in range(args.runs):
                out = Path(tmp) / f"{spec.stem}-{run}"
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "opgen", "new", str(spec), "-o", str(out)], cwd=ROOT,
                               capture_output=True, check=True)
                times.append(time.perf_counter() - start)
            value = statistics.median(times)
            worst = max(worst, value)
            print(f"opgen new {spec.name}: {value:.3f} s (baseline python: {python:.3f} s, "
                  f"ratio {value / python:.1f}x, target < 1 s)")
        print(f"slowest example: {worst:.3f} s (target < 1 s: {'met' if worst < 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
