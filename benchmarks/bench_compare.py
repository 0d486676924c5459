"""opgen.testing's value comparison (`mismatch`, which every kernel-against-reference check calls) on a pair of
identical tensors, against its full comparison (two float64 copies and `isclose`) on the same pair in the same run: a
kernel often computes exactly what its reference does, and the oracle tier compares thousands of such pairs. Also the
cost of a differing pair, which takes the full comparison after the identity check (at most one more pass
over the values: target within 15% of the full comparison, over the three dtypes; a single dtype's figure is noise).

    python benchmarks/bench_compare.py [--repeats 20] [--numel 1048576]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from opgen.testing import values

TARGET_IDENTICAL_RATIO = 5.0  # the identical pair at least this much faster than the full comparison
TARGET_DIFFERING_RATIO = 0.85  # differing pairs, over the three dtypes, no more than about 15% slower


def _seconds(actual: torch.Tensor, expected: torch.Tensor, repeats: int) -> float:
    """Median seconds of one `mismatch(actual, expected)`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        values.mismatch(actual, expected)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--numel", type=int, default=1 << 20)
    args = parser.parse_args()
    identical_fast = identical_full = differing_fast = differing_full = 0.0
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        a = torch.randn(args.numel).to(dtype)
        same, close = a.clone(), a + torch.finfo(dtype).eps * a.abs()
        fast, differing = _seconds(a, same, args.repeats), _seconds(a, close, args.repeats)
        real = values._identical
        values._identical = lambda *_: False  # the baseline: the full comparison alone
        try:
            full, full_differing = _seconds(a, same, args.repeats), _seconds(a, close, args.repeats)
        finally:
            values._identical = real
        identical_fast, identical_full = identical_fast + fast, identical_full + full
        differing_fast, differing_full = differing_fast + differing, differing_full + full_differing
        name = str(dtype).removeprefix("torch.")
        print(f"mismatch {name} identical: {fast * 1e3:.2f} ms (baseline: full comparison {full * 1e3:.2f} ms, "
              f"ratio {full / fast:.1f}x, target >= {TARGET_IDENTICAL_RATIO:g}x)")
        print(f"mismatch {name} differing: {differing * 1e3:.2f} ms (baseline: full comparison {full_differing * 1e3:.2f} "
              f"ms, ratio {full_differing / differing:.2f}x)")
    print(f"mismatch, three dtypes: identical {identical_full / identical_fast:.1f}x (target >= "
          f"{TARGET_IDENTICAL_RATIO:g}x), differing {differing_full / differing_fast:.2f}x (target >= "
          f"{TARGET_DIFFERING_RATIO:g}x)")
    return 0 if (identical_full / identical_fast >= TARGET_IDENTICAL_RATIO
                 and differing_full / differing_fast >= TARGET_DIFFERING_RATIO) else 1


if __name__ == "__main__":
    raise SystemExit(main())
