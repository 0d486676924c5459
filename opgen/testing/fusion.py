"""Fusion tiers (`fusion:` in opgen.yaml, <package>/patterns.py): the composite computes the op, the op replaces
it in compiled graphs under each route, near misses stay unfused.
"""

from __future__ import annotations

import contextlib
import operator
import re
import sys
from collections.abc import Callable, Sequence

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

from .capture import SELF_COPIES, _calls_with_reused_buffers, is_self_copy, leftover_copies, npugraph_ex_cpu
from .failures import CheckFailed, skip, xfail
from .fake import _nodes
from .input_variants import moved, variants
from .op import Call, Op
from .oracle import _REFUSED, _differences, _reference_result, _results
from .values import clone, mismatch, tensors

FUSION_ROUTES = ("npugraph_ex", "inductor")



FUSION_SCALE = 1.5  # the model scales its floating inputs first: the composite then sits inside a graph



FUSION_GLUE = ("getitem", "auto_functionalized", "auto_functionalized_v2")  # what a replacement adds besides the op



def fusion_call(fusion, call: Call) -> Call:
    """The call with the fusion's constants in place of the example's values: the composite is matched with them."""
    return {**call, **fusion.constants}


def first_fusion_call(fusion, examples: Callable[[int], list[Call]]) -> Callable[[int], Call]:
    """A call per seed of the first example the form applies to (its `when:`, its traced dtypes): a form written for
    other dtypes than examples[0]'s (Ernie 4.5's float32 cos and sin beside bfloat16 queries) fires and trains on the
    example written for it. Where it applies to none, examples[0] (whose check then skips, saying so)."""
    calls = examples(0)
    index = next((i for i, call in enumerate(calls) if fusion.holds(**fusion_call(fusion, call))), 0)
    return lambda seed: examples(seed)[index]


def fusion_variants(op: Op, fusion, examples: Callable[[int], list[Call]]) -> list[tuple[str, Call]]:
    """(label, call): the oracle tier's variants of every example (seeds, the swept dtypes, odd sizes) with the
    fusion's constants, and each example with its integer tensors in the other index dtype. (A scalar moved off its
    value is a constant of the pattern; special values and edge sizes are the op's business, not the pattern's.)"""
    return [(variant.label, fusion_call(fusion, variant.call)) for variant in variants(op, examples)
            if variant.kind in ("example", "dtype", "size", "index-dtype")]



def fusion_tolerance(fusion, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) of the op's results against the composite's in `dtype`: the form's `tolerances:` in opgen.yaml,
    else none (the replacement must compute what the model computed, bit for bit). A patterns.py written before
    `tolerances:` existed has no such field."""
    return (getattr(fusion, "tolerances", None) or {}).get(dtype, (0.0, 0.0))



def assert_fusion_matches_the_op(op: Op, fusion, examples: Callable[[int], list[Call]]) -> None:
    """Where `fusion` applies, its composite computes what the op computes (outputs and written buffers) on every call
    of `fusion_variants`: compiled models would otherwise change their results. A composite the op does not compute
    fails naming ops[i].fusion; a call the fusion applies to and the kernel refuses, naming ops[i].fusion.when. The
    results are compared at `fusion_tolerance`, not the op's (a device kernel against its reference)."""
    problems, checked = [], 0
    for label, call in fusion_variants(op, fusion, examples):
        if not fusion.holds(**call):
            continue
        composite_call, op_call = clone(call), clone(call)
        expected = _reference_result(lambda c: fusion.composite(**c), composite_call)
        if expected is _REFUSED:  # the composite refuses the call: no model computes it, nothing to replace
            continue
        try:
            actual = op(op_call)
        except Exception as error:
            raise CheckFailed(f"{fusion.field} would replace its composite by {op.qualname} on {op.field}.{label}, "
                              f"which {op.kernel} refuses ({type(error).__name__}: {error}): add a condition to "
                              f"{fusion.field}.when in opgen.yaml", "fusion-applies-too-widely") from error
        checked += 1
        problems += _differences(op, f"{op.field}.{label}", _results(op, actual, op_call),
                                 _results(op, expected, composite_call), f"{fusion.field}'s composite",
                                 lambda dtype: fusion_tolerance(fusion, dtype))
    if not checked:
        raise CheckFailed(f"{fusion.field} applies to no call of {op.field}.examples ({fusion.field}.when holds on "
                          "none, or the composite refuses them): nothing shows that the composite is what the op "
                          "computes; add an example it applies to", "fusion-untested")
    if problems:
        raise CheckFailed(f"{fusion.field} in opgen.yaml: its composite is not what {op.qualname} computes, on "
                          f"{len(problems)} of {checked} calls (compiled models would change their results):\n"
                          + "\n".join(problems[:8]), "fusion-wrong-pattern")



