"""Wall time of the generated npugraph_ex-on-CPU tier per op, next to the aot_eager tier, in the same run.

Every example spec is generated (library style); in one process each op's two generated tests run as
functions: `test_<op>_compiled_matches_eager` (aot_eager, the baseline: every example once) and
`test_<op>_npugraph_ex_compiles_on_cpu` (npugraph_ex's backend and passes, capture replaced by an eager
run: the first example three times, new values, mutated buffers reused). Both compile from scratch
(`torch.compiler.reset()`); rounds are interleaved and the median is reported. npugraph_ex's one-time
import (once per pytest process) is reported apart; an op whose tier skips, xfails or fails says so.
Needs `opgen npugraph-ex fetch`.

    python benchmarks/bench_npugraph_ex.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Outcome(Exception):
    pass


def load_tests(project: Path, name: str):
    sys.path[:0] = [str(project), str(project / "tests")]  # the package; tests/graph_checks.py
    spec = importlib.util.spec_from_file_location(name, project / "tests" / "test_graph_entry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn) -> tuple[float, str]:
    """Seconds, and 'passed' or the pytest outcome (skip/xfail/failure) it ended with."""
    start = time.perf_counter()
    try:
        fn()
        outcome = "passed"
    except BaseException as error:  # pytest.skip / pytest.xfail raise BaseExceptions
        if isinstance(error, KeyboardInterrupt):
            raise
        outcome = type(error).__name__
    return time.perf_counter() - start, outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from opgen.npugraph_ex import loader

    reason = loader().unavailable()
    if reason is not None:
        print(f"npugraph_ex_on_cpu: skipped ({reason})")
        return 0
    with tempfile.TemporaryDirectory(prefix="opgen-bench-ngx-") as tmp:
        cases = []
        for spec in sorted((ROOT / "examples").glob("*.yaml")):
            project = Path(tmp) / spec.stem
            subprocess.run([sys.executable, "-m", "opgen", "new", str(spec), "-o", str(project), "--style", "library"],
                           check=True, cwd=ROOT, capture_output=True)
            module = load_tests(project, f"bench_tests_{spec.stem}")
            for name in dir(module):
                if name.startswith("test_") and name.endswith("_npugraph_ex_compiles_on_cpu"):
                    stem = name.removeprefix("test_").removesuffix("_npugraph_ex_compiles_on_cpu")
                    cases.append((stem, getattr(module, f"test_{stem}_compiled_matches_eager"), getattr(module, name)))

        lib = loader()
        start = time.perf_counter()
        with lib.Session():
            pass
        print(f"npugraph_ex_import: {time.perf_counter() - start:.2f} s once per process (first Session)")

        times: dict[str, tuple[list, list]] = {stem: ([], []) for stem, _, _ in cases}
        outcomes = {}
        for _ in range(args.rounds):
            for stem, aot_eager, npugraph_ex in cases:
                base, _ = timed(aot_eager)
                ours, outcomes[stem] = timed(npugraph_ex)
                times[stem][0].append(base)
                times[stem][1].append(ours)
        total_base = total_ours = 0.0
        for stem, (base, ours) in times.items():
            base, ours = statistics.median(base), statistics.median(ours)
            note = "" if outcomes[stem] == "passed" else f", ended: {outcomes[stem]}"
            if outcomes[stem] == "passed":
                total_base, total_ours = total_base + base, total_ours + ours
            print(f"npugraph_ex_on_cpu {stem}: {ours * 1e3:.0f} ms (baseline aot_eager tier: {base * 1e3:.0f} ms, "
                  f"ratio {ours / base:.2f}x{note})")
        print(f"npugraph_ex_on_cpu passing ops: {total_ours:.2f} s (baseline aot_eager tier: {total_base:.2f} s, "
              f"ratio {total_ours / max(total_base, 1e-9):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
