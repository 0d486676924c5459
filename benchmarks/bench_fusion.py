"""What fusions cost: registering one, compiling a model written with its composite next to the same model compiled
without it, in the same run; and, on a real Hugging Face model, what the fused ops cost per forward under Inductor
on CPU.

examples/add_rms_norm.yaml is generated (library style); its patterns.py is the fusion. The model is a block a user
would write: a Linear, then the composite (residual add + RMS norm, the Llama form of `fusion.pattern`), bfloat16,
[8, 256]. Per round, from scratch (`torch.compiler.reset()`), the first call (compile + run) is timed:
- npugraph_ex's backend on CPU with pattern fusion on and the fusion registered, against the same backend with
  pattern fusion off (the baseline);
- Inductor's pattern pass under aot_eager (the pass the generated tests run) against aot_eager without it.
Registration is `register_fusions()` into a fresh registry (a new npugraph_ex session; a new Inductor pass), its
patterns traced anew (each form in every dtype of the examples and every operand order of its sums and products;
a later call reuses them), next to the baseline compile. Rounds are interleaved; medians are printed. Needs `opgen npugraph-ex fetch` for the
npugraph_ex figures (else they are skipped, saying why).

With transformers installed (`--model`, default Llama, Qwen3 and Gemma: 2 layers, hidden size 64, batch 2 x 8
tokens), per model, dtype (bfloat16, float32), target (npugraph_ex's backend on CPU, plain torch.compile with
Inductor) and registration (`register_fusions()`'s default, and the targets named: every device): the model compiled
without and with add_rms_norm, rms_norm, gemma_rms_norm, swiglu, rotary and rotary_pairs registered (Ernie 4.5 and
GLM for rotary_pairs' rotary_every_two: `--model Ernie4_5ForCausalLM,GlmForCausalLM`), their forward calls
interleaved, and fused/unfused of the median forward in the same run, with the fused ops the code calls and whether
the fused model compiled to the same code (Inductor) or graph (npugraph_ex) as the unfused one. By default nothing is
fused on CPU (the op's kernel there is its Python reference, slower than Inductor's code for the composite): the code
is the same and the ratio 1.0x within noise; the named targets show what a fusion on CPU would cost. The unfused
model is compiled after the fused one (run_and_get_code resets Dynamo) by a backend of its own, with no post-grad pass:
Dynamo's cache entries for a model's forward are not guarded on which module, so with one backend both models would
run the graph compiled last (the source of earlier rows 30-100x slower unfused).

    python benchmarks/bench_fusion.py [--rounds 5] [--model LlamaForCausalLM,...] [--calls 200] [--threads 1]
                                      [--models-only]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fresh_traces(patterns) -> None:
    """The fusions' traced patterns forgotten: the next registration traces them as the first one in a process does."""
    for fusion in patterns.FUSIONS:
        fusion.__dict__.pop("_traced", None)


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
    parser.add_argument("--models-only", action="store_true", help="only the per-forward figures of the models")
    parser.add_argument("--model", default="LlamaForCausalLM,Qwen3ForCausalLM,GemmaForCausalLM",
                        help="transformers architectures, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="timed forwards per model and dtype")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads for the model figures (1: "
                        "a machine shared with other jobs times OpenMP's waits between Inductor's kernels and aten's)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="opgen-bench-fusion-") as tmp:
        project = Path(tmp) / "add_rms_norm"
        subprocess.run([sys.executable, "-m", "opgen", "new", str(ROOT / "examples" / "add_rms_norm.yaml"), "-o",
                        str(project), "--style", "library"], check=True, cwd=ROOT, capture_output=True)
        sys.path[:0] = [str(project)]
        import torch
        from torch._dynamo.backends.common import aot_autograd
        from torch._inductor.decomposition import select_decomp_table
        from torch._inductor.fx_passes.post_grad import remove_noop_ops

        patterns = importlib.import_module("fused.patterns")
        loader = importlib.import_module("opgen.testing.npugraph_ex_cpu")
        model = block(torch, patterns.add_rms_norm_llama_composite)
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
        for _ in range(0 if args.models_only else args.rounds):
            patterns.FUSION_PASS = patterns.FusionPass()  # a fresh Inductor registry each round
            fresh_traces(patterns)
            figures.setdefault("inductor_registration", []).append(
                timed(lambda: patterns.register_fusions(install=False, targets=("inductor",))))
            figures.setdefault("aot_eager_compile", []).append(first_call(with_pass(None)))
            figures.setdefault("inductor_pass_compile", []).append(first_call(with_pass(patterns.FUSION_PASS)))
            if reason is not None:
                continue
            with loader.Session() as session:  # a fresh npugraph_ex registry (restored when the session ends)
                figures.setdefault("npugraph_ex_unfused_compile", []).append(first_call(session.backend()))
                fresh_traces(patterns)
                figures.setdefault("npugraph_ex_registration", []).append(
                    timed(lambda: patterns.register_fusions(install=False, targets=("npugraph_ex",))))
                figures.setdefault("npugraph_ex_fused_compile", []).append(first_call(session.backend(fusion=True)))
                assert patterns.ADD_RMS_NORM_LLAMA.overload in [n.target for n in session.graphs[-1].graph.nodes]
        median = {name: statistics.median(values) for name, values in figures.items()}
        if args.models_only:
            hugging_face_cost(torch, Path(tmp), args)
            return 0

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
        hugging_face_cost(torch, Path(tmp), args)
    return 0


# example -> its fused ops (add_rms_norm first: its pattern holds rms_norm's)
FUSED_EXAMPLES = {"add_rms_norm": ("add_rms_norm",), "rms_norm": ("rms_norm",), "gemma_rms_norm": ("gemma_rms_norm",),
                  "swiglu": ("swiglu",), "rotary": ("rotary",),
                  "rotary_pairs": ("rotary_halves", "rotary_interleaved", "rotary_every_two")}
# How each target is registered: the default (what a user gets from `register_fusions()`: nothing on CPU, where the
# ops' kernels are their Python references), and on every device (asked for by naming the targets): for comparison.
REGISTRATIONS = (("npugraph_ex", "default", None), ("npugraph_ex", "asked", ("npugraph_ex",)),
                 ("inductor", "default", None), ("inductor", "asked", ("inductor",)))


def interleaved_times(compiled: dict, inputs: dict, calls: int) -> dict:
    """The median time of one forward of each compiled model, their calls interleaved (after a warm-up): a busy
    machine slows both alike."""
    for _ in range(10):
        for model in compiled.values():
            model(**inputs)
    times: dict = {name: [] for name in compiled}
    for call in range(calls):  # in turn first and second: neither always runs on the other's warm caches
        for name, model in list(compiled.items())[::1 if call % 2 else -1]:
            times[name].append(timed(lambda model=model: model(**inputs)))
    return {name: statistics.median(values) for name, values in times.items()}


def fused_ops(torch, graphs_or_code, packages) -> dict[str, int]:
    """How many times the code (or graphs) calls each fused op."""
    text = "\n".join(str(g) for g in graphs_or_code)
    found = {}
    for patterns in packages:
        namespace = patterns.__name__.split(".")[0]
        for name in (op for ops in FUSED_EXAMPLES.values() for op in ops):
            count = text.count(f"{namespace}.{name}.default")
            if count:
                found[f"{namespace}::{name}"] = count
    return found


def hugging_face_cost(torch, root: Path, args) -> None:
    """Per-forward time of tiny Hugging Face models on CPU, fused / unfused per target and registration (the ratio in
    the same run): npugraph_ex's backend (its compiler on CPU, the graph run eagerly) and plain torch.compile
    (Inductor), with the shipped fusions registered as `register_fusions()` does by default, and Inductor asked for on
    every device. What is registered by default must never be slower (ratio <= 1.0x)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("fusion_cpu_forward: skipped (transformers is not installed: pip install transformers)")
        return
    checks = importlib.import_module("opgen.testing.models")
    loader = importlib.import_module("opgen.testing.npugraph_ex_cpu")
    from torch._dynamo.utils import counters
    from torch._inductor.utils import run_and_get_code

    torch.set_num_threads(args.threads)
    packages = []
    for example in FUSED_EXAMPLES:
        project = root / f"hf_{example}"
        subprocess.run([sys.executable, "-m", "opgen", "new", str(ROOT / "examples" / f"{example}.yaml"), "-o",
                        str(project)], check=True, cwd=ROOT, capture_output=True)
        sys.path.insert(0, str(project))
        text = (ROOT / "examples" / f"{example}.yaml").read_text(encoding="utf-8")
        packages.append(importlib.import_module(text.split("namespace: ")[1].split()[0] + ".patterns"))
    reason = loader.unavailable()
    for architecture in args.model.split(","):
        for dtype in (torch.bfloat16, torch.float32):
            network, inputs = checks.tiny_model(architecture, {}, dtype)
            name = str(dtype).removeprefix("torch.")
            for target, how, targets in REGISTRATIONS:
                if target == "npugraph_ex" and reason is not None:
                    print(f"fusion_cpu_forward_{target}: skipped ({reason})")
                    continue
                for patterns in packages:  # a fresh process's registry
                    patterns.FUSION_PASS = patterns.FusionPass()
                    patterns._DEVICES.clear()
                torch.compiler.reset()
                twin = copy.deepcopy(network)  # compiled with the fusions
                with contextlib.ExitStack() as stack:
                    stack.enter_context(torch.no_grad())
                    # no FX graph cache: a hit would load the code, not generate it, and leave nothing to compare
                    stack.enter_context(torch._inductor.config.patch(post_grad_custom_post_pass=None,
                                                                     fx_graph_cache=False))
                    session = stack.enter_context(loader.Session()) if target == "npugraph_ex" else None
                    if session is not None:
                        for patterns in packages:
                            patterns.register_fusions(targets=targets)
                        unfused = torch.compile(network, backend=session.backend(), dynamic=False)
                        unfused(**inputs)
                        fused = torch.compile(twin, backend=session.backend(fusion=True), dynamic=False)
                        graphs = counters["stats"]["unique_graphs"]
                        fused(**inputs)
                        assert counters["stats"]["unique_graphs"] == graphs + 1, "the fused model reused the baseline"
                        code = [session.graphs[-1].graph]
                        unfused_graph, fused_graph = (str(g.graph) for g in session.graphs[-2:])
                        same = "the same graph as unfused" if fused_graph == unfused_graph else "graph differs"
                    else:
                        # the fused model first: run_and_get_code resets Dynamo, which would drop a model compiled
                        # before it; the unfused one is compiled after it by a backend of its own (Dynamo guards on
                        # the backend, not on which module: with the same backend the twin's fused graph would run for
                        # both), with no post-grad pass at all
                        for patterns in packages:
                            patterns.register_fusions(targets=targets)
                        fused = torch.compile(twin, dynamic=False)
                        code = run_and_get_code(fused, **inputs)[1]
                        unfused = torch.compile(network, dynamic=False, options={"post_grad_custom_post_pass": None})
                        graphs = counters["stats"]["unique_graphs"]
                        unfused_code = code_of_first_call(unfused, inputs)
                        assert counters["stats"]["unique_graphs"] == graphs + 1, "the baseline reused the fused graph"
                        same = "the same code as unfused" if same_code(code, unfused_code) else "code differs"
                    ops = fused_ops(torch, code, packages)
                    median = interleaved_times({False: unfused, True: fused}, inputs, args.calls)
                unfused_time, fused_time = median[False], median[True]
                print(f"fusion_cpu_forward_{architecture}_{name}_{target}_{how}: {fused_time * 1e3:.2f} ms fused, "
                      f"{unfused_time * 1e3:.2f} ms unfused, ratio {fused_time / unfused_time:.2f}x; fused ops: "
                      + (", ".join(f"{op} x{n}" for op, n in ops.items()) or "none") + f"; {same}", flush=True)


def code_of_first_call(model, inputs: dict) -> list[str]:
    """The code Inductor generates at the model's first call, without run_and_get_code's Dynamo reset (which would
    drop the models compiled before)."""
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        model(**inputs)
    return codes


def same_code(fused: list[str], unfused: list[str]) -> bool:
    """Whether both compiled to the same code (its AOT ids and the paths of its compiled kernels aside)."""
    def plain(codes):
        return [re.sub(r"AOT ID: \[.*?\]|/\S+\.(?:py|so|cpp)", "", code) for code in codes]
    return bool(fused) and plain(fused) == plain(unfused)


if __name__ == "__main__":
    sys.exit(main())