class FusedGraphs:
    """What a compile with a fusion's pattern pass saw: the graph before and after the pass (a `_snapshot` per compiled
    graph) and, under npugraph_ex, the final graphs it hands to capture."""

    def __init__(self) -> None:
        self.before: list[dict] = []
        self.after: list[dict] = []
        self.final: list = []
        self.problem: str | None = None  # the first value that differs from eager



def _composite_frames(composite: Callable) -> tuple[str, str]:
    code = composite.__code__
    return code.co_filename, code.co_name



_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+, in (?P<name>\S+)')



def composite_nodes(graph: torch.fx.Graph, composite: Callable, overload) -> list[torch.fx.Node]:
    """The nodes traced from a line of `composite` (their stack trace has its frame), but the op's own nodes, the
    glue of a replacement and the copies back into graph inputs (a written buffer's epilogue). (A replacement's
    nodes may carry the stack trace of the node they replace.)"""
    frame = _composite_frames(composite)
    found = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target is overload:
            continue
        if getattr(node.target, "__name__", "") in FUSION_GLUE:
            continue
        if node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder":
            continue
        frames = {(m.group("file"), m.group("name")) for m in _FRAME.finditer(node.meta.get("stack_trace") or "")}
        if frame in frames:
            found.append(node)
    return found



def calls_op(graph: torch.fx.Graph, overload) -> bool:
    """`overload` is called in the graph, directly or functionalized (auto_functionalized(_v2) of it)."""
    return any(n.target is overload or (n.target in (auto_functionalized, auto_functionalized_v2) and n.args
                                        and n.args[0] is overload) for n in graph.nodes if n.op == "call_function")



def _snapshot(graph: torch.fx.Graph, composite: Callable, overload) -> dict:
    left = composite_nodes(graph, composite, overload)
    return {"op": calls_op(graph, overload), "composite": [n.format_node() for n in left], "code": str(graph)}



def _fusion_backend(route: str, register: Callable, before: Callable, after: Callable, session=None,
                    bw_compiler: Callable | None = None):
    """The backend compiling with the package's fusions under `route`: npugraph_ex's (pattern fusion on, the fusions
    registered with it), or Inductor's pattern pass (FUSION_PASS) after its view_to_reshape and remove_noop_ops under
    aot_eager, training graphs partitioned as Inductor partitions them (min-cut rematerialization).
    `before` and `after` see each forward graph around the pattern pass; `bw_compiler`: Inductor's backward."""
    if route == "npugraph_ex":
        _forget_earlier_sessions(register)
        register(install=False, targets=(route,))
        return session.backend(fusion=True, post_grad_custom_pre_pass=lambda gm, *_: before(gm.graph),
                               post_grad_custom_post_pass=lambda gm, *_: after(gm.graph))
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.fx_passes.post_grad import remove_noop_ops, view_to_reshape

    pattern_pass = register(install=False, targets=(route,)).inductor_pass

    def compiler(gm, _example_inputs):
        view_to_reshape(gm)  # as Inductor's compile_fx does before its post-grad passes: its graphs hold no view
        remove_noop_ops(gm.graph)
        before(gm.graph)
        pattern_pass(gm.graph)
        gm.recompile()
        after(gm.graph)
        return gm
    # Inductor's partitioner: default_partition would save the composite's inner values for the backward, leaving no
    # match in a training graph that Inductor itself fuses
    return aot_autograd(fw_compiler=compiler, bw_compiler=bw_compiler or (lambda gm, _example_inputs: gm),
                        partition_fn=min_cut_rematerialization_partition, decompositions=select_decomp_table(),
                        keep_inference_input_mutations=True)



def _forget_earlier_sessions(register: Callable) -> None:
    """The package's register_fusions keeps what it registered with npugraph_ex (its `_REGISTERED`, by module), to
    register nothing twice in a process; a Session drops the patterns registered during it at its end (and keeps the
    module), so the package's record of them is dropped here too, or a later session would find none registered."""
    record = getattr(sys.modules.get(getattr(register, "__module__", "") or ""), "_REGISTERED", None)
    npugraph_ex = sys.modules.get("npugraph_ex")
    if record is not None and npugraph_ex is not None:
        record.pop(npugraph_ex, None)


