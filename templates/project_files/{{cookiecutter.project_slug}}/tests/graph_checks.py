"""The graph-entry checks of opgen's generated tests (copied verbatim by opgen; `opgen check` runs this file too).

Imports only the standard library and torch (pytest where a check skips). Every check takes an `Op`, the
operator under test and where its parts live (the spec field `ops[i]`, the kernel file), and calls of it:
a call is a dict of the op's arguments by name (`op.overload(**call)`). A check raises `CheckFailed` (an
AssertionError) whose message names what to fix; its `kind` says which problem it found, for `opgen check`.

Checks, in the order of the generated tests:
  registration   assert_registered, assert_signature
  fake tensors   assert_enters_graph (no kernel runs), assert_follows_semantics
  CPU kernel     assert_expected (`expect:`), assert_writes, opcheck, assert_compiled_matches_eager,
                 assert_non_contiguous_inputs, assert_compiles_once, opcheck_with_requires_grad, gradcheck
  capture        assert_capture_replay (npugraph_ex on an NPU, CUDA graphs on a GPU),
                 assert_npugraph_ex_compiles_on_cpu (npugraph_ex's compiler on CPU, tests/npugraph_ex_cpu.py),
                 assert_npugraph_ex_capture_replay_on_cpu (npugraph_ex's AclGraph over an emulated NPU graph,
                 tests/npu_graph_cpu.py)
  fusion         assert_fusion_matches_the_op, assert_fusion_fires, assert_near_misses_stay_unfused (`fusion:`)
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import torch
from input_variants import SWEPT_DTYPES, Domain, Draw, Variant, drawn, moved, random_tensor, smaller_calls, variants
from torch._dynamo.backends.common import aot_autograd
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import make_boxed_func
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd.gradcheck import GradcheckError
from torch.fx.experimental import _config as symbolic_shapes_config
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

# the generated tests use these as checks.<name>
__all__ = ["SWEPT_DTYPES", "Domain", "Draw", "Variant", "random_tensor", "variants"]

Call = dict[str, Any]

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
                 "test_aot_dispatch_dynamic")
# Data-dependent output sizes cannot be traced with static shapes.
OPCHECK_UTILS_DYNAMIC = tuple(name for name in OPCHECK_UTILS if name != "test_aot_dispatch_static")
# (rtol, atol) per dtype: `expect:` values against the CPU kernel (torch.testing.assert_close's defaults;
# other dtypes compare exactly), and the device kernel against the CPU reference kernel (`ops[i].tolerances`
# in opgen.yaml overrides these).
TOLERANCES = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
              torch.float64: (1e-7, 1e-7)}
DEVICE_TOLERANCES = {torch.float16: (1e-2, 1e-3), torch.bfloat16: (5e-2, 1e-2), torch.float32: (1e-4, 1e-5),
                     torch.float64: (1e-9, 1e-12)}  # float64 tight enough that float32 arithmetic shows
SENTINEL = -77  # what written buffers are filled with before the call, so that any write shows
# Copies npugraph_ex is known to leave for ops that return a mutated argument (`tags:` in opgen.yaml).
KNOWN_COPIES = {
    "inplace": "npugraph_ex 2.13.0 leaves `copy_(x, <the op's result>)` after a torch.Tag.inplace op, a copy of the "
               "buffer onto itself at every replay; opgen's default form (`-> ()`, no tag) has no copy",
    "out": "npugraph_ex 2.13.0 does not re-inplace a torch.Tag.out op: it writes into a new buffer and copies that "
           "into `out` at every replay; opgen's default form (`-> ()`, no tag) writes in place",
}


class CheckFailed(AssertionError):
    """A check found a problem; `kind` names it (for `opgen check`'s signature table)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class SkipCheck(Exception):
    """A check cannot run here (raised instead of pytest's skip where pytest is not installed)."""


def skip(reason: str) -> NoReturn:
    try:
        import pytest
    except ImportError:
        raise SkipCheck(reason) from None
    pytest.skip(reason)


def xfail(reason: str) -> NoReturn:
    try:
        import pytest
    except ImportError:
        raise SkipCheck(reason) from None
    pytest.xfail(reason)


@contextlib.contextmanager
def outputs_are_new_memory() -> Iterator[None]:
    """Around a compiled call: torch's first-call check that a custom op's outputs are not its inputs' memory
    raises (it only warns unless CI is set, torch._functorch.config.error_on_custom_op_aliasing), named here."""
    try:
        with functorch_config.patch(error_on_custom_op_aliasing=True):
            yield
    except RuntimeError as error:
        if "must not also be an input to this custom operator" not in str(error):
            raise
        raise CheckFailed("an output is the memory of an input: the kernel returns (a view of) an argument while the "
                          f"schema promises a new tensor; return a clone, or drop the return ({error})",
                          "view-return") from None


@dataclass(frozen=True)
class Op:
    """An operator under test. `field` ("ops[0]") and the file paths come from a generated project; outside one
    (`opgen check`) they are empty and messages name the operator instead."""

    overload: torch._ops.OpOverload
    field: str = ""  # where opgen.yaml describes the op
    schema: str = ""  # the spec's schema, `ns::op(...) -> ...`
    cpu_kernel: str = ""  # the CPU kernel's file
    outputs: tuple[str, ...] = ()  # the outputs' names, in order
    returned: tuple[str, ...] = ()  # a torch.Tag.inplace/out op: the argument each output is
    tag: str = ""  # "inplace", "out" or ""
    dynamic: bool = False  # an output size is data-dependent (`dynamic` in the semantics)
    tolerances: dict | None = None  # {dtype: (rtol, atol)}: a kernel against the reference (`ops[i].tolerances`)
    reference: Callable | None = None  # the spec's `reference:` (<package>/reference.py): the independent oracle
    random: bool = False  # torch.Tag.nondeterministic_seeded: its outputs are random draws
    dtypes: tuple[torch.dtype, ...] = ()  # `ops[i].dtypes`: the floating dtypes swept (default: SWEPT_DTYPES)
    inputs: dict | None = None  # `ops[i].inputs`: argument name -> Domain, where its values live
    promotes: tuple[tuple[str, ...], ...] = ()  # the arguments each `promote(...)` of the semantics reads
    contiguous: tuple[str, ...] = ()  # `ops[i].contiguous`: the op makes these contiguous, or refuses them (written)

    @property
    def qualname(self) -> str:
        """`ns::op` (`ns::op.overload`), as the spec and torch's errors name it."""
        schema = self.overload._schema
        return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name

    @property
    def arguments(self) -> list:
        return list(self.overload._schema.arguments)

    @property
    def written(self) -> tuple[str, ...]:
        """The arguments the schema marks written (`Tensor(a!)`)."""
        return tuple(a.name for a in self.arguments if a.alias_info is not None and a.alias_info.is_write)

    @property
    def kernel(self) -> str:
        return self.cpu_kernel or f"the CPU kernel of {self.overload}"

    def spec(self, part: str) -> str:
        """`opgen.yaml: ops[0]<part>`, or the operator's name outside a generated project."""
        return f"opgen.yaml: {self.field}{part}" if self.field else f"{self.overload}{part}"

    def output_field(self, index: int) -> str:
        """The spec field describing output `index`, for messages."""
        if index < len(self.returned):
            return f"{self.field or self.overload}.schema (returns {self.returned[index]})"
        if index < len(self.outputs):
            return f"{self.field or self.overload}.outputs.{self.outputs[index]}"
        return f"output {index}"

    def describe_argument(self, name: str) -> str:
        """`'x' (schema argument 0)`, or `'out' (schema argument keyword 'out')`."""
        for position, argument in enumerate(a for a in self.arguments if not a.kwarg_only):
            if argument.name == name:
                return f"{name!r} (schema argument {position})"
        return f"{name!r} (schema argument keyword {name!r})"

    def __call__(self, call: Call):
        return self.overload(**call)

    def drawn(self, calls: list[Call], g: torch.Generator) -> list[Call]:
        """The examples `calls` with each `Draw` placeholder drawn from its argument's domain (`ops[i].inputs`)."""
        return drawn(self.inputs or {}, calls, g)

    def seeded(self, fn: Callable) -> Callable:
        """`fn`, for a random op run after torch.manual_seed(0): two runs of one kernel then draw the same numbers."""
        if not self.random:
            return fn

        def run(*args, **kwargs):
            torch.manual_seed(0)
            return fn(*args, **kwargs)
        return run

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) of a kernel against the reference for `dtype` (other dtypes compare exactly)."""
        return {**DEVICE_TOLERANCES, **(self.tolerances or {})}.get(dtype, (0.0, 0.0))


@dataclass(frozen=True)
class Expected:
    """An `expect:` entry of opgen.yaml: on example `example`, the output or the (written) argument `name` holds
    `values`, or, for `rows`, the given rows of it ({row index: values})."""

    example: int
    name: str
    values: Any = None
    rows: dict | None = None
    rtol: float | None = None
    atol: float | None = None
    element: int | None = None  # a Tensor[] output or argument: which of its tensors
    length: int | None = None  # ... and how many it holds


# --- values ----------------------------------------------------------------------------------------


def tensor_map(fn: Callable[[torch.Tensor], Any], value):
    """`fn` applied to every tensor inside nested tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(tensor_map(fn, item) for item in value)
    if isinstance(value, dict):
        return {key: tensor_map(fn, item) for key, item in value.items()}
    return value


def tensors(value) -> list[torch.Tensor]:
    """Every tensor inside nested tuples, lists and dicts, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    return []


def clone(value):
    return tensor_map(lambda t: t.clone(), value)


def copy_into(destination, source) -> None:
    """Refill `destination` (a tensor, or a list of them; `Tensor?` entries may be None) with `source`."""
    if isinstance(destination, torch.Tensor):
        destination.copy_(source)
    elif destination is not None:
        for dst, src in zip(destination, source, strict=True):
            copy_into(dst, src)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN."""
    if a.shape != b.shape:
        return False
    equal = a == b
    if a.is_floating_point():
        equal |= a.isnan() & b.isnan()
    return bool(equal.all())


def same_values(a, b) -> bool:
    """The same tensors inside `a` and `b` (nested), shapes and values, NaN equal to NaN."""
    ta, tb = tensors(a), tensors(b)
    return len(ta) == len(tb) and all(same(x, y) for x, y in zip(ta, tb, strict=True))


def mismatch(actual, expected: torch.Tensor, tolerance: tuple | None = None) -> str | None:
    """None when `actual` is close to `expected`; else a one-line summary (never a tensor dump)."""
    if not isinstance(actual, torch.Tensor):
        return f"got {type(actual).__name__}, expected a tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    rtol, atol = tolerance or TOLERANCES.get(actual.dtype, (0.0, 0.0))
    got, want = actual.detach().cpu().to(torch.float64), expected.detach().cpu().to(torch.float64)
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    worst = float((got - want).abs().nan_to_num(nan=float("inf")).max())
    return (f"{int(bad.sum())} of {bad.numel()} values differ ({actual.dtype}, rtol={rtol:g}, atol={atol:g}), "
            f"max abs diff {worst:.6g}, first at index {list(first)}: got {got[first].item():.6g}, "
            f"expected {want[first].item():.6g}")


RANDOM_SAMPLE = 256  # fewer values than this tell too little about a distribution: not judged


def distribution_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None when two samples of a random op look like one distribution: the same shape, means within five standard
    errors, spreads within a factor of 1.4 (loose: it catches a wrong distribution, not a subtle one). A sample of
    fewer than RANDOM_SAMPLE values is not judged."""
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    got, want = actual.detach().cpu().double().flatten(), expected.detach().cpu().double().flatten()
    if got.numel() < RANDOM_SAMPLE:
        return None
    spread = float(want.std())
    error = 5 * max(spread, float(got.std()), 1e-12) / got.numel() ** 0.5
    if abs(float(got.mean()) - float(want.mean())) > error:
        return f"mean {float(got.mean()):.6g}, not {float(want.mean()):.6g} (+- {error:.3g})"
    if spread > 0 and not 1 / 1.4 <= float(got.std()) / spread <= 1.4:
        return f"standard deviation {float(got.std()):.6g}, not {spread:.6g}"
    return None


def run(op: Op, call: Call, where: str):
    """The op on a CPU call: an error (torch's checks of custom_op included) names the kernel and the example."""
    try:
        return op(call)
    except Exception as error:
        raise CheckFailed(f"{op.kernel} on {where}: {type(error).__name__}: {error}", "kernel-raised") from error


def _example(op: Op, number: int, note: str = "") -> str:
    return f"{op.spec(f'.examples[{number}]')}{note}"


# --- registration ----------------------------------------------------------------------------------


def assert_registered(op: Op, dispatch_keys: Sequence[str], tags: Sequence[torch.Tag] = (),
                      side_effect: bool = False) -> None:
    """Kernels at `dispatch_keys`, exactly `tags`, the spec's schema (alias-set letters aside: custom_op infers
    a0, a1, ...), and for an op that returns nothing and mutates nothing the side-effect mark."""
    for key in dispatch_keys:
        device = {"PrivateUse1": "NPU", "CUDA": "CUDA"}.get(key, key)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.qualname, key), f"ops.py registers no {device} kernel"
    assert set(op.overload.tags) == set(tags), (
        f"the tags of the registration in ops.py are {sorted(map(str, op.overload.tags))}, the spec's "
        f"{sorted(map(str, tags))}")
    if op.schema:
        have = op.overload._schema
        assert _alias_sets_renamed(str(have)) == _alias_sets_renamed(str(torch._C.parse_schema(op.schema))), (
            f"torch registered {have}, but {op.field}.schema in opgen.yaml is {op.schema}: ops.py was edited by hand "
            "or generated wrong; regenerate it with `opgen new`")
    if side_effect:
        # torch.fx.node.has_side_effect registers into this set; there is no public way to read it
        assert op.overload in torch.fx.node._side_effectful_functions, (
            f"{op.overload} returns nothing and mutates nothing, but ops.py does not mark it side-effecting: "
            "dead-code elimination would drop every call")


