"""Parse every schema of the installed torch's native_functions.yaml with opgen, torchgen and torch._C.

All three parse the same ~2,600 schemas in the same run, interleaved, several repeats; the median
time per schema is reported with the ratios. Target (issue 2): opgen at least 3x faster than
`torchgen.model.FunctionSchema.parse`. Also reports the cold wall time of `opgen explain`.

    python benchmarks/bench_schema_parse.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

TARGET_VS_TORCHGEN = 3.0
TARGET_EXPLAIN_COLD_S = 0.3


def native_schemas() -> list[str]:
    import torchgen
    import yaml

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    with open(path, encoding="utf-8") as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return [e["func"] for e in entries if isinstance(e, dict) and "func" in e]


def _per_schema_us(parse, schemas: list[str]) -> float:
    start = time.perf_counter()
    for text in schemas:
        parse(text)
    return (time.perf_counter() - start) / len(schemas) * 1e6


def _cold_wall(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    import torch
    from torchgen.model import FunctionSchema

    from opgen.schema import parse_schema

    schemas = native_schemas()
    parsers = {"opgen": parse_schema, "torchgen": FunctionSchema.parse, "torch._C": torch._C.parse_schema,
               "opgen+print": lambda text: str(parse_schema(text))}
    for parse in parsers.values():  # warm up caches and lazy imports
        _per_schema_us(parse, schemas)
    samples: dict[str, list[float]] = {name: [] for name in parsers}
    for _ in range(args.repeats):
        for name, parse in parsers.items():
            samples[name].append(_per_schema_us(parse, schemas))
    median = {name: statistics.median(values) for name, values in samples.items()}
    printed = median["opgen+print"]

    print(f"{len(schemas)} schemas from native_functions.yaml, median of {args.repeats} runs, torch {torch.__version__}")
    ratio = median["torchgen"] / median["opgen"]
    print(f"opgen parse: {median['opgen']:.1f} us/schema (baseline: torchgen {median['torchgen']:.1f} us/schema, "
          f"ratio {ratio:.2f}x, target >= {TARGET_VS_TORCHGEN:g}x) {'ok' if ratio >= TARGET_VS_TORCHGEN else 'MISSED'}")
    print(f"opgen parse: {median['opgen']:.1f} us/schema (baseline: torch._C {median['torch._C']:.1f} us/schema, "
          f"ratio {median['torch._C'] / median['opgen']:.2f}x, no target: C++)")
    print(f"opgen parse + canonical print: {printed:.1f} us/schema "
          f"(baseline: torchgen parse {median['torchgen']:.1f} us/schema, ratio {median['torchgen'] / printed:.2f}x)")

    runs = 5
    explain = _cold_wall([sys.executable, "-m", "opgen", "explain", "f(Tensor x) -> Tensor"], runs)
    bare = _cold_wall([sys.executable, "-c", "pass"], runs)
    verdict = "ok" if explain <= TARGET_EXPLAIN_COLD_S else "MISSED"
    print(f"opgen explain cold: {explain:.3f} s (baseline: python -c pass {bare:.3f} s, ratio {explain / bare:.1f}x, "
          f"target <= {TARGET_EXPLAIN_COLD_S} s) {verdict}")


if __name__ == "__main__":
    main()
