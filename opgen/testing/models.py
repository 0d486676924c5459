"""Fusion tier with `fusion.models`: Hugging Face models (tiny configs) get the op at every occurrence.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Sequence

import torch

from .capture import npugraph_ex_cpu
from .failures import CheckFailed, skip
from .fusion import _fusion_backend
from .op import Op
from .values import mismatch

# A tiny config every decoder family takes (others keep their defaults); `fusion.models[k].config` overrides it.
TINY_CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128, "max_position_embeddings": 64,
               "use_cache": False, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}



MODEL_TOLERANCES = {torch.bfloat16: (5e-2, 5e-2), torch.float16: (1e-2, 1e-2), torch.float32: (1e-4, 1e-4)}



STATIC_CACHE_LENGTH = 16  # `cache: static`: the StaticCache's max_cache_len (the inputs' 8 tokens fit)



def tiny_model(architecture: str, config: dict, dtype: torch.dtype, cache: str = ""):
    """The Hugging Face `architecture` (a transformers class name) at TINY_CONFIG (and `config`), random weights in
    `dtype` (each 1-D weight moved off its init, so that a norm's weight is not all ones), and its inputs: a function
    of no arguments giving them afresh, where `cache` is "static" with a new transformers StaticCache each call
    (use_cache on; a cache is written by each forward), else the inputs themselves. Skips when transformers is not
    installed."""
    try:
        import transformers
    except ImportError:
        skip(f"transformers is not installed: the test builds {architecture} from it (pip install transformers)")
    cls = getattr(transformers, architecture, None)
    if cls is None or not hasattr(cls, "config_class"):
        raise CheckFailed(f"{architecture!r} is not a model class of transformers {transformers.__version__} (a "
                          "Hugging Face architecture, e.g. LlamaForCausalLM)", "model-unknown")
    torch.manual_seed(0)
    settings = {**TINY_CONFIG, **({"use_cache": True} if cache else {}), **config}
    model = cls(cls.config_class(**settings)).to(dtype).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=g).to(dtype))
    vocab = getattr(model.config, "vocab_size", TINY_CONFIG["vocab_size"])
    inputs = {"input_ids": torch.randint(0, vocab, (2, 8), generator=g)}
    if not cache:
        return model, inputs
    # transformers 5.x renames forward's `past_key_values` to `cache` (the old name warns)
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return model, lambda: {**inputs, name: transformers.StaticCache(config=model.config,
                                                                    max_cache_len=STATIC_CACHE_LENGTH)}



def composite_sites(graph: torch.fx.Graph, forms: Sequence, trace_fn: Callable) -> dict:
    """Where a graph holds one of `forms`' composites, whatever its constants, dtypes and `when:` (each form's
    patterns with every literal left open, in every operand order): output node name -> (form, order, match). A
    match inside a larger one (a float32 trace's inside a bfloat16 composite's casts) is the same occurrence; the
    float32 middle of a half-precision composite of another form (its inputs upcasts) is none."""
    upcast_from = sys.modules[type(forms[0]).__module__].upcast_from
    matches = []
    for node in [n for n in graph.nodes if n.op == "call_function"]:
        for form in forms:
            for _, order, pattern in form.patterns(trace_fn):
                matched = pattern.match(node)
                if matched and not any(upcast_from(matched.kwargs.get(name)) for name in form.tensors):
                    matches.append((node.name, form, order, matched))
    found, taken = {}, set()
    for name, form, order, matched in sorted(matches, key=lambda m: -len(m[3].nodes)):
        if name not in found and not taken & set(matched.nodes):
            found[name] = (form, order, matched)
            taken |= set(matched.nodes)
    return found



def _site_refusal(form, order, matched, trace_fn: Callable) -> str:
    """Why `form` does not replace an occurrence of its composite (its `refusal`, in the graph's fake mode)."""
    from torch._dynamo.utils import detect_fake_mode

    values = [v.meta["val"] for v in matched.kwargs.values() if isinstance(v, torch.fx.Node) and "val" in v.meta]
    with detect_fake_mode(values) or contextlib.nullcontext():
        return form.refusal(matched, trace_fn, order) or "another match took its nodes"



def assert_fusion_fires_in_model(op: Op, forms: Sequence, register: Callable, model: tuple, route: str,
                                 dtype: torch.dtype) -> None:
    """A Hugging Face model (`fusion.models`: (architecture, config[, cache]), tiny config, random weights; with
    `cache: static` a StaticCache passed in, new for eager and for the compiled call) in `dtype`, compiled under
    `route`: every occurrence of the op's composites in the graph before the pattern pass (`composite_sites`) is
    replaced by the op, but those a form's `when:` refuses (said, not failed: the spec chose them), at least one is,
    and the logits equal eager's."""
    architecture, config, *cache = model
    if all(route not in form.targets for form in forms):
        skip(f"{forms[0].field.split('.forms')[0]}.targets in opgen.yaml leaves out {route}")
    if all(all(d != dtype for combination in form.dtypes for d in combination) for form in forms):
        skip(f"no form of {op.field}.fusion is traced in {str(dtype).removeprefix('torch.')}")
    network, inputs = tiny_model(architecture, config, dtype, *cache)
    fresh = inputs if callable(inputs) else lambda: inputs
    trace_fn = sys.modules[type(forms[0]).__module__].TRACE_FNS[route]  # the package's patterns module
    seen: dict = {}

    def before(graph):
        seen.setdefault("sites", {name: (form.field, _site_refusal(form, order, matched, trace_fn))
                                  for name, (form, order, matched) in composite_sites(graph, forms, trace_fn).items()})

    def after(graph):
        seen.setdefault("fused", sum(1 for n in graph.nodes if n.op == "call_function" and (
            n.target is op.overload or n.args and n.args[0] is op.overload)))
        seen.setdefault("left", {n.name for n in graph.nodes} & set(seen["sites"]))
    torch.compiler.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        session = stack.enter_context(npugraph_ex_cpu().Session()) if route == "npugraph_ex" else None
        expected = network(**fresh()).logits
        compiled = torch.compile(network, backend=_fusion_backend(route, register, before, after, session),
                                 fullgraph=True, dynamic=False)
        actual = compiled(**fresh()).logits
    where = f"{architecture} ({str(dtype).removeprefix('torch.')}) under {route}"
    sites = seen.get("sites", {})
    if not sites:
        raise CheckFailed(f"{op.field}.fusion: no occurrence of its composite in {where}: the model writes another "
                          "form; `post_grad_graph(model, *inputs)` in the package's patterns module prints what it "
                          "writes", "fusion-not-in-model")
    left = {name: why for name, (_, why) in sites.items() if name in seen["left"]}
    by_when = {name: why for name, why in left.items() if ".when does not hold" in why}  # the spec's own choice
    if not seen["fused"] or len(left) > len(by_when) or seen["fused"] != len(sites) - len(left):
        raise CheckFailed(f"{op.field}.fusion fired at {seen['fused']} of the {len(sites)} occurrences of its "
                          f"composite in {where}; left: " + "; ".join(f"{n}: {why}" for n, why in left.items()),
                          "fusion-partial")
    rtol, atol = MODEL_TOLERANCES.get(dtype, (0.0, 0.0))
    problem = mismatch(actual.float(), expected.float(), (rtol, atol))
    if problem:
        raise CheckFailed(f"{where}, {seen['fused']} {op.qualname} in place of the composite: the logits differ from "
                          f"eager's: {problem}", "fusion-changes-values")
    kept = f"; {len(by_when)} left where its `when:` does not hold ({'; '.join(by_when.values())})" if by_when else ""
    print(f"{op.field}.fusion: {where}: fired at {seen['fused']} of {len(sites)} occurrences of its composite"
          f"{kept}; logits equal eager")