def _alias_sets_renamed(schema: str) -> str:
    """The schema text with its alias sets named by order of appearance."""
    names: dict[str, str] = {}
    return re.sub(r"\((\w+)(!?)\)", lambda m: f"({names.setdefault(m.group(1), f's{len(names)}')}{m.group(2)})", schema)


def _parameters(names: Sequence[str], keyword: Sequence[str]) -> str:
    return "(" + ", ".join([*names, *(["*", *keyword] if keyword else [])]) + ")"


def assert_signature(function: Callable, op: Op) -> None:
    """A kernel or fake of yours still takes the schema's arguments (opgen never rewrites your files)."""
    path = function.__module__.replace(".", "/") + ".py"
    code = function.__code__
    positional = code.co_varnames[:code.co_argcount]
    keyword = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    have = _parameters(positional, keyword)
    want = _parameters([a.name for a in op.arguments if not a.kwarg_only],
                       [a.name for a in op.arguments if a.kwarg_only])
    assert have == want, (f"{path}: def {function.__name__}{have} no longer matches {op.field}.schema in opgen.yaml, "
                          f"which takes {want}: kept yours; update its signature")


# --- fake tensors ----------------------------------------------------------------------------------


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

    aot = aot_autograd(fw_compiler=inference_compiler)

    def backend(gm, example_inputs):
        graphs["dynamo"] = gm
        return aot(gm, example_inputs)

    torch.compiler.reset()
    compiled = torch.compile(lambda **kwargs: op.overload(**kwargs), backend=backend, fullgraph=True, dynamic=False)
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
    (tests/input_variants.py: the reference accepts it, the kernel runs), the fake function's outputs have the
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
        _assert_fake_follows(op, label, call, want, names)


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
_MAY_LEAVE_THE_SEMANTICS = ("scalar", "default", "dim", "size", "size-edge", "size-tile")


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


def _assert_fake_follows(op: Op, label: str, call: Call, want: list, names: list[str]) -> None:
    """The fake function's outputs on `call` have the shapes and dtypes `want` (the semantics) gives."""
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        try:
            fakes = tensors(op(tensor_map(lambda t: mode.from_tensor(t, static_shapes=True), call)))
        except Exception as error:
            raise CheckFailed(f"the fake function of {op.overload} raises on {op.field}.{label}, which the CPU kernel "
                              f"takes: {type(error).__name__}: {error}", "fake-raised") from error
    problem = metadata_mismatch("the fake function", f"{op.field}.{label}", fakes, want, names)
    if problem:
        kind = "fake-wrong-dtype" if ".dtype:" in problem else "fake-wrong-shape"
        raise CheckFailed(f"{problem} (the fake is generated from the spec: was ops.py edited?)", kind)


# --- the CPU kernel --------------------------------------------------------------------------------


def assert_expected(op: Op, calls: Sequence[Call], expected: Sequence[Expected]) -> None:
    """`expect:` of the examples against the CPU kernel (the only check independent of the kernel)."""
    problems, results = [], {}
    for item in expected:
        if item.example not in results:
            call = clone(calls[item.example])
            results[item.example] = (run(op, call, _example(op, item.example)), call)
        result, call = results[item.example]
        actual = _named_value(op, item.name, result, call)
        where = op.spec(f".examples[{item.example}].expect.{item.name}")
        if item.element is not None:
            if not isinstance(actual, (list, tuple)) or len(actual) != item.length:
                count = f"{len(actual)} tensors" if isinstance(actual, (list, tuple)) else type(actual).__name__
                problems.append(f"{where}: {count}, the spec expects {item.length}")
                continue
            actual, where = actual[item.element], f"{where}[{item.element}]"
        default = TOLERANCES.get(getattr(actual, "dtype", None), (0.0, 0.0))
        tolerance = (default[0] if item.rtol is None else item.rtol, default[1] if item.atol is None else item.atol)
        for row, want in (item.rows.items() if item.rows is not None else [(None, item.values)]):
            part = actual
            if row is not None:
                if not isinstance(actual, torch.Tensor) or actual.dim() == 0 or not -len(actual) <= row < len(actual):
                    problems.append(f"{where}.rows.{row}: no such row (shape {tuple(getattr(actual, 'shape', ()))})")
                    continue
                part = actual[row]
            problem = mismatch(part, torch.tensor(want, dtype=torch.float64), tolerance)
            if problem:
                problems.append(where + ("" if row is None else f".rows.{row}") + ": " + problem)
    if problems:
        raise CheckFailed(f"the CPU kernel ({op.kernel}) disagrees with expected values:\n" + "\n".join(problems),
                          "wrong-values")


def _named_value(op: Op, name: str, result, call: Call):
    """An output (by name) of `result`, or an argument of `call` after it."""
    if name in op.outputs and name not in call:
        index = op.outputs.index(name)
        return result if len(op.overload._schema.returns) == 1 else result[index]
    return call[name]


def assert_writes(op: Op, calls: Sequence[Call]) -> None:
    """Every argument the schema marks written is changed on some example, judged on the caller's own data and on
    its buffer filled with SENTINEL first (so that any write shows, and a write that only rearranges the buffer's
    own values shows on real data), in its own memory (no `set_` to other storage); no other tensor argument is ever
    changed, not even and back (its version counter stays)."""
    written, changed = op.written, set()
    for number, call in enumerate(calls):
        for sentinel in (True, False):
            call_copy = clone(call)
            if sentinel:
                for name in written:
                    tensor_map(lambda t: t.fill_(SENTINEL if t.dtype != torch.bool else True), call_copy[name])
            changed |= _written_in(op, number, call_copy, sentinel)
    never = [op.describe_argument(name) for name in written if name not in changed]
    if never:
        raise CheckFailed(
            f"{op.field}.schema in opgen.yaml marks {', '.join(never)} written (Tensor(a!)), but {op.kernel} changed "
            f"it on no example ({len(calls)} tried, on their own values and with the buffer filled with {SENTINEL}): "
            "the kernel misses the write, or the schema over-declares the mutation", "missing-write")


def _written_in(op: Op, number: int, call: Call, sentinel: bool) -> set[str]:
    """Run the op on `call`; the names of the written arguments it changed (an undeclared write fails)."""
    written = op.written
    before = clone(call)
    memory = {name: [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors(call[name])]
              for name in written}
    versions = {name: [t._version for t in tensors(value)] for name, value in call.items() if name not in written}
    run(op, call, _example(op, number, f" (written arguments filled with {SENTINEL})" if sentinel else ""))
    changed = set()
    for name, value in call.items():
        if all(same(a, b) for a, b in zip(tensors(value), tensors(before[name]), strict=True)):
            continue
        if name not in written:
            raise CheckFailed(
                f"{op.kernel} changed argument {name!r} in {op.field}.examples[{number}], but {op.field}.schema in "
                f"opgen.yaml does not mark it written: declare it `Tensor(a!) {name}`, or make the kernel leave "
                "it alone", "undeclared-mutation")
        changed.add(name)
    _assert_same_memory(op, number, call, memory, versions)
    return changed


def _assert_same_memory(op: Op, number: int, call: Call, memory: dict, versions: dict) -> None:
    for name, places in memory.items():
        now = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors(call[name])]
        if now != places:
            raise CheckFailed(f"{op.kernel} swapped the memory of {name!r} in {op.field}.examples[{number}] (set_, or "
                              "resize_ of the caller's tensor): the caller's buffer is not written, and a captured "
                              "graph keeps the old address; write into it in place", "storage-swapped")
    for name, before in versions.items():
        if [t._version for t in tensors(call[name])] != before:
            raise CheckFailed(f"{op.kernel} wrote argument {name!r} in {op.field}.examples[{number}] in place (and "
                              f"maybe restored it), but {op.field}.schema in opgen.yaml does not mark it written: "
                              f"declare it `Tensor(a!) {name}`, or compute on a copy", "undeclared-mutation")


# --- the independent oracle: the spec's `reference:` ------------------------------------------------


def assert_matches_reference(op: Op, examples: Callable[[int], list[Call]]) -> None:
    """The CPU kernel against the spec's `reference:` (the oracle) on every variant of every example (seeds, dtypes,
    sizes, values, dims, scalars, optional tensors, defaults: tests/input_variants.py): outputs and every written
    argument, all of it (an untouched row must stay as it was), NaN equal to NaN; a variant the reference refuses
    is no input of the op. Where the kernel and the reference disagree in a half-precision dtype, the reference
    computed in float64 (then cast) is asked too. Outputs of earlier calls must not change later (a reused
    workspace), and the op gives the reference's results when called from two threads at once and under another
    default dtype. A failure names each failing variant, the smallest failing input found and, where the spec may
    be what is wrong, the spec field to change."""
    if op.reference is None:
        skip(f"no `reference:` in {op.field} of opgen.yaml: nothing independent of the kernel to compare it with "
             "(add the op's reference implementation; docs/spec.md)")
    reference = op.seeded(lambda call: op.reference(**call))
    failing, kept, ran = [], [], 0
    for variant in variants(op, examples):
        outcome = _against_reference(op, reference, variant)
        if outcome is None:
            continue
        ran += 1
        actual, problems = outcome
        if problems:
            failing.append((variant, problems))
        kept.append((variant.label, actual, clone(actual)))
    assert ran, f"{op.field}.reference refused every example: check the examples in opgen.yaml"
    if failing:
        raised = all(problems[0].startswith(f"{op.kernel} fails on ") for _, problems in failing)
        raise CheckFailed(_reference_failure(op, reference, failing, ran),
                          "kernel-raised" if raised else "wrong-values")
    for label, actual, copy in kept:
        if not same_values(actual, copy):
            raise CheckFailed(f"{op.kernel} disagrees with {op.field}.reference in opgen.yaml "
                              f"(<package>/reference.py), the independent oracle: the outputs of {op.field}.{label} "
                              f"changed during later calls: {op.kernel} returns memory it reuses (a module-level "
                              "workspace or cache); return a new tensor each call", "wrong-values")
    _assert_no_shared_state(op, reference, examples)


def _against_reference(op: Op, reference: Callable, variant: Variant) -> tuple[Any, list[str]] | None:
    """(the kernel's result, the differences from the reference) on one variant; None when the reference refuses it."""
    reference_call, kernel_call = clone(variant.call), clone(variant.call)
    expected = _reference_result(reference, reference_call)
    if expected is _REFUSED:
        return None
    try:
        actual = op.seeded(op)(kernel_call)
    except Exception as error:  # noqa: BLE001  (reported with the other failing inputs)
        return None, [(f"{op.kernel} fails on {op.field}.{variant.label}, which {op.field}.reference accepts: "
                       f"{type(error).__name__}: {_one_line(error)}")]
    where = f"{op.field}.{variant.label}"
    got, want = _results(op, actual, kernel_call), _results(op, expected, reference_call)
    found = _differences(op, where, got, want, "the reference")
    if found and op.random:  # another way of drawing: compare what many draws of each look like
        found = _distribution_differences(op, where, (op, variant.call), (reference, variant.call), "the reference")
    elif found and _same_dtypes(got, want) and _float64_agrees(op, reference, variant.call, got):
        found = []
    return actual, found


def _same_dtypes(got: list, want: list) -> bool:
    return len(got) == len(want) and all(a.dtype == b.dtype for (_, a), (_, b) in zip(got, want, strict=True))


