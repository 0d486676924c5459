"""Wall time of the generated npugraph_ex-on-CPU tiers per op, next to the aot_eager tier, in the same run.

Every example spec is generated (library style); in one process each op's three generated tests run as
functions: `test_<op>_compiled_matches_eager` (aot_eager, the baseline: every example once),
`test_<op>_npugraph_ex_compiles_on_cpu` (npugraph_ex's backend and passes, capture replaced by an eager
run: the first example three times, new values, mutated buffers reused) and
`test_<op>_npugraph_ex_capture_replay_on_cpu` (the same backend with its own AclGraph capturing on the
emulated NPU graph: three calls, a frozen-value probe, and for a mutating op a fourth call on new buffers
that recaptures). All compile from scratch (`torch.compiler.reset()`); rounds are interleaved and the median
is reported. npugraph_ex's one-time import (once per pytest process) is reported apart; an op whose tier
skips, xfails or fails says so. Needs `opgen npugraph-ex fetch`.

    python benchmarks/bench_npugraph_ex.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
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
    """Seconds, and 'passed' or the pytest outcome (skip/xfail/failure) it ended with (what it prints is dropped)."""
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
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
                    cases.append((stem, getattr(module, f"test_{stem}_compiled_matches_eager"), getattr(module, name),
                                  getattr(module, f"test_{stem}_npugraph_ex_capture_replay_on_cpu")))

        lib = loader()
        start = time.perf_counter()
        with lib.Session():
            pass
        print(f"npugraph_ex_import: {time.perf_counter() - start:.2f} s once per process (first Session)")

        times: dict[str, tuple[list, list, list]] = {stem: ([], [], []) for stem, *_ in cases}
        outcomes: dict[str, tuple[str, str]] = {}
        for _ in range(args.rounds):
            for stem, aot_eager, npugraph_ex, capture in cases:
                base, _ = timed(aot_eager)
                ours, compiled_outcome = timed(npugraph_ex)
                captured, capture_outcome = timed(capture)
                outcomes[stem] = (compiled_outcome, capture_outcome)
                for column, seconds in zip(times[stem], (base, ours, captured), strict=True):
                    column.append(seconds)
        totals = {"compile": [0.0, 0.0], "capture": [0.0, 0.0]}  # passing ops: [tier, baseline]
        for stem, columns in times.items():
            base, ours, captured = (statistics.median(column) for column in columns)
            notes = [f", ended: {outcome}" if outcome != "passed" else "" for outcome in outcomes[stem]]
            for key, seconds, outcome in (("compile", ours, outcomes[stem][0]), ("capture", captured,
                                                                                 outcomes[stem][1])):
                if outcome == "passed":
                    totals[key][0] += seconds
                    totals[key][1] += base
            print(f"npugraph_ex_on_cpu {stem}: compile-only {ours * 1e3:.0f} ms{notes[0]}, capture & replay "
                  f"{captured * 1e3:.0f} ms{notes[1]} (baseline aot_eager tier: {base * 1e3:.0f} ms; ratios "
                  f"{ours / base:.2f}x, {captured / base:.2f}x)")
        for key, label in (("compile", "compile-only"), ("capture", "capture & replay")):
            tier, base = totals[key]
            print(f"npugraph_ex_on_cpu {label}, passing ops: {tier:.2f} s (baseline aot_eager tier: {base:.2f} s, "
                  f"ratio {tier / max(base, 1e-9):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
