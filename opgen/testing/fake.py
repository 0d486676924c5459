"""Tier 1: the op enters a compiled graph with fake tensors, and its fake and kernel follow the spec's semantics.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

from .failures import CheckFailed
from .input_variants import DECLARED_CHECK, variants
from .op import Call, Op
from .oracle import _REFUSED, _reference_result
from .values import clone, tensor_map, tensors


class _GraphSeen(Exception):
    """Raised instead of running the compiled graph: tracing needs no kernel at all."""



def trace(op: Op, call: Call) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """Compile the op's call with fullgraph=True and return (Dynamo graph, AOT graph), running nothing."""
    graphs = {}

    def never_run(*_args):
        raise _GraphSeen()

    def inference_compiler(gm, _example_inputs):
        graphs["aot"] = gm
        return never_run

    # imported here, not with the module: every generated test module imports this one (through capture), and
    # Dynamo's import is seconds that a run compiling nothing (`pytest -k is_registered`) need not pay
    from torch._dynamo.backends.common import aot_autograd

    aot = aot_autograd(fw_compiler=inference_compiler)

    def backend(gm, example_inputs):
        graphs["dynamo"] = gm
        return aot(gm, example_inputs)

    torch.compiler.reset()
    compiled = torch.compile(op.as_declared(), backend=backend, fullgraph=True, dynamic=False)
    try:
        with torch.no_grad():
            compiled(**call)
    except _GraphSeen:
        return graphs["dynamo"], graphs["aot"]
    raise AssertionError("the compiled graph ran although its compiler never returns it")



def assert_enters_graph(op: Op, call: Call, semantics: Callable | None = None, bounds: Callable | None = None) -> None:
    """Traced with fake tensors (no kernel runs), the op is a node of the AOT graph (functionalized when it
    mutates); with `semantics` (the spec's (shape, dtype) per output) the fake's outputs have them, also on fake
    "cuda" inputs (no GPU needed), and it enforces the spec's `dynamic` bounds (`bounds`)."""
    dynamo_graph, aot_graph = trace(op, call)
    _assert_calls_op(aot_graph, op.overload, mutable=op.overload._schema.is_mutable)
    if semantics is None:
        return
    _assert_metadata(op, _graph_outputs(dynamo_graph), semantics(**call))
    _assert_fake_device(op, call, bounds(**call) if bounds is not None else ())



def _assert_calls_op(graph: torch.fx.GraphModule, overload, mutable: bool) -> None:
    direct = [n for n in graph.graph.nodes if n.op == "call_function" and n.target is overload]
    functionalized = [n for n in graph.graph.nodes if n.op == "call_function"
                      and n.target in (auto_functionalized, auto_functionalized_v2) and n.args[0] is overload]
    if mutable:
        assert functionalized and not direct, f"{overload} is not functionalized in:\n{graph.code}"
    else:
        assert direct, f"{overload} is missing from the compiled graph:\n{graph.code}"



def _graph_outputs(graph: torch.fx.GraphModule) -> list:
    output = next(n for n in graph.graph.nodes if n.op == "output")
    return [node.meta["example_value"] for node in _nodes(output.args)]



def _nodes(value) -> list[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for item in value for n in _nodes(item)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _nodes(item)]
    return []



def _flat(op: Op, expected: list) -> tuple[list, list[str]]:
    """(shape, dtype) and spec field of each output tensor; a Tensor[] output (a list of them) one by one."""
    pairs, names = [], []
    for index, item in enumerate(expected):
        items = item if isinstance(item, list) else [item]
        pairs += items
        names += [f"{op.output_field(index)}[{j}]" for j in range(len(items))] if isinstance(item, list) else [
            op.output_field(index)]
    return pairs, names



def _assert_metadata(op: Op, outputs: list, expected: list) -> None:
    """Fake outputs have the shapes and dtypes the spec's semantics give (shape None: data-dependent)."""
    expected, names = _flat(op, expected)
    problem = metadata_mismatch("the fake", "example 0", outputs, expected, names, traced=True)
    assert problem is None, problem