def _float64_agrees(op: Op, reference: Callable, call: Call, got: list) -> bool:
    """The reference computed on the call's floating tensors in float64, its results cast to the kernel's dtypes,
    agrees with `got`: the kernel is more exact than the reference in the call's own dtype, not wrong."""
    if not any(t.is_floating_point() and t.dtype != torch.float64 for t in tensors(call)):
        return False
    wide = tensor_map(lambda t: t.double() if t.is_floating_point() else t.clone(), call)
    expected = _reference_result(reference, wide)
    if expected is _REFUSED:
        return False
    want = _results(op, expected, wide)
    if len(want) != len(got):
        return False
    want = [(what, t.to(g.dtype) if t.is_floating_point() and g.is_floating_point() else t)
            for (what, t), (_, g) in zip(want, got, strict=True)]
    return not _differences(op, "", got, want, "")


def _one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""


def _reference_failure(op: Op, reference: Callable, failing: list, ran: int) -> str:
    """What a user reads when the kernel and the reference disagree: every failing variant (its first difference),
    the kinds of input that fail, the smallest failing input found, whether the kernel disagrees with itself, and
    what to change in the spec when such inputs are not the op's."""
    kinds = {}
    for variant, _ in failing:
        kinds[variant.kind] = kinds.get(variant.kind, 0) + 1
    lines = [f"{op.kernel} disagrees with {op.field}.reference in opgen.yaml (<package>/reference.py), the "
             f"independent oracle, on {len(failing)} of {ran} calls (by kind of input: "
             + ", ".join(f"{kind} {count}" for kind, count in kinds.items()) + "):"]
    for _variant, problems in failing[:8]:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        lines.append(f"  {problems[0]}{more}")
    if len(failing) > 8:
        lines.append(f"  ... and {len(failing) - 8} more calls")
    random = _nondeterministic(op, failing[0][0])
    if random:  # the cause of every difference: say it first
        return "\n".join([lines[0], *random, *lines[1:]])
    lines += _smallest_failure(op, reference, failing[0][0])
    hints = dict.fromkeys(variant.hint for variant, _ in failing if variant.hint)
    if hints and not any(variant.kind == "example" for variant, _ in failing):
        lines.append("if some of these inputs are not ones the op takes, say where its inputs live in opgen.yaml "
                     "(docs/spec.md, 'Inputs'): " + "; ".join(hints))
    return "\n".join(lines)


SHRINK_TRIES = 24  # calls the search for a smaller failing input makes at most


def _smallest_failure(op: Op, reference: Callable, variant: Variant) -> list[str]:
    """The smallest input like `variant` found to fail too (its sizes reduced one at a time, greedily), described."""
    current, tries, smaller = variant, 0, True
    while smaller and tries < SHRINK_TRIES:
        smaller = False
        for description, call in smaller_calls(op, current)[: SHRINK_TRIES - tries]:
            tries += 1
            candidate = replace(current, call=call, label=f"{current.label}, {description}")
            try:
                outcome = _against_reference(op, reference, candidate)
            except CheckFailed:
                continue
            if outcome is not None and outcome[1]:
                current, smaller = candidate, True
                break
    if current is variant:
        return []
    outcome = _against_reference(op, reference, current)
    return [f"smallest failing input found: {describe_call(current.call)}", f"  {outcome[1][0]}"]


def describe_call(call: Call) -> str:
    """`x: float16 (1, 1025), gamma: float16 (1025,), epsilon=1e-06`."""
    def one(value) -> str:
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            return "[" + ", ".join(one(v) for v in value) + "]"
        return repr(value)
    return ", ".join(f"{name}: {one(value)}" if tensors(value) else f"{name}={value!r}" for name, value in call.items())


def _nondeterministic(op: Op, variant: Variant) -> list[str]:
    """A line when the kernel gives other results on the same inputs (random numbers, or memory it never wrote)."""
    if op.random:
        return []
    first, second = clone(variant.call), clone(variant.call)
    try:
        a, b = _results(op, op(first), first), _results(op, op(second), second)
    except Exception:  # noqa: BLE001  (a kernel that raises is reported as such)
        return []
    if len(a) == len(b) and all(same(x, y) for (_, x), (_, y) in zip(a, b, strict=True)):
        return []
    return [(f"{op.kernel} gives different results when called twice on the same inputs ({op.field}.{variant.label}): "
             "it draws random numbers (declare `tags: [nondeterministic_seeded]` in "
             f"{op.field}: its tests then seed it and compare distributions), or returns memory it never wrote "
             "(torch.empty without a write)")]


def _assert_no_shared_state(op: Op, reference: Callable, examples: Callable[[int], list[Call]]) -> None:
    """Example 0 (four seeds) from two threads at once, run in lockstep (`_Lockstep`: the threads take turns line by
    line through the kernel's own code), and under another default dtype: each result is the reference's. A kernel
    keeping state across calls (a module-level scratch buffer reused for an intermediate) or allocating with the
    default dtype fails, naming how to fix it."""
    if op.random:
        return
    pairs = []
    for seed in range(4):
        call = examples(seed)[0]
        reference_call = clone(call)
        expected = _reference_result(reference, reference_call)
        if expected is not _REFUSED:
            pairs.append((seed, call, _results(op, expected, reference_call)))
    if not pairs:
        return
    wrong: list[str] = []
    lockstep = _Lockstep()

    def caller(me: int) -> None:
        sys.settrace(lockstep.tracer(me))
        try:
            for seed, call, want in pairs[me::2] or pairs[:1]:
                copy = clone(call)
                result = op(copy)
                wrong.extend(_differences(op, f"{op.field}.examples[0], seed {seed}, in thread {me}",
                                          _results(op, result, copy), want, "the reference")[:1])
        finally:
            sys.settrace(None)
            lockstep.finish(me)

    threads = [threading.Thread(target=caller, args=(me,)) for me in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if wrong:
        raise CheckFailed(f"{op.kernel} gives wrong results when called from two threads at once: {wrong[0]}; it keeps "
                          "state across calls (a module-level scratch buffer or cache, reused for an intermediate): "
                          "allocate what a call needs in that call", "wrong-values")
    seed, call, want = pairs[0]
    default = torch.get_default_dtype()
    other = torch.float64 if default != torch.float64 else torch.float32
    copy = clone(call)
    torch.set_default_dtype(other)
    try:
        got = _results(op, op(copy), copy)
    finally:
        torch.set_default_dtype(default)
    found = _differences(op, f"{op.field}.examples[0] under torch.set_default_dtype({other})", got, want,
                         "the reference")
    if found:
        raise CheckFailed(f"{op.kernel} depends on the global default dtype: {found[0]}; it allocates without a dtype "
                          "(torch.zeros(n), torch.tensor(1.0), torch.arange(0.0, n)): give the inputs' dtype "
                          "(dtype=x.dtype)", "wrong-values")


class _Lockstep:
    """Two threads taking turns, one line of code outside torch, the standard library and these test modules at a
    time (a trace function): a kernel's lines then interleave the same way on every run, so state shared between
    two calls shows every time, not once in a while. A thread that does not come back within a second (blocked
    elsewhere) gives up its turn: nothing waits forever."""

    def __init__(self) -> None:
        self.turn, self.done = 0, set()
        self.condition = threading.Condition()

    def step(self, me: int) -> None:
        with self.condition:
            while self.turn != me and 1 - me not in self.done:
                if not self.condition.wait(timeout=1.0):
                    break
            self.turn = 1 - me
            self.condition.notify_all()

    def finish(self, me: int) -> None:
        with self.condition:
            self.done.add(me)
            self.condition.notify_all()

    def tracer(self, me: int) -> Callable:
        def line(_frame, event, _arg):
            if event == "line":
                self.step(me)
            return line

        def call(frame, event, _arg):
            return line if event == "call" and _own_code(frame.f_code.co_filename) else None
        return call


_NOT_OWN = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))
_STANDARD_LIBRARY = os.path.dirname(os.__file__)


def _own_code(filename: str) -> bool:
    """A file of the op's package (its kernels), not torch's, Python's or these test modules'."""
    if filename.startswith(_NOT_OWN) or filename.startswith("<"):
        return False
    return not filename.startswith(_STANDARD_LIBRARY) or "site-packages" in filename


_REFUSED = object()


def _reference_result(reference: Callable, call: Call):
    """The reference's result, or _REFUSED: the reference defines what inputs the op takes."""
    try:
        return reference(call)
    except Exception:  # noqa: BLE001
        return _REFUSED


def _results(op: Op, result, call: Call) -> list[tuple[str, torch.Tensor]]:
    """(what, tensor) of each output of a call and each argument it wrote."""
    found = [(op.output_field(i), t) for i, t in enumerate(tensors(result))]
    return found + [(f"argument {name!r} (written)", t) for name in op.written for t in tensors(call[name])]


def _differences(op: Op, where: str, got: list, want: list, other: str) -> list[str]:
    """How the tensors of `got` differ from those of `want` (`other` names where `want` comes from)."""
    if len(got) != len(want):
        return [f"{where}: {len(got)} tensors out, {other} {len(want)}"]
    found = []
    for (what, a), (_, b) in zip(got, want, strict=True):
        problem = (f"dtype {a.dtype}, {other} gives {b.dtype}" if a.dtype != b.dtype else
                   mismatch(a, b, op.tolerance(a.dtype)))
        if problem:
            found.append(f"{where}: {what}: {problem}")
    return found


RANDOM_DRAWS = 16  # seeds pooled when a random op's kernel draws otherwise than what it is compared with


def _distribution_differences(op: Op, where: str, first: tuple[Callable, Call], second: tuple[Callable, Call],
                              other: str) -> list[str]:
    """A random op: each output and written argument of two (function, call) pairs, pooled over RANDOM_DRAWS seeds,
    must look like one distribution (`distribution_mismatch`)."""
    pools: list[list] = [[], []]
    for seed in range(RANDOM_DRAWS):
        for pool, (fn, call) in zip(pools, (first, second), strict=True):
            torch.manual_seed(seed)
            copy = clone(call)
            pool.append(_results(op, fn(copy), copy))
    found = []
    for index, (what, _) in enumerate(pools[0][0]):
        got = torch.cat([draw[index][1].detach().flatten().double() for draw in pools[0]])
        want = torch.cat([draw[index][1].detach().flatten().double() for draw in pools[1]])
        problem = distribution_mismatch(got, want)
        if problem:
            found.append(f"{where}: {what} ({RANDOM_DRAWS} draws): {problem}, unlike {other}'s")
    return found


def opcheck(op: Op, calls: Sequence[Call], test_utils: Sequence[str] | None = None) -> None:
    """torch.library.opcheck on every call, its failure saying where to look (`test_utils`: default, all of
    OPCHECK_UTILS that apply to the op)."""
    test_utils = test_utils or (OPCHECK_UTILS_DYNAMIC if op.dynamic else OPCHECK_UTILS)
    for call in calls:
        utils = test_utils
        if any(t.is_floating_point() and bool(t.isnan().any()) for t in tensors(op.seeded(op)(clone(call)))):
            # opcheck compares the compiled outputs with eager ones with NaN unequal to NaN: the other tiers
            # compare them here (equal_nan)
            utils = [name for name in test_utils if not name.startswith("test_aot_dispatch")]
        try:
            torch.library.opcheck(op.overload, (), call, test_utils=utils)
        except Exception as error:
            raise AssertionError(f"{error}\n(opcheck of {op.overload}: check the CPU kernel {op.kernel} against the "
                                 f"fake function generated from opgen.yaml {op.field}.outputs and {op.field}.schema)"
                                 ) from error


def assert_compiled_matches_eager(op: Op, calls: Sequence[Call]) -> None:
    """torch.compile(backend="aot_eager", fullgraph=True): outputs and mutated inputs equal eager; a tagged op
    returns its mutated argument (the very tensor in eager, its new value when compiled)."""
    torch.compiler.reset()
    compiled = op.seeded(torch.compile(lambda **kwargs: op.overload(**kwargs), backend="aot_eager", fullgraph=True,
                                       dynamic=False))
    for call in calls:
        eager_call = clone(call)
        returned = op.seeded(op)(eager_call)
        expected = clone(returned)  # before the compiled call: a kernel returning reused memory must not hide
        with outputs_are_new_memory():
            actual = compiled(**call)
        torch.testing.assert_close(actual, expected, equal_nan=True)
        torch.testing.assert_close(tensors(call), tensors(eager_call), equal_nan=True)  # inputs mutated the same way
        assert len(tensors(actual)) == len(op.returned) or not op.returned
        for output, eager_output, name in zip(tensors(actual), tensors(returned), op.returned, strict=False):
            assert eager_output is eager_call[name], f"eager output is not argument {name!r}"
            torch.testing.assert_close(output, call[name], equal_nan=True)


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """The same values, rank >= 2 transposed in memory, rank 1 every other element of a wider tensor."""
    if t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if t.dim() == 1 and t.numel() > 1:
        wide = t.new_zeros(2 * t.numel())
        wide[::2] = t
        return wide[::2]
    return t


