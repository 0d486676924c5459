"""Trial of the shipped fusion examples on Hugging Face models, as a new user would run them: every example with
`fusion:` generated (examples/rms_norm.yaml, gemma_rms_norm.yaml, add_rms_norm.yaml, swiglu.yaml, rotary.yaml,
rotary_pairs.yaml, static_cache_update.yaml: the last with a transformers StaticCache passed in), registered
(`register_fusions(targets=...)`, every device), then tiny-config models (2 layers, random weights, 1-D weights moved off their init) of many
families in bfloat16 and float32, compiled under npugraph_ex on CPU (its backend, pattern fusion on) and under
Inductor's pattern pass (aot_eager, as the generated tests run it). Per model, dtype, route and op: the op nodes in
the graph after the pattern pass against the occurrences of its composite, counted from what each family's modeling
code writes (the table FAMILIES below, read from transformers' source: an independent count, not the matcher's),
and the logits against eager's. A family whose form differs must get 0.

    python benchmarks/fusion_models.py [--models LlamaForCausalLM,...] [--dtypes bfloat16,float32]
                                       [--routes npugraph_ex,inductor]

Needs transformers (pip install transformers) and, for npugraph_ex, `opgen npugraph-ex fetch`. Prints one line per
case and a summary; exits 1 when a case differs from the table or from eager.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"rms_norm": ("myops", ("rms_norm",)), "gemma_rms_norm": ("gemma_ops", ("gemma_rms_norm",)),
            "add_rms_norm": ("fused", ("add_rms_norm",)), "swiglu": ("mlp_ops", ("swiglu",)),
            "rotary": ("rope_ops", ("rotary",)), "rotary_pairs": ("rope_pairs", ("rotary_halves", "rotary_interleaved", "rotary_every_two")),
            "static_cache_update": ("static_cache_ops", ("static_cache_update",))}
STATIC_CACHE = "static_cache_update"  # run with a transformers StaticCache passed in (past_key_values)
LAYERS = 2

# What each family's modeling code writes (transformers 5.x), per shipped op: how many times a forward computes
# that op's composite, L the number of layers. The RMS norms: `llama` (LlamaRMSNorm: weight * h.to(dtype)),
# `olmo2` ((weight * h).to(dtype)), `helium` ((weight.to(float32) * h).to(dtype), a form of rms_norm and of
# add_rms_norm: in float32 its casts vanish and it is Llama's), `gemma` (h * (1 + weight)). add_rms_norm (residual + h,
# then a Llama, OLMo 2 or Helium-form norm): 2L in a pre-norm decoder; in a post-norm one (OLMo 2) only the final norm
# follows an add. swiglu: act(gate) * up with SiLU (Phi-3 and GLM chunk one projection and write up * act(gate));
# gelu MLPs (Gemma) 0.
# rotary: the rotate_half form, cos and sin in x's dtype (Llama) or float32 with a cast back (OLMo 2): "half";
# half-width cos and sin on torch.chunk halves (GPT-OSS): "chunk"; on even/odd pairs (DeepSeek-V3's rope_interleave):
# "pairs"; interleaved pairs rotated in place with full-width cos and sin (stack/flatten: GLM, GLM-4, Helium in x's
# dtype, Ernie 4.5 in float32 with casts): "every_two". static_cache_update: one per layer whose
# StaticCache layer is a transformers StaticLayer (counted from the cache object, not the graph; a sliding-window
# layer writes with the same index_copy_ while the tokens fit its window, as the tiny inputs do).
MLA = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
       "head_dim": 8, "num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
       "moe_intermediate_size": 32, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
FAMILIES = {
    # architecture: (norm form, norms per layer, pre-norm decoder, swiglu MLPs per layer, rotary form, config)
    "LlamaForCausalLM": ("llama", 2, True, 1, "half", {}),
    "Qwen2ForCausalLM": ("llama", 2, True, 1, "half", {}),
    "Qwen3ForCausalLM": ("llama", 4, True, 1, "half", {}),  # + q_norm, k_norm
    "MistralForCausalLM": ("llama", 2, True, 1, "half", {}),
    "GemmaForCausalLM": ("gemma", 2, True, 0, "half", {}),
    "Olmo2ForCausalLM": ("olmo2", 4, False, 1, "half", {}),  # post-norms, q_norm, k_norm
    # families not used to write the examples
    "Phi3ForCausalLM": ("llama", 2, True, 1, "half", {}),
    "GraniteForCausalLM": ("llama", 2, True, 1, "half", {}),
    "Gemma2ForCausalLM": ("gemma", 4, True, 0, "half", {}),
    "Gemma3ForCausalLM": ("gemma", 6, True, 0, "half", {}),  # + q_norm, k_norm
    "HeliumForCausalLM": ("helium", 2, True, 1, "every_two", {}),  # interleaved rotary
    "GlmForCausalLM": ("llama", 2, True, 1, "every_two", {}),  # partial rotary: the op on q[..., :rotary_dim]
    # the new forms' families (MoE experts run batched_mm: npugraph_ex compiles the grouped default on CPU wrongly;
    # their expert MLPs are not counted as swiglu: None)
    "GptOssForCausalLM": ("olmo2", 2, True, 0, "chunk", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                                           "experts_implementation": "batched_mm"}),
    "DeepseekV3ForCausalLM": ("llama", 4, True, None, "pairs", {**MLA, "experts_implementation": "batched_mm"}),
    "Glm4MoeLiteForCausalLM": ("llama", 4, True, None, "pairs", {**MLA, "experts_implementation": "batched_mm"}),
    # round 3: Ernie 4.5's rotary (rotary_every_two's ernie form), and families of the issue's trial
    "Ernie4_5ForCausalLM": ("llama", 2, True, 1, "every_two", {}),
    "Ernie4_5_MoeForCausalLM": ("llama", 2, True, None, "every_two", {"moe_num_experts": 4, "moe_k": 2,
                                                                       "moe_intermediate_size": 32,
                                                                       "experts_implementation": "batched_mm"}),
    "Glm4ForCausalLM": ("llama", 4, True, 1, "every_two", {}),  # + post_self_attn, post_mlp norms (before the adds)
    "SmolLM3ForCausalLM": ("llama", 2, True, 1, "half", {}),  # rope in both tiny layers (no_rope_layer_interval 4)
    "SeedOssForCausalLM": ("llama", 2, True, 1, "half", {}),
    "Exaone4ForCausalLM": ("llama", 4, False, 1, "half", {}),  # post-norms, q_norm, k_norm; both layers sliding: rope
    "ArceeForCausalLM": ("llama", 2, True, 0, "half", {}),  # ReLU^2 MLP: no swiglu
    "MixtralForCausalLM": ("llama", 2, True, None, "half", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                                            "experts_implementation": "batched_mm"}),
}
ROTARY_OPS = {"rotary": "half", "rotary_halves": "chunk", "rotary_interleaved": "pairs", "rotary_every_two": "every_two"}


def expected(architecture: str, op: str, dtype: str, static_layers: int) -> int | None:
    """How many times a forward of the family computes `op`'s composite (None: not counted)."""
    form, per_layer, pre_norm, swiglu, rotary, _ = FAMILIES[architecture]
    norms = per_layer * LAYERS + 1  # and the final norm
    llama_norm = form == "llama" or (dtype == "float32" and form in ("olmo2", "helium"))
    if op in ROTARY_OPS:
        return 2 * LAYERS if rotary == ROTARY_OPS[op] else 0
    return {"rms_norm": norms if llama_norm or form in ("olmo2", "helium") else 0,
            "gemma_rms_norm": norms if form == "gemma" else 0,
            "add_rms_norm": (2 * LAYERS if pre_norm else 1) if llama_norm or form in ("olmo2", "helium") else 0,
            "swiglu": None if swiglu is None else swiglu * LAYERS,
            "static_cache_update": static_layers}[op]