def metadata_mismatch(who: str, where: str, outputs: list, expected: list, names: list[str],
                      traced: bool = False) -> str | None:
    """How `outputs` (of `who`, on `where`) first differ from the (shape, dtype) pairs the semantics give, or None.
    A data-dependent size (shape None) is only judged on a `traced` graph, where it must be a symbol."""
    if len(outputs) != len(expected):
        return f"{who} gives {len(outputs)} tensors on {where}, the spec's semantics {len(expected)}"
    for value, (shape, dtype), name in zip(outputs, expected, names, strict=True):
        if dtype is not None and value.dtype != dtype:
            return f"opgen.yaml: {name}.dtype: {who} gives {value.dtype} on {where}, the spec says {dtype}"
        if shape is None:
            if traced and not free_unbacked_symbols(value.shape):
                return f"opgen.yaml: {name}.shape: expected a data-dependent size"
        elif not free_unbacked_symbols(value.shape) and tuple(value.shape) != tuple(shape):
            return (f"opgen.yaml: {name}.shape: {who} gives {tuple(value.shape)} on {where}, the spec says "
                    f"{tuple(shape)}")
    return None



def _assert_fake_device(op: Op, call: Call, bounds: Sequence = ()) -> None:
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        fake = tensor_map(lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda"), call)
        result = op(fake)
    for index, value in enumerate(tensors(result)):
        assert value.device.type == "cuda", (
            f"opgen.yaml: {op.output_field(index)}: the fake function of {op.overload} puts it on {value.device} for "
            "inputs on cuda: allocate it on the inputs' device (device=x.device)")
    symbols = sorted({s for t in tensors(result) for s in free_unbacked_symbols(t.shape)}, key=str)
    assert len(symbols) >= len(bounds), (
        f"the fake function of {op.overload} has {len(symbols)} data-dependent sizes, the spec's shape rules "
        f"{len(bounds)}")
    for symbol, (lower, upper) in zip(symbols, bounds, strict=False):  # the fake may have more
        allowed = shape_env.var_to_range[symbol]
        assert (upper is None or allowed.upper <= upper) and (lower is None or allowed.lower >= lower), (
            f"the fake function of {op.overload} lets the data-dependent size {symbol} range over [{allowed.lower}, "
            f"{allowed.upper}], the spec's `dynamic` bounds it to [{lower}, {upper}] on example 0: a torch._check of "
            f"the bound is missing (the fake is generated from {op.field}.outputs in opgen.yaml)")



def assert_follows_semantics(op: Op, examples: Callable[[int], list[Call]] | Sequence[Call],
                             semantics: Callable) -> None:
    """On every example, and (`examples` the examples function) every variant of them the op takes
    (input_variants: the reference accepts it, the kernel runs), the fake function's outputs have the
    shapes and dtypes the spec's semantics give, and so do the CPU kernel's: a fake right on the examples only
    (another shape at batch 1, another dtype for bfloat16) fails, naming the variant. (At sizes 0 and 1 only the fake
    is held to the semantics: a kernel there is held to the reference by the oracle tier, and an input such as a
    weight with no groups may be one the spec's rules were never meant for.) A variant moving a scalar or a size on
    which the spec's own reference gives other shapes than its semantics (`chunk(x, n)` at an n that does not divide
    x) is one the semantics were not written for: it is left out with a warning, not blamed on the kernel."""
    for label, call, kind, expected in _semantics_calls(op, examples):
        try:
            want, names = _flat(op, semantics(**clone(call)))
            got = tensors(op(clone(call)))
        except Exception as error:
            if kind:  # the oracle tier reports a kernel failing on an input the reference takes
                continue
            raise CheckFailed(f"{op.kernel} on {op.field}.{label}: {type(error).__name__}: {error}",
                              "kernel-raised") from error
        if kind and not _semantics_cover(op, label, kind, expected, want, names):
            continue
        if kind != "size-edge":
            _assert_kernel_follows(op, label, got, want, names)
        _assert_fake_follows(op, label, call, want, names, kind)



def _assert_kernel_follows(op: Op, label: str, got: list, want: list, names: list[str]) -> None:
    problem = metadata_mismatch(f"the CPU kernel ({op.kernel})", f"{op.field}.{label}", got, want, names)
    assert problem is None, problem



def _semantics_calls(op: Op, examples) -> list[tuple[str, Call, str, Any]]:
    """(label, call, kind of variant ("" for an example), the reference's result (None without one)): the examples,
    then the variants the reference accepts (all, without one)."""
    if not callable(examples):
        return [(f"examples[{number}]", call, "", None) for number, call in enumerate(examples)]
    found = [(f"examples[{number}]", call, "", None) for number, call in enumerate(examples(0))]
    reference = op.seeded(lambda call: op.reference(**call)) if op.reference is not None else None
    for variant in variants(op, examples):
        if variant.kind == "example":
            continue
        expected = _reference_result(reference, clone(variant.call)) if reference is not None else None
        if expected is not _REFUSED:
            found.append((variant.label, variant.call, variant.kind, expected))
    return found



# Variant kinds whose inputs the spec may constrain in ways `inputs:` cannot say (n divides a size, a head count
# divides a width). The others (another dtype, promoted dtypes, other values) keep the shapes the semantics give.
_MAY_LEAVE_THE_SEMANTICS = ("scalar", "default", "dim", "size", "size-edge", "size-tile", "size-separate", "rank")



def _semantics_cover(op: Op, label: str, kind: str, expected, want: list, names: list[str]) -> bool:
    """Whether the semantics describe the variant `label`: the reference (when the spec has one) gives their shapes and
    dtypes there. Where it does not, a scalar or size variant is left out with a warning; another kind fails, naming
    the spec (its semantics and reference disagree on an input both should describe)."""
    if expected is None:
        return True
    problem = metadata_mismatch(f"{op.field}.reference", f"{op.field}.{label}", tensors(expected), want, names)
    if problem is None:
        return True
    if kind not in _MAY_LEAVE_THE_SEMANTICS:
        raise CheckFailed(f"{problem}: the spec's semantics ({op.field}.outputs) and its reference disagree on an "
                          "input of the op; fix whichever is wrong in opgen.yaml")
    warnings.warn(f"{problem}: the fake and the kernel are not held to the semantics there (if the op takes this "
                  f"input, {op.field}.outputs in opgen.yaml is wrong for it)", stacklevel=3)
    return False



def _assert_fake_follows(op: Op, label: str, call: Call, want: list, names: list[str], kind: str | None = None) -> None:
    """The fake function's outputs on `call` have the shapes and dtypes `want` (the semantics) gives. A size or scalar
    variant that breaks one of the spec's `checks:` is outside the op's contract: left out with a warning (the kernel
    need not refuse it), where an example that breaks one fails."""
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        try:
            fakes = tensors(op(tensor_map(lambda t: mode.from_tensor(t, static_shapes=True), call)))
        except Exception as error:
            if kind in _MAY_LEAVE_THE_SEMANTICS and DECLARED_CHECK.search(str(error)):
                warnings.warn(f"{op.field}.{label} is outside the op's checks ({error}): left out", stacklevel=3)
                return
            raise CheckFailed(f"the fake function of {op.overload} raises on {op.field}.{label}, which the CPU kernel "
                              f"takes: {type(error).__name__}: {error}", "fake-raised") from error
    problem = metadata_mismatch("the fake function", f"{op.field}.{label}", fakes, want, names)
    if problem:
        kind = "fake-wrong-dtype" if ".dtype:" in problem else "fake-wrong-shape"
        raise CheckFailed(f"{problem} (the fake is generated from the spec: was ops.py edited?)", kind)