def _permuted(t: torch.Tensor) -> torch.Tensor:
    """The same values with every dim of rank >= 3 reversed in memory (not only the last two)."""
    if t.dim() < 3:
        return t
    order = tuple(reversed(range(t.dim())))
    return t.permute(order).contiguous().permute(order)


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t


def _expanded(t: torch.Tensor) -> torch.Tensor:
    """A stride-0 tensor (row 0 repeated), for a floating input the op only reads."""
    return t[:1].expand(t.shape) if t.is_floating_point() and t.dim() and t.shape[0] > 1 else t


def non_contiguous(call: Call, keep: Sequence[str] = ()) -> Call:
    """The same values in non-contiguous tensors (`_transposed`); `keep`: arguments left as they are."""
    return {name: value if name in keep else tensor_map(_transposed, value) for name, value in call.items()}


def layouts(op: Op, call: Call) -> list[tuple[str, Call, Call]]:
    """(label, the call in that layout, the same values contiguous) for each layout some input of `call` can take:
    transposed, permuted (rank >= 3), channels_last (4-D), expanded (stride 0, floating inputs the op only reads).
    out= tensors stay as they are (Dynamo refuses non-contiguous ones), and so do written arguments declared
    contiguous (the op refuses other layouts of them: `assert_refuses_non_contiguous`)."""
    keep = _kept_contiguous(op)
    found = []
    for label, change, only_read in (("transposed", _transposed, False), ("permuted", _permuted, False),
                                     ("channels_last", _channels_last, False), ("expanded", _expanded, True)):
        skipped = keep | (set(op.written) if only_read else set())
        changed = {name: value if name in skipped else tensor_map(change, value) for name, value in call.items()}
        if any(a is not b for name in call for a, b in zip(tensors(changed[name]), tensors(call[name]), strict=True)):
            dense = tensor_map(lambda t: t.contiguous(), changed)
            found.append((label, changed, dense))
    return found


def _kept_contiguous(op: Op) -> set[str]:
    """Arguments the layout tier leaves contiguous: out= tensors, and written arguments declared contiguous."""
    return set(op.returned if op.tag == "out" else ()) | {name for name in op.contiguous if name in op.written}


def assert_refuses_non_contiguous(op: Op, call: Call) -> None:
    """Each written argument `ops[i].contiguous` lists is refused, with an error saying so, when it is not
    contiguous: the kernel writes its memory as a dense block (a KV cache through `.view(-1, d)`), as real cache
    kernels require, and the registration checks it rather than write the wrong elements."""
    for name in sorted(_kept_contiguous(op) - set(op.returned)):
        strided = {**clone(call), name: tensor_map(_transposed, clone(call[name]))}
        if all(t.is_contiguous() for t in tensors(strided[name])):
            continue
        try:
            op(strided)
        except Exception as error:  # torch._check raises RuntimeError; a kernel may raise others
            if "contiguous" in str(error) and name in str(error):  # not torch's own `view` error, say
                continue
            raise CheckFailed(f"{op.field}.contiguous in opgen.yaml lists {name!r}, which the op writes, so a "
                              f"non-contiguous {name!r} must be refused with an error saying so, but the op raised "
                              f"{type(error).__name__}: {error}", "kernel-needs-contiguous") from error
        raise CheckFailed(f"{op.field}.contiguous in opgen.yaml lists {name!r}, which the op writes, so a "
                          f"non-contiguous {name!r} must be refused, but the op took a transposed one: regenerate "
                          "ops.py (its registration checks it), or make the kernel check it", "kernel-reads-layout")


def assert_non_contiguous_inputs(op: Op, call: Call) -> None:
    """The CPU kernel on inputs in other layouts (same values) gives what it gives on contiguous ones, outputs in
    the strides the fake says (contiguous unless `like:` in opgen.yaml keeps an input's layout); opcheck and
    compiled == eager on the transposed layout. Written arguments declared contiguous must be refused in other
    layouts instead."""
    assert_refuses_non_contiguous(op, call)
    for label, strided, dense in layouts(op, call):
        expected_call = clone(dense)
        expected = op.seeded(op)(expected_call)
        actual_call = {name: value if name not in op.written else clone(value) for name, value in strided.items()}
        try:
            actual = op.seeded(op)(actual_call)
        except Exception as error:
            raise CheckFailed(_strided_failure(op, label, strided, dense, error), "kernel-needs-contiguous") from error
        where = f"{op.field}.examples[0] in {label} layout"
        found = _differences(op, where, _results(op, actual, actual_call), _results(op, expected, expected_call),
                             "contiguous inputs")
        if found and op.random:  # draws follow memory order: compare what many draws look like
            found = _distribution_differences(op, where, (op, strided), (op, dense), "contiguous inputs")
        if found:
            raise CheckFailed(f"{op.kernel} gives other values for {label} inputs than for contiguous ones: "
                              f"{found[0]}; it reads memory in storage order (view, data_ptr, as_strided): follow "
                              f"the strides, or declare the inputs it needs contiguous in {op.field}.contiguous",
                              "kernel-reads-layout")
        _assert_fake_strides(op, label, strided, actual)
    transposed = non_contiguous(call, keep=_kept_contiguous(op))
    opcheck(op, [transposed])
    assert_compiled_matches_eager(op, [transposed])


def _strided_failure(op: Op, label: str, strided: Call, dense: Call, error: Exception) -> str:
    """The kernel raised on a layout: find the one argument to blame, and say both fixes."""
    for name in strided:
        one = {**dense, name: strided[name]}
        try:
            op(clone(one) if name in op.written else one)
        except Exception:  # noqa: BLE001  (this argument alone makes it fail)
            fix = ("write through a contiguous copy and copy_ it back (the caller's tensor must be written)"
                   if name in op.written else f"declare `contiguous: [{name}]` in {op.field} so that the generated "
                   "registration passes it contiguous")
            return (f"{op.kernel} fails on a {label} {name!r} ({type(error).__name__}: {error}): make the kernel take "
                    f"any strides (e.g. .reshape instead of .view), or {fix}")
    return f"{op.kernel} fails on {label} inputs: {type(error).__name__}: {error}"


def _significant_strides(t: torch.Tensor) -> tuple:
    return tuple(stride if size > 1 else None for size, stride in zip(t.shape, t.stride(), strict=True))


def _assert_fake_strides(op: Op, label: str, call: Call, actual) -> None:
    """The fake function's output strides on these inputs are the kernel's (what torch.compile plans with); a
    data-dependent output size has no strides to compare before it runs."""
    if op.dynamic:
        return
    with FakeTensorMode() as mode:
        fakes = tensor_map(mode.from_tensor, call)
        predicted = op(fakes)
    for index, (fake, real) in enumerate(zip(tensors(predicted), tensors(actual), strict=True)):
        if fake.numel() and _significant_strides(fake) != _significant_strides(real):
            where = (f"opgen.yaml: {op.output_field(index)}: on {label} inputs the fake function gives strides "
                     f"{fake.stride()}, the CPU kernel ({op.kernel}) returns {real.stride()}")
            if real.is_contiguous() and not fake.is_contiguous():  # `like:` on an op that does not keep layouts
                fix = ("the spec gives it an input's layout (`like:`), the kernel a contiguous tensor, as ops that do "
                       "not compute element by element (a softmax, a norm, a matmul) return: declare its shape and "
                       "dtype instead (`{shape: \"x.shape\", dtype: x}` for `like: x`), which is contiguous; or make "
                       "the kernel keep the input's layout")
            else:
                fix = ("either declare the layout in the spec (`like: <input>` keeps that input's strides; without it "
                       "the output is contiguous) or make the kernel return the declared layout (.contiguous())")
            raise CheckFailed(f"{where}: {fix}", "fake-wrong-strides")


def assert_compiles_once(op: Op, calls: Sequence[Call], derived: bool) -> None:
    """torch.compile(dynamic=True) makes ONE graph for calls of two sizes (the fake specialises on no size), and
    each compiled result (mutated inputs included) equals eager. `derived`: opgen made the second call.

    Sizes that differ between the calls are never 0 or 1 (torch.compile specialises those; opgen picks the calls
    so), and duck sizing is off (it would give two sizes equal in one call one symbol, and compile again when
    they differ in the other): a second graph is then the fake's doing. (The backend may be called more than once
    for the first call: Dynamo can restart its analysis.)"""
    if derived:
        try:
            op(clone(calls[1]))
        except (RuntimeError, IndexError, ValueError, TypeError) as error:  # torch's errors on mismatched sizes
            skip(f"opgen doubled the last size of {op.field}.examples[0], but the CPU kernel refuses that call "
                 f"({type(error).__name__}): add an example of other sizes (none 0 or 1) to {op.field}.examples")
    torch.compiler.reset()
    graphs = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def backend(gm, example_inputs):
        graphs.append(gm)
        return aot_eager(gm, example_inputs)

    compiled = op.seeded(torch.compile(lambda **kwargs: op.overload(**kwargs), backend=backend, fullgraph=True,
                                       dynamic=True))
    compiled_first = None
    with symbolic_shapes_config.patch(use_duck_shape=False):  # no public switch: the config `dynamic=True` reads
        for call in calls:
            eager_call = clone(call)
            with outputs_are_new_memory():
                actual = compiled(**call)
            torch.testing.assert_close(actual, op.seeded(op)(eager_call), equal_nan=True)
            torch.testing.assert_close(tensors(call), tensors(eager_call), equal_nan=True)
            compiled_first = len(graphs) if compiled_first is None else compiled_first
    sizes = [[tuple(t.shape) for t in tensors(call)] for call in calls]
    described = (f"it is generated from {op.field}.outputs in opgen.yaml" if op.outputs and not op.returned
                 else "for this op it is torch's own (a tagged op) or hand-written")
    assert len(graphs) == compiled_first, (
        f"torch.compile(dynamic=True) compiled again for the second of the sizes {sizes}: the fake function "
        f"specialises on a size (int(size), a Python comparison of sizes, ...); {described}")


# --- autograd (`autograd:` in opgen.yaml) -----------------------------------------------------------


def _floating(call: Call) -> bool:
    return any(t.is_floating_point() for t in tensors(call))


def _differentiable(op: Op, calls: Sequence[Call]) -> list[Call]:
    found = [call for call in calls if _floating(call)]
    if not found:
        skip(f"no example of {op.qualname} has a floating-point tensor input, so there is nothing to differentiate: "
             f"add one to {op.field}.examples")
    return found


def opcheck_with_requires_grad(op: Op, calls: Sequence[Call]) -> None:
    """opcheck with requires_grad=True on every floating-point tensor (fresh leaves): the Autograd registration."""
    opcheck(op, [tensor_map(lambda t: t.detach().clone().requires_grad_(t.is_floating_point()), call)
                 for call in _differentiable(op, calls)])


GRADCHECK_ELEMENTS = 4096  # the most floating elements of a variant gradcheck takes (it costs a call per element)


def gradcheck(op: Op, examples: Callable[[int], list[Call]] | Sequence[Call]) -> None:
    """torch.autograd.gradcheck of the backward formula in float64, every floating-point tensor an input, on every
    example and (`examples` the examples function) on its variants with a defaulted scalar moved or a size changed
    (tests/input_variants.py) that the kernel takes: a formula ignoring a scalar, or right at one size only, fails."""
    if callable(examples):
        calls = [(f"examples[{number}]", call, False) for number, call in enumerate(examples(0))]
        calls += [(variant.label, variant.call, True) for variant in variants(op, examples)
                  if variant.kind in ("default", "size", "size-edge") and _small_and_nonempty(variant.call)]
    else:
        calls = [(f"examples[{number}]", call, False) for number, call in enumerate(examples)]
    differentiable = {id(call) for call in _differentiable(op, [call for _, call, _ in calls])}
    for label, call, variant in calls:
        if id(call) not in differentiable:
            continue
        if variant and not _takes(op, call):  # not an input of the op: the oracle tier judges that
            continue
        try:
            torch.autograd.gradcheck(*_gradcheck_inputs(op, call))
        except GradcheckError as error:
            raise CheckFailed(f"the backward formula of {op.field}.autograd in opgen.yaml disagrees with finite "
                              f"differences on {op.field}.{label}: {error}", "wrong-gradient") from error