def _snapshots(fusion, seen: FusedGraphs) -> tuple[Callable, Callable]:
    """The `before` and `after` of `_fusion_backend` recording `_snapshot`s of `fusion` into `seen`."""
    return (lambda graph: seen.before.append(_snapshot(graph, fusion.composite, fusion.overload)),
            lambda graph: seen.after.append(_snapshot(graph, fusion.composite, fusion.overload)))



def _fusion_model(fusion, closure: Call) -> Callable:
    """A model written with the composite: its floating inputs (but the buffers it writes) scaled first, the scalars
    and constants written into it as literals (as models write them), the tensors its arguments."""
    def model(**tensor_args):
        scaled = {name: value * FUSION_SCALE if isinstance(value, torch.Tensor) and value.is_floating_point()
                  and name not in fusion.written else value for name, value in tensor_args.items()}
        return fusion.composite(**scaled, **closure)
    return model



def _split(call: Call) -> tuple[Call, Call]:
    """(tensor arguments, the rest) of a call."""
    return ({k: v for k, v in call.items() if isinstance(v, torch.Tensor)},
            {k: v for k, v in call.items() if not isinstance(v, torch.Tensor)})



def _route_unavailable(route: str, fusion) -> str | None:
    if route not in fusion.targets:
        return f"{fusion.field}.targets in opgen.yaml leaves out {route}"
    return None



def compile_with_fusion(op: Op, fusion, register: Callable, route: str, fn: Callable,
                        calls: Sequence[Call]) -> FusedGraphs:
    """`fn` compiled (fullgraph, static shapes) with the route's pattern pass and run on `calls` (tensor arguments by
    name), each compared with eager: outputs and every tensor argument (written buffers included). The first
    difference is kept in `problem` (the callers say first whether the op replaced the composite)."""
    reason = _route_unavailable(route, fusion)
    if reason is not None:
        skip(reason)
    seen = FusedGraphs()
    torch.compiler.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        session = stack.enter_context(npugraph_ex_cpu().Session()) if route == "npugraph_ex" else None
        compiled = torch.compile(fn, backend=_fusion_backend(route, register, *_snapshots(fusion, seen), session),
                                 fullgraph=True, dynamic=False)
        for call in calls:
            eager_call = clone(call)
            expected = fn(**eager_call)
            try:
                actual = compiled(**call)
            except Exception as error:  # a replacement whose kernel refuses the call: a finding, said by the caller
                seen.problem = f"the compiled call raised {type(error).__name__}: {str(error).splitlines()[0]}"
                if not seen.after:
                    raise
                break
            seen.problem = seen.problem or _value_problem(op, actual, expected, call, eager_call)
        if session is not None:
            seen.final = list(session.graphs)
    return seen



def _value_problem(op: Op, actual, expected, call: Call, eager_call: Call) -> str | None:
    if len(tensors(actual)) != len(tensors(expected)):
        return f"{len(tensors(actual))} outputs, eager {len(tensors(expected))}"
    for index, (got, want) in enumerate(zip(tensors(actual), tensors(expected), strict=True)):
        problem = mismatch(got, want, op.tolerance(want.dtype))
        if problem:
            return f"output {index} differs from eager: {problem}"
    for name in call:
        problem = mismatch(call[name], eager_call[name], op.tolerance(call[name].dtype))
        if problem:
            return f"argument {name!r} after the call differs from eager: {problem}"
    return None



