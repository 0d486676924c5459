"""`opgen new` wall time per example (a fresh process each, as a user runs it), next to the
interpreter's own start-up and `opgen --help` measured in the same run. Target: < 1 s per example.
Then `opgen new --dry-run` on specs of 50, 200 and 2000 ops: the time per op must not grow with the number of
ops (target: the per-op time at 2000 ops within 1.5x of that at 50; it was 6x before each op's template stopped
receiving the whole project's context).

    python benchmarks/bench_new.py [--runs 3] [--ops 50,200,2000]
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


def many_ops_spec(count: int) -> str:
    lines = ["namespace: many", "style: library", "device: npu", "ops:"]
    for index in range(count):
        lines += [f'  - schema: "op{index}(Tensor x, float s) -> Tensor"', "    outputs:", "      out0: {like: x}",
                  '    reference: "return x * s"', "    examples:", "      - {x: {shape: [2, 3]}, s: 2.0}"]
    return "\n".join(lines) + "\n"


def scaling(counts: list[int], runs: int, tmp: str) -> None:
    """Seconds per op of `opgen new --dry-run` over N ops, minus the start-up (a spec of one op)."""
    def seconds(count: int) -> float:
        spec = Path(tmp) / f"ops{count}.yaml"
        spec.write_text(many_ops_spec(count), encoding="utf-8")
        return wall([sys.executable, "-m", "opgen", "new", str(spec), "-o", str(Path(tmp) / f"out{count}"),
                     "--dry-run"], runs if count < 1000 else 1)

    base = seconds(1)
    per_op = {}
    for count in counts:
        value = seconds(count)
        per_op[count] = (value - base) / count
        print(f"opgen new --dry-run, {count} ops: {value:.2f} s, {per_op[count] * 1000:.1f} ms per op "
              f"(baseline 1 op: {base:.2f} s)")
    ratio = per_op[counts[-1]] / per_op[counts[0]]
    print(f"per-op time at {counts[-1]} ops / at {counts[0]} ops: {ratio:.2f}x (target <= 1.5x: "
          f"{'met' if ratio <= 1.5 else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ops", default="50,200,2000", help="comma-separated op counts for the scaling figure")
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
        scaling([int(count) for count in args.ops.split(",")], args.runs, tmp)


if __name__ == "__main__":
    main()