def _takes(op: Op, call: Call) -> bool:
    """The CPU kernel runs on `call` without raising."""
    try:
        op(clone(call))
    except Exception:  # noqa: BLE001  (any error: the call is not one the op takes)
        return False
    return True


def _small_and_nonempty(call: Call) -> bool:
    floating = [t for t in tensors(call) if t.is_floating_point()]
    return all(t.numel() for t in tensors(call)) and sum(t.numel() for t in floating) <= GRADCHECK_ELEMENTS


def _gradcheck_inputs(op: Op, call: Call) -> tuple[Callable, tuple]:
    """(function of the floating tensors, those tensors in float64 requiring grad) for torch.autograd.gradcheck."""
    # (argument, position in its list or None): where each differentiated tensor goes
    slots = [(name, None) for name, value in call.items()
             if isinstance(value, torch.Tensor) and value.is_floating_point()]
    slots += [(name, position) for name, value in call.items() if isinstance(value, (list, tuple))
              for position, item in enumerate(value) if isinstance(item, torch.Tensor) and item.is_floating_point()]

    def fn(*inputs):
        values = {name: list(value) if isinstance(value, (list, tuple)) else value for name, value in call.items()}
        for (name, position), value in zip(slots, inputs, strict=True):
            if position is None:
                values[name] = value
            else:
                values[name][position] = value
        return op(values)

    inputs = tuple((call[name] if position is None else call[name][position]).detach().to(torch.float64)
                   .requires_grad_() for name, position in slots)
    return fn, inputs


# --- capture & replay ------------------------------------------------------------------------------


def npu_unavailable() -> str | None:
    """Why npugraph_ex cannot capture on this machine, or None."""
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return "no NPU: torch_npu not importable"
    if not torch.npu.is_available():
        return "no NPU: torch_npu is installed but torch.npu.is_available() is False"
    return None


def cuda_unavailable() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA: torch.cuda.is_available() is False"
    return None


def _captured(group: str, prefix: str) -> int:
    return sum(count for key, count in torch._dynamo.utils.counters[group].items() if key.startswith(prefix))


def _assert_matches_reference(op: Op, actual, reference, what: str, device: str) -> None:
    """The device kernel's tensors, on `device`, against the reference's (run on CPU), per-dtype tolerances. The
    device is checked before anything moves to CPU for the comparison: an output left on CPU shows."""
    got_all, want_all = tensors(actual), tensors(reference)
    assert len(got_all) == len(want_all), f"{what}: {len(got_all)} tensors, the reference gives {len(want_all)}"
    for index, (got, want) in enumerate(zip(got_all, want_all, strict=True)):
        assert got.device.type == device, (
            f"{what} {index} is on {got.device}, not on {device}: the kernel allocates it on the wrong device")
        assert got.dtype == want.dtype, f"{what} {index}: dtype {got.dtype}, the reference gives {want.dtype}"
        problem = distribution_mismatch(got, want) if op.random else mismatch(got, want, op.tolerance(got.dtype))
        assert problem is None, f"{what} {index} differs from the reference's: {problem}"


def _calls_with_reused_buffers(op: Op, make_call: Callable[[int], Call], seeds: Sequence[int],
                               on_first: Callable[[torch.Tensor], None] | None = None) -> Iterator[Call]:
    """A call per seed; every written argument is the same buffer at every call, refilled with the seed's values
    (as a captured graph needs). `on_first(buffer)` runs for each buffer when it is first seen."""
    buffers: dict[str, Any] = {}
    for seed in seeds:
        call = make_call(seed)
        for name in op.written:
            if name in buffers:
                copy_into(buffers[name], call[name])
                call[name] = buffers[name]
            else:
                buffers[name] = call[name]
                if on_first is not None:
                    tensor_map(on_first, buffers[name])
        yield call


def assert_capture_replay(op: Op, make_call: Callable[[int], Call], device: str, **compile_options) -> None:
    """Call 1 captures (then replays), calls 2 and 3 replay with new values; written buffers are reused.
    Outputs and written buffers are compared with the spec's reference (else the CPU kernel) on the same inputs."""
    torch.compiler.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(lambda **kwargs: op.overload(**kwargs), fullgraph=True, dynamic=False, **compile_options)
    # on CUDA, as a user must: else Inductor skips CUDA graphs for a mutated input
    static = torch._dynamo.mark_static_address if device == "cuda" else None

    def on_device(seed: int) -> Call:
        return tensor_map(lambda t: t.to(device), make_call(seed))

    captured_first = None
    with torch.no_grad():
        for seed, call in enumerate(_calls_with_reused_buffers(op, on_device, (0, 1, 2), static)):
            cpu_call = tensor_map(lambda t: t.to("cpu"), call)  # copies
            expected = op.reference(**cpu_call) if op.reference is not None else op(cpu_call)
            with outputs_are_new_memory():
                actual = clone(compiled(**call))  # the next replay overwrites graph outputs
            _assert_matches_reference(op, actual, expected, f"{device} call {seed}: output", device)
            for name in op.written:
                _assert_matches_reference(op, call[name], cpu_call[name],
                                          f"{device} call {seed}: mutated argument {name!r}, tensor", device)
            if device == "npu":
                captured = _captured("npugraph_ex", "captured_")
                if captured_first is None:
                    captured_first = captured
                    assert captured >= 1, "npugraph_ex captured no graph (eager fallback?)"
                assert captured == captured_first, "a replay recaptured the graph"
                assert _captured("npugraph_ex", "recapture_due_to_mutated_input_change") == 0
    if device == "cuda":
        assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0, "CUDA graphs were skipped"


def npu_graph_cpu():
    """tests/npu_graph_cpu.py, the NPU graph emulation (loaded by tests/npugraph_ex_cpu.py)."""
    import npugraph_ex_cpu as loader

    return loader.emulation_module()


def npugraph_ex_cpu(capture: bool = False):
    """tests/npugraph_ex_cpu.py, which loads npugraph_ex on CPU; skips (naming the fetch command) when it cannot.
    `capture`: for capture and replay on the CPU emulation (skipped where a real NPU is)."""
    import npugraph_ex_cpu as loader

    reason = loader.unavailable(capture)
    if reason is not None:
        skip(reason)
    return loader


def leftover_copies(graph: torch.fx.GraphModule, overload, written: Sequence[str]) -> list[torch.fx.Node]:
    """Nodes that functionalize or copy a caller's buffer the graph mutates: a functionalized call, a copy_ into a
    graph input, a clone of a mutated graph input. (A clone of an input the graph does not mutate, e.g. to mutate
    a private copy, is correct and not listed.) `written`: the arguments of `overload` it writes."""
    nodes = [n for n in graph.graph.nodes if n.op == "call_function"]
    inputs = {n for n in graph.graph.nodes if n.op == "placeholder"}
    mutated = {n.args[0] for n in nodes if n.target is torch.ops.aten.copy_.default and n.args[0] in inputs}
    for node in (n for n in nodes if n.target is overload):
        mutated |= {a for a in op_arguments(node, written) if a in inputs}
    copies = (torch.ops.aten.copy_.default, torch.ops.aten.copy.default, torch.ops.aten.clone.default)
    return [n for n in nodes if n.target in (auto_functionalized, auto_functionalized_v2)
            or (n.target in copies and any(a in mutated for a in n.all_input_nodes))]


def op_arguments(node: torch.fx.Node, names: Sequence[str]) -> list[torch.fx.Node]:
    """The graph nodes a call of an op passes for the arguments `names` (by keyword, or by the schema's position);
    a list argument (`Tensor(a!)[]`) gives each of its tensors."""
    positions = {a.name: i for i, a in enumerate(node.target._schema.arguments)}
    found = []
    for name in names:
        position = positions[name]
        arg = node.kwargs[name] if name in node.kwargs else node.args[position] if position < len(node.args) else None
        found += [a for a in (arg if isinstance(arg, (list, tuple)) else [arg]) if isinstance(a, torch.fx.Node)]
    return found


def _assert_outputs_are_what_the_graph_says(op: Op, graph: torch.fx.GraphModule, outputs, call: Call) -> None:
    """Shapes and dtypes are the fake function's (npugraph_ex plans with them); no output is an input's memory
    unless the op declares it (a tagged op), because npugraph_ex treats outputs as its own buffers."""
    output = next(n for n in graph.graph.nodes if n.op == "output")
    fakes = [n.meta.get("val") for n in _nodes(output.args)]
    inputs = {t.untyped_storage().data_ptr(): index for index, t in enumerate(tensors(call)) if t.numel()}
    for index, (fake, real) in enumerate(zip(fakes, tensors(outputs), strict=False)):
        if isinstance(fake, torch.Tensor) and (tuple(fake.shape), fake.dtype) != (tuple(real.shape), real.dtype):
            raise CheckFailed(f"output {index}: the fake function says {tuple(fake.shape)} {fake.dtype}, the kernel "
                              f"returned {tuple(real.shape)} {real.dtype}", "fake-wrong-metadata")
        aliased = inputs.get(real.untyped_storage().data_ptr()) if not op.tag and real.numel() else None
        if aliased is not None:
            raise CheckFailed(f"output {index} is the memory of input tensor {aliased}: the kernel returns (a view of) "
                              "an argument while the schema promises a new tensor; return a clone, or drop the return",
                              "view-return")


def assert_npugraph_ex_compiles_on_cpu(op: Op, make_call: Callable[[int], Call], fn: Callable | None = None,
                                       options: dict | None = None) -> None:
    """npugraph_ex's own backend on CPU (fullgraph, static shapes), three calls with new values and reused written
    buffers, each compared with eager (outputs and every input); one graph, the op in it, called in place.

    `fn` (default: the op itself, called with the call's arguments by name) and `options` (CompilerConfig fields)
    exist for opgen's own tests."""
    loader = npugraph_ex_cpu()
    direct = fn is None
    fn = fn or (lambda **kwargs: op.overload(**kwargs))
    torch.compiler.reset()
    with loader.Session() as session, torch.no_grad():
        compiled = op.seeded(torch.compile(fn, backend=session.backend(**(options or {})), fullgraph=True,
                                           dynamic=False))
        for seed, call in enumerate(_calls_with_reused_buffers(op, make_call, (0, 1, 2))):
            eager_call = clone(call)
            try:
                expected = op.seeded(fn)(**eager_call)
            except NotImplementedError as error:
                if "no CPU reference kernel yet" in str(error):
                    skip(str(error))
                raise
            with outputs_are_new_memory():
                actual = compiled(**call)
            torch.testing.assert_close(actual, expected, equal_nan=True)
            for index, (value, eager_value) in enumerate(zip(tensors(call), tensors(eager_call), strict=True)):
                if not same(value, eager_value):
                    raise CheckFailed(
                        f"input tensor {index} after the compiled call differs from eager (an argument the kernel "
                        "writes but the schema does not mark Tensor(a!) is written into npugraph_ex's private input "
                        f"copy): {mismatch(value, eager_value)}", "npugraph_ex-private-input-copy")
            if seed == 0:
                if not session.graphs:
                    raise CheckFailed("npugraph_ex handed no graph to capture", "npugraph_ex-no-graph")
                graph = session.graphs[0]
                _assert_outputs_are_what_the_graph_says(op, graph, actual, call)
        assert session.runs == 3, f"npugraph_ex ran {session.runs} of 3 calls through its graph"
        assert len(session.graphs) == 1, f"npugraph_ex compiled {len(session.graphs)} graphs for 3 calls, not 1"
    if op.overload not in [n.target for n in graph.graph.nodes]:
        raise CheckFailed(f"{op.overload} is not in the graph npugraph_ex captures:\n{graph.code}",
                          "npugraph_ex-op-missing")
    leftovers = leftover_copies(graph, op.overload, op.written if direct else ())
    where = "".join(f"\n  {n.format_node()}" for n in leftovers)
    if leftovers and op.tag in KNOWN_COPIES:
        xfail(f"{KNOWN_COPIES[op.tag]}:{where}")
    if leftovers:
        raise CheckFailed(f"npugraph_ex left copies of buffers the op mutates, paid at every replay:{where}\n"
                          f"{graph.code}", "npugraph_ex-leftover-copy")
    if direct:
        for node in (n for n in graph.graph.nodes if n.target is op.overload):
            for name in op.written:
                for arg in op_arguments(node, (name,)):
                    assert arg.op == "placeholder", (
                        f"{op.overload} mutates {arg}, not the caller's argument {name!r}:\n{graph.code}")


# --- capture & replay on CPU: npugraph_ex's own AclGraph over an emulated NPU graph ----------------------------

