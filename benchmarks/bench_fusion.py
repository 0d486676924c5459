"""What one fusion costs: registering it, and compiling a model written with its composite, next to the same model
compiled without it, in the same run.

examples/add_rms_norm.yaml is generated (library style); its patterns.py is the fusion. The model is a block a user
would write: a Linear, then the composite (residual add + RMS norm, the Llama form of `fusion.pattern`), bfloat16,
[8, 256]. Per round, from scratch (`torch.compiler.reset()`), the first call (compile + run) is timed:
- npugraph_ex's backend on CPU with pattern fusion on and the fusion registered, against the same backend with
  pattern fusion off (the baseline);
- Inductor's pattern pass under aot_eager (the pass the generated tests run) against aot_eager without it.
Registration is `register_fusions()` into a fresh registry (a new npugraph_ex session; a new Inductor pass), next to
the baseline compile. Rounds are interleaved; medians are printed. Needs `opgen npugraph-ex fetch` for the
npugraph_ex figures (else they are skipped, saying why).

    python benchmarks/bench_fusion.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def block(torch, composite):
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(256, 256, dtype=torch.bfloat16)
            self.gamma = torch.nn.Parameter(torch.ones(256, dtype=torch.bfloat16))

        def forward(self, hidden, residual):
            y, _, x = composite(self.proj(hidden), residual, self.gamma, epsilon=1e-06)
            return y, x
    return Block().eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="opgen-bench-fusion-") as tmp:
        project = Path(tmp) / "add_rms_norm"
        subprocess.run([sys.executable, "-m", "opgen", "new", str(ROOT / "examples" / "add_rms_norm.yaml"), "-o",
                        str(project), "--style", "library"], check=True, cwd=ROOT, capture_output=True)
        sys.path[:0] = [str(project), str(project / "tests")]
        import torch
        from torch._dynamo.backends.common import aot_autograd
        from torch._inductor.decomposition import select_decomp_table
        from torch._inductor.fx_passes.post_grad import remove_noop_ops

        patterns = importlib.import_module("fused.patterns")
        loader = importlib.import_module("npugraph_ex_cpu")
        model = block(torch, patterns.add_rms_norm_composite)
        g = torch.Generator().manual_seed(0)
        inputs = [torch.randn(8, 256, generator=g).bfloat16(), torch.randn(8, 256, generator=g).bfloat16()]

        def first_call(backend) -> float:
            torch.compiler.reset()
            compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
            with torch.no_grad():
                return timed(lambda: compiled(*inputs))

        def with_pass(fusion_pass):
            def compiler(gm, _example_inputs):
                remove_noop_ops(gm.graph)
                if fusion_pass is not None:
                    fusion_pass(gm.graph)
                    gm.recompile()
                return gm
            return aot_autograd(fw_compiler=compiler, decompositions=select_decomp_table(),
                                keep_inference_input_mutations=True)

        figures: dict[str, list[float]] = {}
        first_call(with_pass(None))  # warm torch's own lazy imports before anything is timed
        reason = loader.unavailable()
        if reason is None:
            with loader.Session():
                pass  # npugraph_ex's one-time import, not a cost of the fusion
        for _ in range(args.rounds):
            patterns.FUSION_PASS = patterns.FusionPass()  # a fresh Inductor registry each round
            figures.setdefault("inductor_registration", []).append(
                timed(lambda: patterns.register_fusions(install=False)))
            figures.setdefault("aot_eager_compile", []).append(first_call(with_pass(None)))
            figures.setdefault("inductor_pass_compile", []).append(first_call(with_pass(patterns.FUSION_PASS)))
            if reason is not None:
                continue
            with loader.Session() as session:  # a fresh npugraph_ex registry (restored when the session ends)
                figures.setdefault("npugraph_ex_unfused_compile", []).append(first_call(session.backend()))
                figures.setdefault("npugraph_ex_registration", []).append(
                    timed(lambda: patterns.register_fusions(install=False)))
                figures.setdefault("npugraph_ex_fused_compile", []).append(first_call(session.backend(fusion=True)))
                assert patterns.ADD_RMS_NORM.overload in [n.target for n in session.graphs[-1].graph.nodes]
        median = {name: statistics.median(values) for name, values in figures.items()}

        def line(value: str, baseline: str, what: str) -> None:
            ratio = median[value] / median[baseline]
            print(f"fusion_{value}: {median[value] * 1e3:.0f} ms (baseline {what}: {median[baseline] * 1e3:.0f} ms, "
                  f"ratio {ratio:.2f}x)")
        unfused = "the same model, npugraph_ex with pattern fusion off, first call"
        if reason is None:
            line("npugraph_ex_fused_compile", "npugraph_ex_unfused_compile", unfused)
            line("npugraph_ex_registration", "npugraph_ex_unfused_compile", unfused)
        else:
            print(f"fusion_npugraph_ex: skipped ({reason})")
        line("inductor_pass_compile", "aot_eager_compile", "the same model, aot_eager without the pass, first call")
        line("inductor_registration", "aot_eager_compile", "the same model, aot_eager without the pass, first call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
