"""Wall time of `opgen check` on one passing op, every rung, against the target of 30 s.

The op is the RMS norm example (`opgen new examples/rms_norm.yaml`), checked as a generated project;
the baseline, measured in the same run, is `python -c "import torch"`: the floor of any process that
runs the op. npugraph_ex's rung runs when `opgen npugraph-ex fetch` filled the cache, and is reported as
skipped otherwise (then the figure does not include it).

    python benchmarks/bench_check.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 30.0


def wall(command: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="opgen-bench-check-") as tmp:
        project = Path(tmp) / "rms_norm"
        made = subprocess.run([sys.executable, "-m", "opgen", "new", str(ROOT / "examples" / "rms_norm.yaml"),
                               "-o", str(project)], cwd=ROOT, capture_output=True, text=True, check=False)
        if made.returncode != 0:
            print(made.stderr, file=sys.stderr)
            return 1
        checks, floors, report = [], [], None
        for _ in range(args.rounds):
            floors.append(wall([sys.executable, "-c", "import torch"], ROOT)[0])
            seconds, done = wall([sys.executable, "-m", "opgen", "check", "--json", str(project)], ROOT)
            if done.returncode != 0:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            checks.append(seconds)
            report = json.loads(done.stdout.splitlines()[0])
    check, floor = statistics.median(checks), statistics.median(floors)
    rungs = ", ".join(f"{r['name']} {r['status']} {r['seconds']:.2f}s" for r in report["rungs"])
    print(f"check_passing_op: {check:.1f} s (baseline: import torch {floor:.1f} s, ratio {check / floor:.1f}x, "
          f"target < {TARGET_S:.0f} s)")
    print(f"  rungs: {rungs}")
    return 0 if check < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