# What to do about each capture error of tests/npu_graph_cpu.py (CaptureError.kind)
CAPTURE_FIXES = {
    "host-read": "keep the value on the device: compute with tensors (torch.where(condition, a, b) instead of an `if`, "
                 "a 0-d tensor instead of a Python number), and check the inputs before calling the op, not in its "
                 "kernel",
    "host-copy": "keep the data on the device: index with tensors instead of Python lists; what only the host can do "
                 "belongs outside the op",
    "dynamic-shape": "a captured graph fixes every size: give the output a static upper bound (pad it and return a "
                     "count tensor), or keep the data-dependent part out of the captured graph",
    "synchronize": "remove the synchronize: a captured graph is one stream of device tasks that nothing on the host "
                   "waits for",
    "stream-sync": "order streams with events on the device (stream.wait_stream(other), event.record() then "
                   "stream.wait_event(event)), never by the host waiting: the kernel may run on a side stream of a "
                   "multi-stream scope, where a host wait breaks the capture and the overlap",
}
# CheckFailed.kind of each capture error (opgen check's signature)
CAPTURE_KINDS = {"stream-sync": "stream-misuse"}
ALLOW_RANDOM = "OPGEN_ALLOW_RANDOM_IN_CAPTURE"  # =1: random-number ops in a captured kernel are a warning
RANDOM_IN_CAPTURE = ("npugraph_ex does not support random-number ops in capture (its documented constraint; torch-npu "
                     "2.13.0 registers generator state during capture, so a replay draws new numbers, never eager's)")


def _shown(where: str) -> str:
    """A kernel's "file:line", relative to the working directory when it is below it."""
    import os

    path, _, line = where.rpartition(":")
    relative = os.path.relpath(path) if path else path
    return f"{relative if not relative.startswith('..') else path}:{line}"


class _CaptureRun:
    """One op through npugraph_ex's AclGraph on the emulated NPU graph: what the capture tier's steps share."""

    def __init__(self, op: Op, session, compiled: Callable, reference: Callable, allow_random: bool) -> None:
        self.op, self.emulation, self.compiled, self.reference = op, session.emulation, compiled, reference
        self.allow_random, self.capture_error = allow_random, session.emulation.CaptureError
        self.graph = None  # the capture call 1 made
        self.launches = 0  # how many launches it recorded
        self.kept: list = []  # call 1's output tensors as returned (not cloned), and their values then
        self.kept_values: list = []
        self.last = None
        self.replayed_python = 0  # runs of the kernel's Python during replays
        self.notes: list[str] = []
        self.failure: CheckFailed | None = None  # what the run found, if anything

    # --- one call ----------------------------------------------------------------------------------------

    def expected(self, call: Call):
        reference_call = clone(call)
        try:
            return self.reference(reference_call), reference_call
        except NotImplementedError as error:
            if "no CPU reference kernel yet" in str(error):
                skip(str(error))
            raise

    def call(self, number: int, call: Call):
        """Call `number` (1 captures, later ones replay), compared with the reference; returns the raw outputs."""
        expected, reference_call = self.expected(call)
        memory = {name: [t.untyped_storage().data_ptr() for t in tensors(call[name])] for name in self.op.written}
        captures = len(self.emulation.captures)
        try:
            with self.emulation.kernel_python() as ran, outputs_are_new_memory():
                raw = self.compiled(**call)
        except self.capture_error as error:
            kind = CAPTURE_KINDS.get(error.kind, "cpu-sync-in-kernel")
            raise CheckFailed(self.capture_failure(error), kind) from None
        self.assert_fake_planned_the_outputs()
        if number == 1:
            self.after_capture(raw, call, memory)
        else:
            self.replayed_python += ran[0]
            self.assert_replayed(number, captures, ran[0])
        self.compare(number, raw, expected, call, reference_call)
        self.last = raw
        return raw

    def assert_fake_planned_the_outputs(self) -> None:
        """An op captured as one launch writes buffers allocated from its fake: the kernel must return what it says."""
        for graph in self.emulation.captures:
            for name, index, (fake_shape, fake_dtype), (shape, dtype) in graph.fake_mismatches[:1]:
                raise CheckFailed(f"output {index} of {name}: its fake says {list(fake_shape)} {fake_dtype}, its "
                                  f"kernel returned {list(shape)} {dtype} at a replay: a captured graph allocates the "
                                  "op's outputs from its fake and the device task writes into them, so the fake must "
                                  "give the kernel's shapes and dtypes", "fake-wrong-metadata")

    def capture_failure(self, error) -> str:
        captured = self.emulation.captures[-1] if self.emulation.captures else None
        where = f"{_shown(error.where)}: {error.code}" if error.where else "(outside the op's kernel)"
        return (f"{self.op.qualname} cannot be captured by npugraph_ex: {self.kernel(captured)} makes a call the "
                f"capturing stream refuses:\n  {where}\n  {error.what}: {error.why}\n  fix: "
                f"{CAPTURE_FIXES[error.kind]}\n  (as torch_npu reports it: {str(error).splitlines()[0]})")

    def kernel(self, graph=None) -> str:
        """Which of the op's kernels the capture ran (its NPU kernel when plain torch on CPU, else its CPU one)."""
        graph = graph or self.graph
        key, why = (graph.kernels.get(self.op.overload.name()) if graph is not None else None) or ("", "")
        whole = graph is not None and self.op.overload.name() in graph.one_launch
        how = ", as one launch of the op," if whole else ""
        if key == "PrivateUse1":
            return f"its NPU (PrivateUse1) kernel, {'compiled code' if whole else 'plain torch on CPU'}{how or ','}"
        if key == "CPU":
            language = "compiled code; " if whole and npu_graph_cpu().kernel_language(
                self.op.overload.name(), key) == "C++" else ""
            return f"its CPU kernel ({language}{self.op.cpu_kernel + '; ' if self.op.cpu_kernel else ''}{why}){how}"
        return "no kernel of the op"

    def captured(self):
        """The capture of call 1 (or the capture that failed)."""
        return self.graph or (self.emulation.captures[-1] if self.emulation.captures else None)

    def stand_in(self) -> tuple[str, str] | None:
        """(dispatch key, why) of the captured kernel when it is not the one the device runs: a CPU kernel standing in
        for an NPU or CUDA kernel (a stub, or one that is not plain torch), recorded launch by launch; else None."""
        graph, name = self.captured(), self.op.overload.name()
        key, why = (graph.kernels.get(name) if graph is not None else None) or ("", "")
        device_kernel = any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in ("PrivateUse1", "CUDA"))
        return (key, why) if key == "CPU" and device_kernel and name not in graph.one_launch else None

    def after_capture(self, raw, call: Call, memory: dict) -> None:
        captures = self.emulation.captures
        if not captures:
            raise CheckFailed("npugraph_ex captured no graph (it ran eagerly?)", "npugraph_ex-no-graph")
        self.graph = captures[-1]
        self.launches = len(self.graph.launches)
        if self.op.overload.name() not in self.graph.kernels:
            raise CheckFailed(f"npugraph_ex captured a graph in which {self.op.overload}'s kernel never ran: the op is "
                              "not in the graph it captures", "npugraph_ex-op-missing")
        self.assert_no_random()
        self.assert_outputs_are_graph_memory()
        for name in self.op.written:
            now = [t.untyped_storage().data_ptr() for t in tensors(call[name])]
            if now != memory[name]:
                line = "".join(f"\n  {_shown(where)}: {code}" for _, where, code in self.graph.moved[:1] if where)
                raise CheckFailed(
                    f"{self.kernel()} gives the argument it writes, {name!r}, new memory (set_, resize_ or `.data =`):"
                    f"{line}\n  the caller's tensor no longer is the buffer the graph was captured on, so AclGraph "
                    "recaptures at every call (recapture_due_to_mutated_input_change) and runs the kernel's Python "
                    f"each time; write into {name!r} in place (copy_, index_copy_, slices)", "capture-recapture")
        written = {t.untyped_storage().data_ptr() for launch in self.graph.launches for t in launch.written()}
        for name in self.op.written:
            memory = {t.untyped_storage().data_ptr() for t in tensors(call[name]) if t.numel()}
            if memory - written:
                raise CheckFailed(f"the graph npugraph_ex captured never writes the caller's {name!r}: "
                                  f"{self.kernel()} writes other memory, so a replay leaves the caller's buffer as it "
                                  "was", "npugraph_ex-private-input-copy")
            copies = [launch for launch in self.graph.launches if not launch.kernel and "copy" in str(launch.func)
                      and memory & {t.untyped_storage().data_ptr() for t in launch.written()}]
            if copies:
                self.notes.append(f"npugraph_ex copies into {name!r} at every replay ({copies[0].func}, outside the "
                                  "kernel: the graph writes a buffer of its own first)")
        self.kept = tensors(raw)
        self.kept_values = [t.clone() for t in self.kept]

    def assert_no_random(self) -> None:
        if not self.graph.random:
            return
        op_name, where, code = self.graph.random[0]
        declare = (f"an op whose job is to sample: declare it, `tags: [nondeterministic_seeded]` in "
                   f"{self.op.spec('.tags')}, which makes this a warning; " if not self.op.random else "")
        text = (f"{self.op.qualname}: {self.kernel()} draws random numbers while it is captured:\n  {_shown(where)}: "
                f"{code}\n  {op_name}: {RANDOM_IN_CAPTURE}. {declare}any other op: pass random values in as a tensor "
                f"argument, drawn outside the graph (a warning-level finding: {ALLOW_RANDOM}=1 accepts it and compares "
                "only shapes and dtypes)")
        if not self.allow_random:
            raise CheckFailed(text, "random-op")
        warnings.warn(text, stacklevel=3)
        self.notes.append(f"random numbers in the captured kernel accepted (allow_random): {op_name} at "
                          f"{_shown(where)}")

    def assert_outputs_are_graph_memory(self) -> None:
        """The kernel returned memory it allocated while captured (from the graph's pool), or, for a tagged op, the
        argument it returns: anything else is memory it keeps across calls, or an input's."""
        for index, (memory, where, code) in enumerate(self.graph.returns.get(self.op.overload.name(), ())):
            if memory == "pool" or (memory == "argument" and self.op.returned):
                continue
            line = f"\n  {_shown(where)}: {code}" if where else ""
            if memory == "argument":
                raise CheckFailed(f"output {index}: {self.kernel()} returns the memory of an input (npugraph_ex's "
                                  "private copy of it, or the caller's tensor), a view of an argument, while the "
                                  f"schema promises a new tensor; return a clone{line}", "view-return")
            raise CheckFailed(
                f"output {index} is memory {self.kernel()} keeps across calls (not allocated while it was captured, "
                f"not an argument):{line or ' (no launch wrote it)'}\n  every call returns this same tensor, in eager "
                "too, so an output the caller keeps changes at the next call, and npugraph_ex's memory reuse between "
                "graph keys takes its outputs for pool memory; allocate the output in the kernel on every call "
                "(torch.empty_like(x), x.new_empty(...))", "capture-static-output")

    def assert_replayed(self, number: int, captures_before: int, python_runs: int) -> None:
        if len(self.emulation.captures) != captures_before:
            counts = {key: count for key, count in torch._dynamo.utils.counters["npugraph_ex"].items()
                      if key.startswith("recapture_")}
            raise CheckFailed(f"call {number} recaptured the graph instead of replaying it ({counts}), with the "
                              "caller's buffers and shapes unchanged", "capture-recapture")
        assert python_runs == 0, (
            f"call {number}: the kernel's Python ran {python_runs} time(s) although npugraph_ex should replay the "
            "captured graph without it (did it fall back to eager?)")

    def compare(self, number: int, raw, expected, call: Call, reference_call: Call) -> None:
        actual = clone(raw)  # the next replay overwrites graph outputs
        where = f"npugraph_ex on CPU, call {number}"
        if self.graph.random and self.allow_random:
            for got, want in zip(tensors(actual), tensors(expected), strict=True):
                assert (got.shape, got.dtype) == (want.shape, want.dtype), f"{where}: output {got.shape} {got.dtype}"
            return
        for name in (name for name in call if name not in self.op.written):
            for value, reference_value in zip(tensors(call[name]), tensors(reference_call[name]), strict=True):
                if not same(value, reference_value):
                    raise CheckFailed(
                        f"{where}: argument {name!r} after the call differs from the reference's (an argument the "
                        "kernel writes but the schema does not mark Tensor(a!) is written into npugraph_ex's private "
                        f"copy of it): {mismatch(value, reference_value)}", "npugraph_ex-private-input-copy")
        try:
            _assert_matches_reference(self.op, actual, expected, f"{where}: output", "cpu")
            for name in self.op.written:
                _assert_matches_reference(self.op, call[name], reference_call[name],
                                          f"{where}: mutated argument {name!r}, tensor", "cpu")
        except AssertionError as differs:
            self.assert_nothing_frozen(call, f"{differs}")
            raise CheckFailed(f"{differs}\n(npugraph_ex replayed what {self.kernel()} recorded at capture)",
                              "compiled-differs") from None

    # --- after the calls -------------------------------------------------------------------------------

    def assert_nothing_frozen(self, call: Call, mismatch: str = "") -> None:
        """The kernel recorded again now issues what it issued at capture: else a host value it reads from Python
        state (a global, a config, a counter) is frozen at its capture value."""
        probe_call = clone(call)
        now = self.emulation.record_call(lambda: self.op.overload(**probe_call))
        name = self.op.overload.name()
        then = [launch for launch in self.graph.launches if launch.kernel == name]
        again = [launch for launch in now.launches if launch.kernel == name]
        for first, second in zip(then, again, strict=False):
            if first.signature() != second.signature():
                values = [f"{a!r} at capture, {b!r} now" for a, b in zip(first.host_values(), second.host_values(),
                                                                         strict=False) if a != b]
                raise CheckFailed(
                    f"{self.op.qualname}: a host value of {self.kernel()} is frozen in the captured graph:\n  "
                    f"{_shown(first.where)}: {first.code}\n  it launched {first.func} with "
                    f"{'; '.join(values) or 'other arguments'} (the kernel run again): a captured graph keeps the host "
                    "values of its capture, because the kernel's Python runs once, so a value read from Python state "
                    "per call (a global, a config, a counter) never changes at replay. Pass it as a tensor argument: "
                    "replays read tensors from device memory" + (f"\n  seen as: {mismatch}" if mismatch else ""),
                    "capture-frozen-value")
        if len(then) != len(again):
            raise CheckFailed(f"{self.op.qualname}: {self.kernel()} issues {len(again)} kernel launches when run "
                              f"again, {len(then)} at capture: its Python takes another path now (a branch on Python "
                              "state), which a replay never does" + (f"\n  seen as: {mismatch}" if mismatch else ""),
                              "capture-frozen-value")

    def assert_outputs_kept(self, last_number: int) -> None:
        """Call 1's outputs, kept without a clone: intact, or (npugraph_ex's static output memory) the memory of the
        last call's outputs, holding its values."""
        last, overwritten = tensors(self.last), []
        for index, (kept, values) in enumerate(zip(self.kept, self.kept_values, strict=True)):
            if same(kept, values):
                continue
            shared = index < len(last) and kept.untyped_storage().data_ptr() == last[index].untyped_storage().data_ptr()
            if not (shared and same(kept, last[index])):
                raise CheckFailed(f"output {index} of call 1, kept without a clone, changed to values of no output of "
                                  f"call {last_number}: npugraph_ex's outputs are overwritten only by the next replay "
                                  "of the same memory, so something else writes it", "capture-static-output")
            assert same(kept, last[index])  # the static-memory behaviour users must know
            overwritten.append(str(index))
        if overwritten:
            self.notes.append(f"output {', '.join(overwritten)} of call 1, kept without a clone, is the memory of call "
                              f"{last_number}'s and holds its values (npugraph_ex's static output memory, "
                              "clone_output=False): clone outputs you keep across calls, as this test does")

    def different_buffers(self, call: Call) -> None:
        """The written arguments in new memory (same shapes): AclGraph recaptures, and the new buffers are written."""
        fresh = clone(call)
        recaptures = _captured("npugraph_ex", "recapture_due_to_mutated_input_change")
        captures = len(self.emulation.captures)
        expected, reference_call = self.expected(fresh)
        raw = self.compiled(**fresh)
        recaptured = _captured("npugraph_ex", "recapture_due_to_mutated_input_change") - recaptures
        names = ", ".join(map(repr, self.op.written))
        try:
            self.compare(4, raw, expected, fresh, reference_call)
        except CheckFailed as failed:
            raise CheckFailed(f"{failed}\nwith new memory for {names} (same shapes), npugraph_ex recaptured "
                              f"{recaptured} time(s): the new buffers are not written as the reference writes them",
                              "capture-recapture") from None
        if recaptured != 1 or len(self.emulation.captures) != captures + 1:
            raise CheckFailed(f"new memory for {names} (same shapes) should make AclGraph recapture once "
                              f"(recapture_due_to_mutated_input_change); it recaptured {recaptured} time(s), "
                              f"{len(self.emulation.captures) - captures} new capture(s)", "capture-recapture")
        self.notes.append(f"new memory for {names} (same shapes) made AclGraph recapture once "
                          "(recapture_due_to_mutated_input_change), as on a device, and the new buffers were written: "
                          "keep a mutated buffer at one address to replay without recapturing")

    def report(self, calls: int, captures: int) -> str:
        graph = self.graph
        if self.op.overload.name() in graph.one_launch:
            python = "the kernel runs whole at each replay, as a device task"
        else:
            python = (f"the kernel's Python ran {graph.kernel_runs} time(s) at capture and {self.replayed_python} "
                      "during replays")
        head = (f"{self.op.qualname}: npugraph_ex's AclGraph captured {self.kernel()} on CPU (opgen's emulated NPU "
                f"graph, tests/npu_graph_cpu.py): {self.launches} kernel launches recorded, {captures} capture and "
                f"{graph.replays} replays for {calls} calls; {python}")
        return "\n".join([head, *(f"  {note}" for note in self.notes)])