def assert_fusion_fires(op: Op, fusion, register: Callable, make_call: Callable[[int], Call], route: str) -> None:
    """A model written with the composite, compiled under `route` ("npugraph_ex": its backend with pattern fusion on;
    "inductor": Inductor's pattern pass under aot_eager): after the pattern pass the op is in the graph and no node
    of the composite is left; three calls with new values (written buffers reused) equal eager. Under npugraph_ex
    the op is in the graph handed to capture, writing the caller's buffers in place."""
    calls = [fusion_call(fusion, call) for call in _calls_with_reused_buffers(op, make_call, (0, 1, 2))]
    if not fusion.holds(**calls[0]):
        skip(f"{fusion.field}.when does not hold on {op.field}.examples[0]: the first example cannot show it fire")
    closure = _split(calls[0])[1]
    seen = compile_with_fusion(op, fusion, register, route, _fusion_model(fusion, closure),
                               [_split(call)[0] for call in calls])
    if not seen.before or not seen.before[0]["composite"]:
        raise CheckFailed(f"no node of the graph before {route}'s pattern pass comes from {fusion.composite.__name__}: "
                          "the check cannot tell the composite's nodes (no stack traces?)", "fusion-not-seen")
    after = seen.after[0]
    if not after["op"]:
        raise CheckFailed(f"{fusion.field} in opgen.yaml did not fire under {route}: {op.qualname} is not in the "
                          f"graph after the pattern pass, which still has the composite:\n{after['code']}",
                          "fusion-not-fired")
    if after["composite"]:
        left = "\n  ".join(after["composite"])
        raise CheckFailed(f"{fusion.field} under {route}: {op.qualname} is in the graph, but nodes of the composite "
                          f"are left (the pattern replaced part of it):\n  {left}\n{after['code']}", "fusion-partial")
    if seen.problem:
        raise CheckFailed(f"{fusion.field} under {route}: with {op.qualname} in place of the composite, {seen.problem}",
                          "fusion-changes-values")
    if route == "npugraph_ex":
        final = seen.final[0]
        if op.overload not in [n.target for n in final.graph.nodes]:
            raise CheckFailed(f"{op.qualname} is not in the graph npugraph_ex captures:\n{final.code}",
                              "npugraph_ex-op-missing")
        leftovers = leftover_copies(final, op.overload, op.written)
        where = "".join(f"\n  {n.format_node()}" for n in leftovers)
        if leftovers and all(is_self_copy(n) for n in leftovers):
            xfail(f"{fusion.field} under npugraph_ex: {SELF_COPIES}:{where}")
        if leftovers:
            raise CheckFailed(f"{fusion.field} under npugraph_ex: copies of the buffers {op.qualname} writes are left, "
                              f"paid at every replay:{where}\n{final.code}", "npugraph_ex-leftover-copy")



def _other_dim(node: torch.fx.Node) -> torch.fx.Node | None:
    """A reduction (or another op taking `dim`) of the traced composite, made to take another dim; None when the
    node has none to change."""
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if node.op != "call_function" or "dim" not in names:
        return None
    position = names.index("dim")
    dims = node.kwargs["dim"] if "dim" in node.kwargs else node.args[position] if position < len(node.args) else None
    value = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if dims is None or not isinstance(value, torch.Tensor) or value.dim() < 2:
        return None
    listed = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    wrapped = [d % value.dim() for d in listed]
    other = next(d for d in range(value.dim()) if d not in wrapped) if len(set(wrapped)) < value.dim() else None
    if other is None:
        return None
    changed = [other, *listed[1:]] if isinstance(dims, (list, tuple)) else other
    if "dim" in node.kwargs:
        node.update_kwarg("dim", changed)
    else:
        node.update_arg(position, changed)
    return node



