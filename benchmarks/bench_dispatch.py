"""Eager call overhead of an opgen-generated op vs hand-written registrations, in the same run.

Registrations of the same kernel (`torch.add(x, y)` on two 8-element CPU tensors):
  - opgen library style: the generated `Library(ns, "FRAGMENT")` + `define` + `impl("CPU")` + `register_fake`;
  - the same with `autograd:` in the spec (+ `register_autograd`): what the opt-in costs per call without grad;
  - hand-written vLLM pattern (`direct_register_custom_op`): the same four calls typed by hand (baseline);
  - opgen custom_op style: `@torch.library.custom_op(..., device_types="cpu")` + `register_fake`.
Each is called through its cached `OpOverload` (`torch.ops.ns.add.default`). torch.set_num_threads(1);
torch.utils.benchmark blocked_autorange, rounds interleaved, median of the round medians.
Target: the generated library-style op within 10% of the hand-written one.

    python benchmarks/bench_dispatch.py [--rounds 5] [--min-run-time 0.5]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = """
namespace: {namespace}
style: {style}
device: cpu
ops:
  - schema: "add(Tensor x, Tensor y) -> Tensor"
    outputs:
      out0: {{shape: "broadcast(x.shape, y.shape)", dtype: "promote(x, y)"}}
    reference: |
      return torch.add(x, y)
{autograd}"""
AUTOGRAD = """    autograd:
      backward: |
        return grad_output, grad_output
"""


def generate(tmp: Path, namespace: str, style: str, autograd: bool = False) -> None:
    spec = tmp / f"{namespace}.yaml"
    spec.write_text(textwrap.dedent(SPEC.format(namespace=namespace, style=style, autograd=AUTOGRAD if autograd else "")))
    subprocess.run([sys.executable, "-m", "opgen", "new", str(spec), "-o", str(tmp / namespace)], check=True,
                   cwd=ROOT, capture_output=True)
    sys.path.insert(0, str(tmp / namespace))
    importlib.import_module(namespace)


def hand_written():
    """vLLM's direct_register_custom_op, spelled out."""
    import torch

    lib = torch.library.Library("bench_hand", "FRAGMENT")
    lib.define("add(Tensor x, Tensor y) -> Tensor")

    def add(x, y):
        return torch.add(x, y)

    def add_fake(x, y):
        return torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=torch.promote_types(x.dtype, y.dtype),
                           device=x.device)

    lib.impl("add", add, "CPU")
    torch.library.register_fake("bench_hand::add", add_fake, lib=lib)
    return lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.5)
    args = parser.parse_args()

    import torch
    from torch.utils import benchmark

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), "bench_lib", "library")
        generate(Path(tmp), "bench_co", "custom_op")
        generate(Path(tmp), "bench_lib_ag", "library", autograd=True)
        keep = hand_written()  # noqa: F841  (the ops live as long as the Library object)
        x, y = torch.randn(8), torch.randn(8)
        cases = {
            "hand-written Library (vLLM pattern)": torch.ops.bench_hand.add.default,
            "opgen library style": torch.ops.bench_lib.add.default,
            "opgen library style + autograd formula": torch.ops.bench_lib_ag.add.default,
            "opgen custom_op style": torch.ops.bench_co.add.default,
            "torch.ops.aten.add.Tensor": torch.ops.aten.add.Tensor,
        }
        for op in cases.values():
            torch.testing.assert_close(op(x, y), x + y)
        medians: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, op in cases.items():
                timer = benchmark.Timer("op(x, y)", globals={"op": op, "x": x, "y": y}, num_threads=1)
                medians[name].append(timer.blocked_autorange(min_run_time=args.min_run_time).median * 1e6)
    base = statistics.median(medians["hand-written Library (vLLM pattern)"])
    for name, values in medians.items():
        value = statistics.median(values)
        target = ", target <= 1.10x" if name == "opgen library style" else ""
        print(f"{name}: {value:.2f} us/call (baseline hand-written: {base:.2f} us, ratio {value / base:.2f}x{target})")


if __name__ == "__main__":
    main()