def _new_values(make_call: Callable[[int], Call], reference: Callable[[Call], Any] | None = None
                ) -> Callable[[int], Call]:
    """`make_call`, with the tensors it fills with fixed values (the same at every seed: indices, exact examples)
    permuted at seeds after the first, so that replays see new values everywhere (indices stay in range). A call
    `reference` refuses once permuted (values whose order matters, such as offsets) keeps its fixed values."""
    first = make_call(0)

    def varied(seed: int) -> Call:
        call = make_call(seed)
        if not seed:
            return call
        g = torch.Generator().manual_seed(seed)

        def permute(pair):
            value, base = pair
            if isinstance(value, torch.Tensor) and value.numel() > 1 and same(value, base):
                return value.flatten()[torch.randperm(value.numel(), generator=g)].reshape(value.shape).clone()
            return value

        permuted = {name: _zip_map(permute, value, first[name]) for name, value in call.items()}
        if reference is not None:
            try:
                reference(clone(permuted))
            except (RuntimeError, IndexError, ValueError):  # torch's errors on out-of-order or out-of-range values
                return call
        return permuted

    return varied


def _zip_map(fn: Callable, value, base):
    if isinstance(value, (list, tuple)) and isinstance(base, (list, tuple)) and len(value) == len(base):
        return type(value)(_zip_map(fn, v, b) for v, b in zip(value, base, strict=True))
    return fn((value, base))


def assert_npugraph_ex_capture_replay_on_cpu(op: Op, make_call: Callable[[int], Call],
                                             reference: Callable[[Call], Any] | None = None,
                                             allow_random: bool | None = None, options: dict | None = None) -> str:
    """npugraph_ex's backend and its own AclGraph capturing and replaying the op on CPU, over the emulated NPU graph of
    tests/npu_graph_cpu.py (static shapes, fullgraph): call 1 captures (then replays), calls 2 and 3 replay with new
    values (fixed ones, indices included, permuted), written buffers reused; each compared with `reference`
    (`reference(call)` returns the outputs and writes the Tensor(a!) arguments of `call`, like `op(call)`; default: the
    spec's `reference:`, else the CPU kernel, eager) on the same inputs, written buffers checked in the caller's memory.
    The kernel's Python runs once, at capture; call 1's outputs are intact or (static output memory) hold call 3's
    values; a host value the kernel reads from Python state per call is named (frozen at capture); new memory for a
    written argument recaptures once. A host sync in the kernel fails with its file, line and fix; random-number ops
    fail unless `allow_random` (default: the op is declared random, or OPGEN_ALLOW_RANDOM_IN_CAPTURE=1), a warning then.
    `options`: CompilerConfig fields, for opgen's own tests.

    Returns (and prints) what happened: which kernel was captured, the launches, the static outputs, the recapture."""
    loader = npugraph_ex_cpu(capture=True)
    if allow_random is None:  # an op declared random (nondeterministic_seeded) is a warning, as the opt-out gives
        import os

        allow_random = op.random or os.environ.get(ALLOW_RANDOM) == "1"
    if reference is None:  # the spec's reference (the independent oracle), else the CPU kernel
        reference = (lambda call: op.reference(**call)) if op.reference is not None else op

    def capture(one_launch: dict | None = None) -> tuple[_CaptureRun, str]:
        torch.compiler.reset()
        torch._dynamo.utils.counters.clear()
        with loader.Session(capture=True, one_launch=one_launch) as session, torch.no_grad():
            compiled = torch.compile(lambda **kwargs: op.overload(**kwargs),
                                     backend=session.backend(**(options or {})), fullgraph=True, dynamic=False)
            run = _CaptureRun(op, session, compiled, reference, allow_random)
            try:
                calls = _calls_with_reused_buffers(op, _new_values(make_call, reference), (0, 1, 2))
                for number, call in enumerate(calls, start=1):
                    run.call(number, call)
                run.assert_outputs_kept(number)
                run.assert_nothing_frozen(call)
                captures = len(session.emulation.captures)
                if op.written:
                    run.different_buffers(call)
            except CheckFailed as failed:
                run.failure = failed
                return run, ""
            return run, run.report(number, captures)

    run, report = capture()
    stand_in = run.stand_in() if run.failure is not None else None
    if run.failure is not None and (stand_in is None or run.failure.kind not in STAND_IN_FINDINGS):
        raise run.failure
    if stand_in is not None:
        plumbing, report = capture({op.overload.name(): stand_in})
        # a stand-in reading Python state per call, or drawing random numbers, is no function of its inputs: run
        # whole, its values still move
        stateful = run.failure.kind in ("capture-frozen-value", "random-op") and getattr(
            plumbing.failure, "kind", "") == "compiled-differs"
        if plumbing.failure is not None and not stateful:
            raise plumbing.failure
        skip(_stand_in_skip(run, plumbing))
    print(report)
    return report


# What a kernel standing in for the device kernel may do that says nothing about the op: the device kernel's to avoid
STAND_IN_FINDINGS = ("cpu-sync-in-kernel", "stream-misuse", "capture-frozen-value", "random-op", "capture-recapture",
                     "capture-static-output", "compiled-differs")


def _stand_in_skip(run: _CaptureRun, plumbing: _CaptureRun) -> str:
    """Why the capture tier judged only the op's plumbing: what the stand-in kernel did, where, and that the device
    kernel replacing it must not."""
    _key, why = run.stand_in()
    what = "\n  ".join(str(run.failure).splitlines())
    passed = "which passed" if plumbing.failure is None else (
        "which passed but for its values: the stand-in reads Python state or draws random numbers, so it gives "
        "other values at every call")
    return (f"{run.op.qualname}: capture on CPU judged only the op's plumbing, {passed} (registration, fake, "
            f"outputs, written buffers: the op captured as one launch and replayed {plumbing.graph.replays} times with "
            f"new values). Its CPU kernel is not judged: it stands in for the kernel the device runs ({why}), and that "
            f"kernel must not do what the stand-in does here:\n  {what}")


# --- fusions: `fusion:` in opgen.yaml, <package>/patterns.py ----------------------------------------
#
# A fusion is <package>/patterns.py's `Fusion` record of an op: `composite` (what models write instead of calling the
# op), `inputs` (matched as graph values), `constants` (matched literally), `written`, `applies` (`when:`), `field`
# ("ops[0].fusion") and `targets`. `register` is the package's `register_fusions`: called with install=False it
# registers every fusion with npugraph_ex when npugraph_ex is importable (inside npugraph_ex_cpu.Session) and returns
# the Inductor pass holding them.

FUSION_ROUTES = ("npugraph_ex", "inductor")
FUSION_SCALE = 1.5  # the model scales its floating inputs first: the composite then sits inside a graph
FUSION_GLUE = ("getitem", "auto_functionalized", "auto_functionalized_v2")  # what a replacement adds besides the op


def fusion_call(fusion, call: Call) -> Call:
    """The call with the fusion's constants in place of the example's values: the composite is matched with them."""
    return {**call, **fusion.constants}


def _index_dtype_variants(call: Call, label: str) -> list[tuple[str, Call]]:
    """The call with each integer tensor in the other index dtype (int64 <-> int32): indexing takes both, a kernel
    may not."""
    found = []
    for name, value in call.items():
        if isinstance(value, torch.Tensor) and value.dtype in (torch.int64, torch.int32):
            other = torch.int32 if value.dtype == torch.int64 else torch.int64
            label_other = f"{label} with {name} as {str(other).removeprefix('torch.')}"
            found.append((label_other, {**call, name: value.to(other)}))
    return found


