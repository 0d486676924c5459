"""Wall time of the generated npugraph_ex-on-CPU tiers per op, next to the aot_eager tier, in the same run.

Every example spec is generated (library style); in one process each op's three generated tests run as
functions: `test_<op>_compiled_matches_eager` (aot_eager, the baseline: every example once),
`test_<op>_npugraph_ex_compiles_on_cpu` (npugraph_ex's backend and passes, capture replaced by an eager
run: the first example three times, new values, mutated buffers reused) and
`test_<op>_npugraph_ex_capture_replay_on_cpu` (the same backend with its own AclGraph capturing on the
emulated NPU graph: three calls, a frozen-value probe, and for a mutating op a fourth call on new buffers
that recaptures). All compile from scratch (`torch.compiler.reset()`); rounds are interleaved and the median
is reported. npugraph_ex's one-time import (once per pytest process) is reported apart; an op whose tier
skips, xfails or fails says so. Then npugraph_ex's production features (tests/npugraph_ex_features.py):
`test_<op>_npugraph_ex_capture_limit` per op, and the compile cache of every op: its module compiled and saved
(per op) and the one fresh process that loads them all (its start, imports included, and each load). Needs
`opgen npugraph-ex fetch`.

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
    sys.path[:0] = [str(project)]  # the package
    spec = importlib.util.spec_from_file_location(name, next((project / "tests").glob("test_*.py")))
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
        cases, modules = [], []
        for spec in sorted((ROOT / "examples").glob("*.yaml")):
            project = Path(tmp) / spec.stem
            subprocess.run([sys.executable, "-m", "opgen", "new", str(spec), "-o", str(project), "--style", "library"],
                           check=True, cwd=ROOT, capture_output=True)
            module = load_tests(project, f"bench_tests_{spec.stem}")
            modules.append(module)
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
        features(modules, args.rounds, {stem: statistics.median(columns[0]) for stem, columns in times.items()})
    return 0


def features(modules: list, rounds: int, baselines: dict[str, float]) -> None:
    """The capture-limit tier per op, and the compile cache: compiled and saved per op, loaded by one process."""
    from opgen.testing import capture as checks  # npugraph_ex_cpu(): the loader, or a skip
    from opgen.testing import npugraph_ex_features as features_module
    limits: dict[str, list] = {}
    limit_outcomes: dict[str, str] = {}
    compiled: dict[str, list] = {}
    fresh, loads = [], []
    for _ in range(rounds):
        for module in modules:
            for name in (n for n in dir(module) if n.endswith("_npugraph_ex_capture_limit")):
                stem = name.removeprefix("test_").removesuffix("_npugraph_ex_capture_limit")
                seconds, limit_outcomes[stem] = timed(getattr(module, name))
                limits.setdefault(stem, []).append(seconds)
        loader = checks.npugraph_ex_cpu(capture=True)
        caches = []
        for module in modules:
            cache = features_module.CompileCache(module.COMPILE_CACHE.package, batch=False)
            cache.ops = dict(module.COMPILE_CACHE.ops)
            if cache.ops:
                start = time.perf_counter()
                loading = cache.compile_all(loader)
                compiled.setdefault(cache.package, []).append(time.perf_counter() - start)
                caches.append((cache, loading))
        start = time.perf_counter()
        process = features_module.FreshProcess([str(Path(sys.modules[c.package].__file__).resolve().parents[1])
                                                for c, _ in caches])
        for cache, loading in caches:
            loaded = [process.load(cache.package, cache.cache_dir, str(Path(cache.root) / f"op{index}"),
                                   cache.cache_module) for index in range(len(loading))]
            cache.judge(loading, loaded)
        process.close()
        fresh.append(time.perf_counter() - start)
        loads.append(sum(len(loading) for _, loading in caches))
        failed = [q for cache, _ in caches for q, r in cache.results.items() if isinstance(r, BaseException)]
    for stem, column in sorted(limits.items()):
        note = f", ended: {limit_outcomes[stem]}" if limit_outcomes[stem] != "passed" else ""
        base = baselines.get(stem)
        ratio = f" ({statistics.median(column) / base:.2f}x the aot_eager tier)" if base else ""
        print(f"npugraph_ex_features capture_limit {stem}: {statistics.median(column) * 1e3:.0f} ms{note}{ratio}")
    for package, column in sorted(compiled.items()):
        print(f"npugraph_ex_features compile_cache {package}: {statistics.median(column) * 1e3:.0f} ms to compile "
              "and save its ops")
    print(f"npugraph_ex_features compile_cache fresh process: {statistics.median(fresh):.2f} s for {loads[-1]} "
          f"loads (its start, imports included, once per pytest run); failing: {failed or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
