"""opgen meta-coverage on the torch-npu 2.13.0 wheel: its merged custom-op YAML and its Meta files.

Prints how many `custom:` ops have no Meta/fake registration and the wall time of the whole command
(`python -m opgen meta-coverage ... --json`, cold process), next to a baseline measured in the same run:
a process that only loads the same YAML with PyYAML's C loader and parses the Meta files with ast.

    python benchmarks/bench_meta_coverage.py [--wheel PATH] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL = os.environ.get("OPGEN_TORCH_NPU_WHEEL", "/work/cache/torch_npu-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")
YAML = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
METAS = ("torch_npu/op_plugin/meta/_meta_registrations.py", "torch_npu/op_plugin/meta/_fake_registrations.py")
BASELINE = """
import ast, sys, yaml
yaml.load(open(sys.argv[1]).read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
for path in sys.argv[2:]:
    ast.parse(open(path).read())
"""


def timed(command: list[str], runs: int) -> tuple[float, subprocess.CompletedProcess]:
    times, done = [], None
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times), done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", default=WHEEL)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not Path(args.wheel).is_file():
        print(f"meta_coverage: skipped, no torch-npu wheel at {args.wheel} (set OPGEN_TORCH_NPU_WHEEL)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(args.wheel) as wheel:
            for name in (YAML, *METAS):
                wheel.extract(name, tmp)
        files = [str(Path(tmp) / name) for name in (YAML, *METAS)]
        meta_args = [part for path in files[1:] for part in ("--meta", path)]
        command = [sys.executable, "-m", "opgen", "meta-coverage", files[0], *meta_args, "--json"]
        seconds, done = timed(command, args.runs)
        if done.returncode not in (0, 1):
            print(done.stderr, file=sys.stderr)
            return 2
        report = json.loads(done.stdout)
        baseline, _ = timed([sys.executable, "-c", BASELINE, *files], args.runs)
    print(f"meta_coverage_missing: {len(report['missing'])} of {report['total']} custom ops without Meta/fake "
          f"({len(report['emittable'])} emittable; the wheel's merged YAML has no gen_opapi blocks)")
    print(f"meta_coverage_time: {seconds:.3f} s (baseline: {baseline:.3f} s for yaml C loader + ast only, "
          f"ratio {seconds / baseline:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