def _escaping_intermediate(gm: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The traced composite made to return one of its intermediate values too (an outside use of it); None when it
    has none. (The new value of a written buffer, copied back into it, is an output of the pattern: not one.)"""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    returned = set(_nodes(output.args)) | {n.args[1] for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default
                                           and n.args[0].op == "placeholder"}
    for node in gm.graph.nodes:
        if (node.op == "call_function" and node not in returned and node.users and node.target is not operator.getitem
                and isinstance(node.meta.get("val"), torch.Tensor)):
            outputs = output.args[0]
            output.args = ((*outputs, node) if isinstance(outputs, (list, tuple)) else (outputs, node),)
            return node
    return None



def _traced_composite(fusion, call: Call) -> tuple[torch.fx.GraphModule, list[str]]:
    """The composite on `call` (its scalars as constants) traced to aten ops, functionalized (a written buffer gets
    its new value copied back, as in a model's graph): a GraphModule of its tensor arguments, and their names."""
    from torch.fx.experimental.proxy_tensor import make_fx

    tensor_args, closure = _split(call)
    names = list(tensor_args)

    def composite(*values):
        return fusion.composite(**dict(zip(names, values, strict=True)), **closure)
    with torch.no_grad():
        gm = make_fx(torch.func.functionalize(composite))(*clone([tensor_args[n] for n in names]))
    return gm, names



def _graph_model(gm: torch.fx.GraphModule, names: list[str]) -> Callable:
    def model(**tensor_args):
        return gm(*[tensor_args[name] for name in names])
    return model



def fusion_near_misses(op: Op, fusion, examples: Callable[[int], list[Call]]) -> list[tuple[str, Callable, Call]]:
    """(what, model, tensor arguments): models close to the composite that the op must not replace. Each constant of
    the pattern moved off its value; the composite with an intermediate value used outside it; with a reduction
    (an op taking `dim`) over another dim; and the first call of `fusion_variants` the fusion does not apply to in
    each way (`fusion_refusal`: a dtype it is not traced in, its `when:`) that the composite still computes."""
    first = fusion_call(fusion, examples(0)[0])
    found = []
    tensor_args, closure = _split(first)
    for name, value in fusion.constants.items():
        other = moved(value)
        if other is not None and _reads(fusion, first, name, other):
            found.append((f"{name}={other!r} in place of {value!r}", _fusion_model(fusion, {**closure, name: other}),
                          tensor_args))
    for what, change in (("an intermediate value of the composite used outside it", _escaping_intermediate),
                         ("the composite reducing over another dim", lambda gm: _first(gm, _other_dim))):
        gm, names = _traced_composite(fusion, first)
        node = change(gm)
        if node is None:
            continue
        gm.recompile()
        model = _graph_model(gm, names)
        if _reference_result(lambda args, model=model: model(**args), clone(tensor_args)) is _REFUSED:
            continue  # the changed composite does not run: no model computes it
        found.append((f"{what} ({node.format_node()})", model, tensor_args))
    refused = set()  # one call per way of not applying: a dtype it is not traced in, its `when:`
    for label, call in fusion_variants(op, fusion, examples):
        refusal = fusion_refusal(fusion, call)
        kind = refusal.endswith("when does not hold")
        if not refusal or kind in refused:
            continue
        if _reference_result(lambda c: fusion.composite(**c), clone(call)) is _REFUSED:
            continue
        refused.add(kind)
        found.append((f"{op.field}.{label}: {refusal}", _fusion_model(fusion, _split(call)[1]), _split(call)[0]))
    return found



def _reads(fusion, call: Call, name: str, other) -> bool:
    """Whether the composite's graph on `call` changes with the constant `name` at `other`: a constant the composite
    never reads leaves its pattern as it is, so moving it makes no near miss."""
    return _traced_composite(fusion, call)[0].code != _traced_composite(fusion, {**call, name: other})[0].code



def _first(gm: torch.fx.GraphModule, change: Callable) -> torch.fx.Node | None:
    return next((changed for node in list(gm.graph.nodes) if (changed := change(node)) is not None), None)



def assert_near_misses_stay_unfused(op: Op, fusion, register: Callable, examples: Callable[[int], list[Call]],
                                    route: str) -> list[str]:
    """Every model of `fusion_near_misses`, compiled under `route` as in `assert_fusion_fires`: the op is not in the
    graph after the pattern pass, and the values equal eager. Returns what was tried."""
    near_misses = fusion_near_misses(op, fusion, examples)
    if not near_misses:
        skip(f"no near miss of {fusion.field} can be built: no constant, no intermediate value, no `dim`, and no "
             "example where its `when` does not hold")
    for what, model, tensor_args in near_misses:
        seen = compile_with_fusion(op, fusion, register, route, model, [tensor_args])
        fired = [index for index, graph in enumerate(seen.after) if graph["op"]]
        if fired:
            values = f" (and so: {seen.problem})" if seen.problem else ""
            raise CheckFailed(f"{fusion.field} in opgen.yaml fired under {route} on a near miss it must not replace: "
                              f"{what}{values}:\n{seen.after[fired[0]]['code']}", "fusion-fires-on-near-miss")
        if seen.problem:
            raise CheckFailed(f"{what}, compiled under {route}: {seen.problem}", "fusion-changes-values")
    tried = [what for what, _, _ in near_misses]
    print(f"{fusion.field} under {route}: stayed unfused on " + "; ".join(tried))
    return tried



def fusion_refusal(fusion, call: Call) -> str:
    """Why `fusion` does not apply to `call` ("" when it does): a dtype it is not traced in, or its `when:`."""
    floating = tuple(t.dtype for name in fusion.inputs if isinstance(call.get(name), torch.Tensor)
                     for t in [call[name]] if t.is_floating_point())
    if floating not in fusion.dtypes:
        names = " and ".join(dict.fromkeys(str(d).removeprefix("torch.") for d in floating))
        return f"{fusion.field} is not traced in {names}"
    return "" if fusion.holds(**call) else f"{fusion.field}.when does not hold"
