"""Check and print semantics rules (shape + dtype, to Python and C++) vs `ast.parse` of the same text.

`ast.parse` is the floor: every rule is parsed by it before opgen checks the types and prints both
languages. Target: a rule (check + Python + C++) in under 1 ms, so semantics never weigh on the
`opgen new` budget of 1 s per example; the ratio to `ast.parse` shows what checking costs on top.

    python benchmarks/bench_semantics.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import ast
import statistics
import time

from opgen.schema import parse_schema
from opgen.spec.semantics import parse_dtype, parse_shape

TARGET_PER_RULE_US = 1000.0
SCHEMA = parse_schema(
    "bench::op(Tensor x, Tensor gamma, Tensor a, Tensor b, Tensor[] xs, Tensor? bias, int n, bool flag, "
    "int[] size, ScalarType? dtype=None) -> Tensor"
)
SHAPES = [
    "x.shape",
    "x.shape[:x.dim() - gamma.dim()] + [1] * gamma.dim()",
    "broadcast(a.shape, b.shape)",
    "[len(xs)] + xs[0].shape",
    "[dynamic(max=x.shape[0]), x.shape[1]]",
    "bias.shape if bias is not None else [x.shape[0], n]",
    "[x.size(0), x.shape[-1] // 2, max(n, 1)] + size[1:]",
    "x.shape[:-1] + [n] if flag else x.shape",
]
DTYPES = ["x.dtype", "x", "float32", "promote(x, gamma)", "dtype or x.dtype"]


def _full() -> None:
    for text in SHAPES:
        rule = parse_shape(text, SCHEMA)
        rule.python()
        if not rule.is_dynamic:
            rule.cpp()
    for text in DTYPES:
        rule = parse_dtype(text, SCHEMA)
        rule.python()
        rule.cpp()


def _floor() -> None:
    for text in SHAPES + DTYPES:
        ast.parse(text, mode="eval")


def _per_rule_us(function, loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        function()
    return (time.perf_counter() - start) / loops / (len(SHAPES) + len(DTYPES)) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loops", type=int, default=200)
    args = parser.parse_args(argv)
    _full()  # warm up
    full, floor = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine state
        full.append(_per_rule_us(_full, args.loops))
        floor.append(_per_rule_us(_floor, args.loops))
    opgen_us, ast_us = statistics.median(full), statistics.median(floor)
    verdict = "ok" if opgen_us < TARGET_PER_RULE_US else "MISSED"
    print(f"semantics check+print per rule: {opgen_us:.1f} us (baseline ast.parse: {ast_us:.1f} us, "
          f"ratio {opgen_us / ast_us:.1f}x, target < {TARGET_PER_RULE_US:.0f} us: {verdict})")


if __name__ == "__main__":
    main()