def generate(root: Path, examples: list[str]) -> dict:
    """Each example generated (library style) and imported: example -> (patterns module, {op: overload})."""
    import torch

    found = {}
    for example in examples:
        package, ops = EXAMPLES[example]
        project = root / example
        subprocess.run([sys.executable, "-m", "opgen", "new", str(ROOT / "examples" / f"{example}.yaml"), "-o",
                        str(project)], check=True, cwd=ROOT, capture_output=True)
        sys.path[:0] = [str(project)]
        patterns = importlib.import_module(f"{package}.patterns")
        found[example] = (patterns, {op: getattr(torch.ops, package).__getattr__(op).default for op in ops})
    return found


def static_cache(network):
    """A transformers StaticCache for the network, and how many of its layers are StaticLayers."""
    import transformers

    cache = transformers.StaticCache(config=network.config, max_cache_len=16)
    return cache, sum(1 for layer in cache.layers if isinstance(layer, transformers.cache_utils.StaticLayer))


def run_case(checks, patterns, overloads: dict, network, inputs: dict, route: str,
             cached: bool = False) -> tuple[dict, float, float]:
    """(op -> nodes after the pattern pass, max |logits - eager|, seconds of the first compiled call); `cached`: with
    a StaticCache passed in (a new one for eager and for the compiled call)."""
    import torch

    counts: dict = {}

    def after(graph):
        if not counts:
            counts.update({op: sum(1 for n in graph.nodes if n.op == "call_function" and (
                n.target is overload or n.args and n.args[0] is overload)) for op, overload in overloads.items()})
    torch.compiler.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        session = stack.enter_context(checks.npugraph_ex_cpu().Session()) if route == "npugraph_ex" else None
        expected_logits = network(**inputs, **({"past_key_values": static_cache(network)[0]} if cached else {})).logits
        backend = checks._fusion_backend(route, patterns.register_fusions, lambda graph: None, after, session)
        compiled = torch.compile(network, backend=backend, fullgraph=True, dynamic=False)
        start = time.perf_counter()
        actual = compiled(**inputs, **({"past_key_values": static_cache(network)[0]} if cached else {})).logits
        seconds = time.perf_counter() - start
    return counts, (actual.float() - expected_logits.float()).abs().max().item(), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(FAMILIES))
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--routes", default="npugraph_ex,inductor")
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="the fused examples to try (a subset is faster)")
    args = parser.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("fusion_models: skipped (transformers is not installed: pip install transformers)")
        return 0
    import torch

    sys.path.insert(0, str(ROOT))
    bad = total = 0
    with tempfile.TemporaryDirectory(prefix="opgen-fusion-models-") as tmp:
        projects = generate(Path(tmp), args.examples.split(","))
        from opgen.testing import capture, fusion, models

        checks = types.SimpleNamespace(npugraph_ex_cpu=capture.npugraph_ex_cpu, tiny_model=models.tiny_model,
                                       _fusion_backend=fusion._fusion_backend, MODEL_TOLERANCES=models.MODEL_TOLERANCES)
        for architecture in args.models.split(","):
            for dtype_name in args.dtypes.split(","):
                dtype = getattr(torch, dtype_name)
                config = {"num_hidden_layers": LAYERS, **FAMILIES[architecture][5]}
                network, inputs = checks.tiny_model(architecture, config, dtype)
                static_layers = static_cache(network)[1]
                for route in args.routes.split(","):
                    for example, (patterns, overloads) in projects.items():
                        if example == STATIC_CACHE:
                            network.config.use_cache = True
                        counts, difference, seconds = run_case(checks, patterns, overloads, network, inputs, route,
                                                               cached=example == STATIC_CACHE)
                        network.config.use_cache = False
                        for op, got in counts.items():
                            want = expected(architecture, op, dtype_name, static_layers)
                            tolerance = checks.MODEL_TOLERANCES[dtype][1] * 4
                            ok = (want is None or got == want) and difference <= tolerance
                            bad += not ok
                            total += 1
                            print(f"{'ok  ' if ok else 'FAIL'} {architecture:20} {dtype_name:8} {route:11} {op:15} "
                                  f"fused {got}/{want}  |logits - eager| {difference:.2e}  first call {seconds:.1f} s",
                                  flush=True)
    print(f"fusion_models: {total - bad} of {total} cases as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
