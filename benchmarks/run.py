"""Run every benchmarks/bench_*.py, each in its own process, and print their figures.

Each benchmark prints lines like `name: value unit (baseline: value unit, ratio Nx, target >= Mx)`,
measured against its baseline in the same run.

    python benchmarks/run.py [--only schema_parse] [--list]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> list[Path]:
    return sorted(HERE.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run opgen's benchmarks.")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only bench_NAME.py (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    benches = discover()
    if args.only:
        wanted = {name.removeprefix("bench_").removesuffix(".py") for name in args.only}
        unknown = wanted - {b.stem.removeprefix("bench_") for b in benches}
        if unknown:
            print(f"error: no benchmark named {', '.join(sorted(unknown))}; have: "
                  + ", ".join(b.stem.removeprefix("bench_") for b in benches), file=sys.stderr)
            return 2
        benches = [b for b in benches if b.stem.removeprefix("bench_") in wanted]
    if args.list:
        print("\n".join(b.stem.removeprefix("bench_") for b in benches))
        return 0

    failed = []
    for bench in benches:
        print(f"== {bench.stem.removeprefix('bench_')}", flush=True)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(bench)], cwd=HERE.parent, check=False)
        print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
        if done.returncode != 0:
            failed.append(bench.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