def fusion_variants(op: Op, fusion, examples: Callable[[int], list[Call]]) -> list[tuple[str, Call]]:
    """(label, call): the oracle tier's variants of every example (seeds, the swept dtypes, odd sizes) with the
    fusion's constants, and each example with its integer tensors in the other index dtype. (A scalar moved off its
    value is a constant of the pattern; special values and edge sizes are the op's business, not the pattern's.)"""
    found = [(variant.label, fusion_call(fusion, variant.call)) for variant in variants(op, examples)
             if variant.kind in ("example", "dtype", "size")]
    for number, call in enumerate(examples(0)):
        found += _index_dtype_variants(fusion_call(fusion, call), f"examples[{number}]")
    return found


def assert_fusion_matches_the_op(op: Op, fusion, examples: Callable[[int], list[Call]]) -> None:
    """Where `fusion` applies, its composite computes what the op computes (outputs and written buffers) on every call
    of `fusion_variants`: compiled models would otherwise change their results. A composite the op does not compute
    fails naming ops[i].fusion; a call the fusion applies to and the kernel refuses, naming ops[i].fusion.when."""
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
                                 _results(op, expected, composite_call), f"{fusion.field}'s composite")
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
    registered with it), or Inductor's pattern pass (FUSION_PASS) after its remove_noop_ops under aot_eager.
    `before` and `after` see each forward graph around the pattern pass; `bw_compiler`: Inductor's backward."""
    if route == "npugraph_ex":
        register(install=False, targets=(route,))
        return session.backend(fusion=True, post_grad_custom_pre_pass=lambda gm, *_: before(gm.graph),
                               post_grad_custom_post_pass=lambda gm, *_: after(gm.graph))
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.fx_passes.post_grad import remove_noop_ops

    pattern_pass = register(install=False, targets=(route,)).inductor_pass

    def compiler(gm, _example_inputs):
        remove_noop_ops(gm.graph)
        before(gm.graph)
        pattern_pass(gm.graph)
        gm.recompile()
        after(gm.graph)
        return gm
    return aot_autograd(fw_compiler=compiler, bw_compiler=bw_compiler or (lambda gm, _example_inputs: gm),
                        decompositions=select_decomp_table(), keep_inference_input_mutations=True)


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
        if leftovers:
            where = "".join(f"\n  {n.format_node()}" for n in leftovers)
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
        if other is not None:
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


# --- layouts: the op's outputs have the strides the composite's have ---------------------------------


def _sliced(t: torch.Tensor) -> torch.Tensor:
    """The same values in every other column of a wider tensor (not dense: a slice of a model's fused projection)."""
    if not t.dim() or not t.numel():
        return t
    wide = t.new_zeros((*t.shape[:-1], 2 * t.shape[-1]))
    wide[..., ::2] = t
    return wide[..., ::2]


def fusion_layouts(op: Op, call: Call) -> list[tuple[str, Call]]:
    """(label, call): the call as it is, in each layout of `layouts`, and sliced (its read inputs every other column
    of a wider tensor)."""
    sliced = {name: value if name in op.written else tensor_map(_sliced, value) for name, value in call.items()}
    return [("contiguous", call), *((label, strided) for label, strided, _ in layouts(op, call)), ("sliced", sliced)]


def _layout_problem(op: Op, fusion, call: Call) -> str | None:
    """How the op's outputs (its fake function's, which a compiled graph plans with) are laid out otherwise than the
    composite's on `call`; None when they agree (or the composite refuses the call)."""
    expected = _reference_result(lambda c: fusion.composite(**c), clone(call))
    if expected is _REFUSED or op.dynamic:
        return None
    with FakeTensorMode() as mode:
        predicted = op(tensor_map(mode.from_tensor, call))
    for index, (fake, real) in enumerate(zip(tensors(predicted), tensors(expected), strict=True)):
        if fake.numel() and _significant_strides(fake) != _significant_strides(real):
            return (f"{op.output_field(index)}: the op's fake gives strides {fake.stride()}, the composite "
                    f"{real.stride()} (shape {tuple(real.shape)})")
    return None


def _layout_fix(op: Op, fusion) -> str:
    return (f"declare the layout the composite keeps in opgen.yaml (`like: <input>` in {op.field}.outputs keeps that "
            f"input's strides; without it an output is contiguous), or keep the fusion to the layouts the op "
            f"matches with a condition in {fusion.field}.when (e.g. \"x.is_contiguous()\")")


def assert_fusion_keeps_layouts(op: Op, fusion, examples: Callable[[int], list[Call]]) -> None:
    """Where `fusion` applies, on each example in each layout of `fusion_layouts`, the op's outputs have the strides
    the composite's outputs have: the rest of a compiled graph (a backward saved for training, a view of the
    output) was planned with the composite's, and npugraph_ex's or Inductor's checks fail on other strides."""
    checked = 0
    for number, base in enumerate(examples(0)):
        for label, call in fusion_layouts(op, fusion_call(fusion, base)):
            if fusion_refusal(fusion, call):
                continue
            checked += 1
            problem = _layout_problem(op, fusion, call)
            if problem:
                raise CheckFailed(f"{fusion.field} would replace its composite by {op.qualname} on {op.field}.examples"
                                  f"[{number}] in {label} layout, and change the layout of its outputs: {problem}; "
                                  + _layout_fix(op, fusion), "fusion-changes-layout")
    if not checked:
        skip(f"{fusion.field} applies to no example in any layout: no layout to compare")


# --- training: a backward through the fused op -------------------------------------------------------


def _strict_backward(gm: torch.fx.GraphModule, example_inputs) -> Callable:
    """A backward that checks its inputs' sizes and strides against those it was traced with, as Inductor's and
    npugraph_ex's compiled graphs do (assert_size_stride): a saved forward output laid out otherwise fails."""
    expected = [(tuple(t.shape), tuple(t.stride())) if isinstance(t, torch.Tensor) else None for t in example_inputs]

    def run(*args):
        for index, (arg, want) in enumerate(zip(args, expected, strict=True)):
            if want is not None and isinstance(arg, torch.Tensor) and (tuple(arg.shape), tuple(arg.stride())) != want:
                raise AssertionError(f"backward input {index}: expected size {want[0]}, stride {want[1]}, got size "
                                     f"{tuple(arg.shape)}, stride {tuple(arg.stride())}")
        return gm(*args)
    return make_boxed_func(run)


def _loss_model(fusion, closure: Call) -> Callable:
    """The composite as a model trains it: its floating outputs squared and summed into one loss."""
    model = _fusion_model(fusion, closure)

    def loss(**tensor_args):
        return sum((t.float() ** 2).sum() for t in tensors(model(**tensor_args)) if t.is_floating_point())
    return loss


def _trainable(op: Op, fusion, call: Call) -> Call | None:
    """The call's tensors in the transposed layout (q and k are transposed views in attention) where the fusion
    applies to it (else as they are), its first floating
    input taking a gradient (the activation: a norm's x, attention's q, not a weight or cos/sin, whose gradients
    would make the backward save values inside the composite); None when the op writes buffers or reads no float."""
    if op.written:
        return None
    strided = next((changed for label, changed, _ in layouts(op, call) if label == "transposed"), call)
    tensor_args = _split(strided if not fusion_refusal(fusion, strided) else call)[0]
    first = next((name for name in fusion.tensors if tensor_args[name].is_floating_point()), None)
    if first is None:
        return None
    return {name: t.detach().clone().requires_grad_(name == first) for name, t in tensor_args.items()}


def assert_fusion_trains(op: Op, fusion, register: Callable, make_call: Callable[[int], Call], route: str) -> None:
    """The composite trained under `route` (npugraph_ex's backend, or Inductor's pattern pass with a backward that
    checks strides as Inductor's does), its inputs transposed: where the op replaces the composite in the forward
    graph, the backward (compiled for the composite's outputs) runs and the gradients equal eager's."""
    call = fusion_call(fusion, make_call(0))
    refusal = fusion_refusal(fusion, call)
    reason = _route_unavailable(route, fusion) or (refusal and f"{op.field}.examples[0]: {refusal}")
    trainable = None if reason else _trainable(op, fusion, call)
    if reason or trainable is None:
        skip(reason or f"{op.qualname} writes buffers or takes no floating input: no backward to run through it")
    model = _loss_model(fusion, _split(call)[1])
    eager = {name: t.detach().clone().requires_grad_(t.requires_grad) for name, t in trainable.items()}
    model(**eager).backward()
    seen = FusedGraphs()
    torch.compiler.reset()
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(npugraph_ex_cpu().Session()) if route == "npugraph_ex" else None
        backend = _fusion_backend(route, register, *_snapshots(fusion, seen), session, bw_compiler=_strict_backward)
        try:
            model_compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
            model_compiled(**trainable).backward()
        except Exception as error:  # the backward refusing the fused forward's outputs: a finding
            if not (seen.after and seen.after[0]["op"]):
                raise
            layout = _layout_problem(op, fusion, {**call, **{n: t.detach() for n, t in trainable.items()}})
            raise CheckFailed(f"{fusion.field} under {route}: training through {op.qualname} in place of the composite "
                              f"fails, {type(error).__name__}: {str(error).splitlines()[0]}"
                              + (f"; {layout}; " + _layout_fix(op, fusion) if layout else ""),
                              "fusion-changes-layout" if layout else "fusion-breaks-training") from error
    if not seen.after or not seen.after[0]["op"]:
        skip(f"{fusion.field} does not fire in the training graph under {route} (the backward saves values inside the "
             "composite, which the pattern then cannot replace): nothing to check")
    for name, t in trainable.items():
        if t.requires_grad:
            problem = mismatch(t.grad, eager[name].grad, op.tolerance(t.dtype))
            if problem:
                raise CheckFailed(f"{fusion.field} under {route}: the gradient of {name!r} through {op.qualname} "
                                  f"differs from eager's through the composite: {problem}", "fusion-breaks-training")


# --- real models: `fusion.models` in opgen.yaml (Hugging Face transformers, tiny configs) ----------------------

# A tiny config every decoder family takes (others keep their defaults); `fusion.models[k].config` overrides it.
TINY_CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128, "max_position_embeddings": 64,
               "use_cache": False, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
MODEL_TOLERANCES = {torch.bfloat16: (5e-2, 5e-2), torch.float16: (1e-2, 1e-2), torch.float32: (1e-4, 1e-4)}


def tiny_model(architecture: str, config: dict, dtype: torch.dtype):
    """The Hugging Face `architecture` (a transformers class name) at TINY_CONFIG (and `config`), random weights in
    `dtype` (each 1-D weight moved off its init, so that a norm's weight is not all ones), and its inputs. Skips
    when transformers is not installed."""
    try:
        import transformers
    except ImportError:
        skip(f"transformers is not installed: the test builds {architecture} from it (pip install transformers)")
    cls = getattr(transformers, architecture, None)
    if cls is None or not hasattr(cls, "config_class"):
        raise CheckFailed(f"{architecture!r} is not a model class of transformers {transformers.__version__} (a "
                          "Hugging Face architecture, e.g. LlamaForCausalLM)", "model-unknown")
    torch.manual_seed(0)
    model = cls(cls.config_class(**{**TINY_CONFIG, **config})).to(dtype).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=g).to(dtype))
    vocab = getattr(model.config, "vocab_size", TINY_CONFIG["vocab_size"])
    return model, {"input_ids": torch.randint(0, vocab, (2, 8), generator=g)}


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


def assert_fusion_fires_in_model(op: Op, forms: Sequence, register: Callable, model: tuple[str, dict], route: str,
                                 dtype: torch.dtype) -> None:
    """A Hugging Face model (`fusion.models`: tiny config, random weights) in `dtype`, compiled under `route`: every
    occurrence of the op's composites in the graph before the pattern pass (`composite_sites`) is replaced by the
    op, but those a form's `when:` refuses (said, not failed: the spec chose them), at least one is, and the logits
    equal eager's."""
    architecture, config = model
    if all(route not in form.targets for form in forms):
        skip(f"{forms[0].field.split('.forms')[0]}.targets in opgen.yaml leaves out {route}")
    if all(all(d != dtype for combination in form.dtypes for d in combination) for form in forms):
        skip(f"no form of {op.field}.fusion is traced in {str(dtype).removeprefix('torch.')}")
    network, inputs = tiny_model(architecture, config, dtype)
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
        expected = network(**inputs).logits
        compiled = torch.compile(network, backend=_fusion_backend(route, register, before, after, session),
                                 fullgraph=True, dynamic=False)
        actual = compiled(**inputs).logits
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
