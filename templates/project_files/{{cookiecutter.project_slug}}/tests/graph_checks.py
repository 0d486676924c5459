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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

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
                     torch.float64: (1e-7, 1e-7)}
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
    tolerances: dict | None = None  # {dtype: (rtol, atol)}: the device kernel vs the CPU kernel

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


# --- values ----------------------------------------------------------------------------------------


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random values of any dtype from a seeded generator (small integers for integer dtypes)."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 8, shape, generator=g).to(dtype)


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


def _assert_metadata(op: Op, outputs: list, expected: list) -> None:
    """Fake outputs have the shapes and dtypes the spec's semantics give (shape None: data-dependent)."""
    assert len(outputs) == len(expected)
    for index, (value, (shape, dtype)) in enumerate(zip(outputs, expected, strict=True)):
        where = f"opgen.yaml: {op.output_field(index)}"
        assert dtype is None or value.dtype == dtype, (
            f"{where}.dtype: the fake gives {value.dtype} on example 0, the spec says {dtype}")
        if shape is None:
            assert free_unbacked_symbols(value.shape), f"{where}.shape: expected a data-dependent size"
        else:
            assert tuple(value.shape) == tuple(shape), (
                f"{where}.shape: the fake gives {tuple(value.shape)} on example 0, the spec says {tuple(shape)}")


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


def assert_follows_semantics(op: Op, calls: Sequence[Call], semantics: Callable) -> None:
    """On every example the CPU kernel's outputs have the shapes and dtypes the spec's semantics give."""
    for number, call in enumerate(calls):
        call = clone(call)
        want = semantics(**call)
        got = tensors(run(op, call, _example(op, number)))
        assert len(got) == len(want), f"{op.kernel} returns {len(got)} tensors, the schema {len(want)}"
        for index, (value, (shape, dtype)) in enumerate(zip(got, want, strict=True)):
            where = f"opgen.yaml: {op.output_field(index)}"
            assert dtype is None or value.dtype == dtype, (
                f"{where}.dtype gives {dtype} on example {number}, the CPU kernel ({op.kernel}) returns {value.dtype}")
            assert shape is None or tuple(value.shape) == tuple(shape), (
                f"{where}.shape gives {tuple(shape)} on example {number}, the CPU kernel ({op.kernel}) returns "
                f"{tuple(value.shape)}")


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
    """Every argument the schema marks written is changed on some example (its buffer filled with SENTINEL first,
    so that any write shows); no other tensor argument is ever changed."""
    written, changed = op.written, set()
    for number, call in enumerate(calls):
        call = clone(call)
        for name in written:
            tensor_map(lambda t: t.fill_(SENTINEL if t.dtype != torch.bool else True), call[name])
        before = clone(call)
        run(op, call, _example(op, number, f" (written arguments filled with {SENTINEL})"))
        for name, value in call.items():
            if all(same(a, b) for a, b in zip(tensors(value), tensors(before[name]), strict=True)):
                continue
            if name not in written:
                raise CheckFailed(
                    f"{op.kernel} changed argument {name!r} in {op.field}.examples[{number}], but {op.field}.schema in "
                    f"opgen.yaml does not mark it written: declare it `Tensor(a!) {name}`, or make the kernel leave "
                    "it alone", "undeclared-mutation")
            changed.add(name)
    never = [op.describe_argument(name) for name in written if name not in changed]
    if never:
        raise CheckFailed(
            f"{op.field}.schema in opgen.yaml marks {', '.join(never)} written (Tensor(a!)), but {op.kernel} changed "
            f"it on no example ({len(calls)} tried, the buffer filled with {SENTINEL} first): the kernel misses the "
            "write, or the schema over-declares the mutation", "missing-write")


def opcheck(op: Op, calls: Sequence[Call], test_utils: Sequence[str] | None = None) -> None:
    """torch.library.opcheck on every call, its failure saying where to look (`test_utils`: default, all of
    OPCHECK_UTILS that apply to the op)."""
    test_utils = test_utils or (OPCHECK_UTILS_DYNAMIC if op.dynamic else OPCHECK_UTILS)
    for call in calls:
        try:
            torch.library.opcheck(op.overload, (), call, test_utils=test_utils)
        except Exception as error:
            raise AssertionError(f"{error}\n(opcheck of {op.overload}: check the CPU kernel {op.kernel} against the "
                                 f"fake function generated from opgen.yaml {op.field}.outputs and {op.field}.schema)"
                                 ) from error


def assert_compiled_matches_eager(op: Op, calls: Sequence[Call]) -> None:
    """torch.compile(backend="aot_eager", fullgraph=True): outputs and mutated inputs equal eager; a tagged op
    returns its mutated argument (the very tensor in eager, its new value when compiled)."""
    torch.compiler.reset()
    compiled = torch.compile(lambda **kwargs: op.overload(**kwargs), backend="aot_eager", fullgraph=True,
                             dynamic=False)
    for call in calls:
        eager_call = clone(call)
        expected = op(eager_call)
        actual = compiled(**call)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(tensors(call), tensors(eager_call))  # inputs mutated the same way
        assert len(tensors(actual)) == len(op.returned) or not op.returned
        for output, eager_output, name in zip(tensors(actual), tensors(expected), op.returned, strict=False):
            assert eager_output is eager_call[name], f"eager output is not argument {name!r}"
            torch.testing.assert_close(output, call[name])


def non_contiguous(call: Call, keep: Sequence[str] = ()) -> Call:
    """The same values in non-contiguous tensors: rank >= 2 transposed in memory, rank 1 every other element.
    `keep`: arguments left as they are."""
    def variant(t: torch.Tensor) -> torch.Tensor:
        if t.dim() >= 2:
            return t.transpose(-1, -2).contiguous().transpose(-1, -2)
        if t.dim() == 1 and t.numel() > 1:
            wide = t.new_zeros(2 * t.numel())
            wide[::2] = t
            return wide[::2]
        return t
    return {name: value if name in keep else tensor_map(variant, value) for name, value in call.items()}


def assert_non_contiguous_inputs(op: Op, call: Call) -> None:
    """opcheck and compiled == eager with non-contiguous inputs (same values): the fake's strides must be the
    kernel's (`like:` in opgen.yaml keeps an input's layout). out= tensors stay: Dynamo refuses non-contiguous ones."""
    strided = non_contiguous(call, keep=op.returned if op.tag == "out" else ())
    opcheck(op, [strided])
    assert_compiled_matches_eager(op, [strided])


def assert_compiles_once(op: Op, calls: Sequence[Call], derived: bool) -> None:
    """torch.compile(dynamic=True) makes ONE graph for calls of two sizes (the fake specialises on no size), and
    each compiled result (mutated inputs included) equals eager. `derived`: opgen made the second call.
    (The backend may be called more than once for the first call: Dynamo can restart its analysis.)"""
    if derived:
        try:
            op(clone(calls[1]))
        except (RuntimeError, IndexError, ValueError, TypeError) as error:  # torch's errors on mismatched sizes
            skip(f"opgen doubled the last size of {op.field}.examples[0], but the CPU kernel refuses that call "
                 f"({type(error).__name__}): add an example of another size to {op.field}.examples")
    torch.compiler.reset()
    graphs = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def backend(gm, example_inputs):
        graphs.append(gm)
        return aot_eager(gm, example_inputs)

    compiled = torch.compile(lambda **kwargs: op.overload(**kwargs), backend=backend, fullgraph=True, dynamic=True)
    compiled_first = None
    for call in calls:
        eager_call = clone(call)
        torch.testing.assert_close(compiled(**call), op(eager_call))
        torch.testing.assert_close(tensors(call), tensors(eager_call))
        compiled_first = len(graphs) if compiled_first is None else compiled_first
    sizes = [[tuple(t.shape) for t in tensors(call)] for call in calls]
    assert len(graphs) == compiled_first, (
        f"torch.compile(dynamic=True) compiled again for the second of the sizes {sizes}: the fake function "
        "specialises on a size (int(size), a Python comparison of sizes, ...); it is generated from "
        f"{op.field}.outputs in opgen.yaml")


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


def gradcheck(op: Op, calls: Sequence[Call]) -> None:
    """torch.autograd.gradcheck of the backward formula in float64, every floating-point tensor an input."""
    for call in _differentiable(op, calls):
        # (argument, position in its list or None): where each differentiated tensor goes
        slots = [(name, None) for name, value in call.items()
                 if isinstance(value, torch.Tensor) and value.is_floating_point()]
        slots += [(name, position) for name, value in call.items() if isinstance(value, (list, tuple))
                  for position, item in enumerate(value) if isinstance(item, torch.Tensor) and item.is_floating_point()]

        def fn(*inputs, call=call, slots=slots):
            values = {name: list(value) if isinstance(value, (list, tuple)) else value for name, value in call.items()}
            for (name, position), value in zip(slots, inputs, strict=True):
                if position is None:
                    values[name] = value
                else:
                    values[name][position] = value
            return op(values)

        inputs = tuple((call[name] if position is None else call[name][position]).detach().to(torch.float64)
                       .requires_grad_() for name, position in slots)
        assert torch.autograd.gradcheck(fn, inputs)


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


def _assert_matches_reference(op: Op, actual, reference, what: str) -> None:
    """The device kernel's tensors against the CPU reference kernel's, per-dtype tolerances."""
    got_all, want_all = tensors(actual), tensors(reference)
    assert len(got_all) == len(want_all), (
        f"{what}: {len(got_all)} tensors, the CPU reference kernel gives {len(want_all)}")
    for index, (got, want) in enumerate(zip(got_all, want_all, strict=True)):
        assert got.dtype == want.dtype, (
            f"{what} {index}: dtype {got.dtype}, the CPU reference kernel gives {want.dtype}")
        problem = mismatch(got, want, {**DEVICE_TOLERANCES, **(op.tolerances or {})}.get(got.dtype))
        assert problem is None, f"{what} {index} differs from the CPU reference kernel's: {problem}"


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
    Outputs and written buffers are compared with the CPU reference kernel run on the same inputs."""
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
            expected = op(cpu_call)
            actual = clone(compiled(**call))  # the next replay overwrites graph outputs
            _assert_matches_reference(op, actual, expected, f"{device} call {seed}: output")
            for name in op.written:
                _assert_matches_reference(op, call[name], cpu_call[name],
                                          f"{device} call {seed}: mutated argument {name!r}, tensor")
            if device == "npu":
                captured = _captured("npugraph_ex", "captured_")
                if captured_first is None:
                    captured_first = captured
                    assert captured >= 1, "npugraph_ex captured no graph (eager fallback?)"
                assert captured == captured_first, "a replay recaptured the graph"
                assert _captured("npugraph_ex", "recapture_due_to_mutated_input_change") == 0
    if device == "cuda":
        assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0, "CUDA graphs were skipped"


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
        compiled = torch.compile(fn, backend=session.backend(**(options or {})), fullgraph=True, dynamic=False)
        for seed, call in enumerate(_calls_with_reused_buffers(op, make_call, (0, 1, 2))):
            eager_call = clone(call)
            try:
                expected = fn(**eager_call)
            except NotImplementedError as error:
                if "no CPU reference kernel yet" in str(error):
                    skip(str(error))
                raise
            actual = compiled(**call)
            torch.testing.assert_close(actual, expected)
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
}
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
            with self.emulation.kernel_python() as ran:
                raw = self.compiled(**call)
        except self.capture_error as error:
            raise CheckFailed(self.capture_failure(error), "cpu-sync-in-kernel") from None
        if number == 1:
            self.after_capture(raw, call, memory)
        else:
            self.replayed_python += ran[0]
            self.assert_replayed(number, captures, ran[0])
        self.compare(number, raw, expected, call, reference_call)
        self.last = raw
        return raw

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
        if key == "PrivateUse1":
            return "its NPU (PrivateUse1) kernel, plain torch on CPU,"
        if key == "CPU":
            return f"its CPU kernel ({self.op.cpu_kernel + '; ' if self.op.cpu_kernel else ''}{why})"
        return "no kernel of the op"

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
        text = (f"{self.op.qualname}: {self.kernel()} draws random numbers while it is captured:\n  {_shown(where)}: "
                f"{code}\n  {op_name}: {RANDOM_IN_CAPTURE}. Pass random values in as a tensor argument, drawn outside "
                f"the graph (a warning-level finding: {ALLOW_RANDOM}=1 accepts it and compares only shapes and dtypes)")
        if not self.allow_random:
            raise CheckFailed(text, "random-op")
        import warnings

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
            _assert_matches_reference(self.op, actual, expected, f"{where}: output")
            for name in self.op.written:
                _assert_matches_reference(self.op, call[name], reference_call[name],
                                          f"{where}: mutated argument {name!r}, tensor")
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
        head = (f"{self.op.qualname}: npugraph_ex's AclGraph captured {self.kernel()} on CPU (opgen's emulated NPU "
                f"graph, tests/npu_graph_cpu.py): {self.launches} kernel launches recorded, {captures} capture and "
                f"{graph.replays} replays for {calls} calls; the kernel's Python ran {graph.kernel_runs} time(s) at "
                f"capture and {self.replayed_python} during replays")
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
    """npugraph_ex's backend and its own AclGraph capturing and replaying the op on CPU, over the emulated NPU graph
    of tests/npu_graph_cpu.py (static shapes, fullgraph): call 1 captures (then replays), calls 2 and 3 replay with
    new values (fixed ones, indices included, permuted), written buffers reused; each compared with `reference`
    (`reference(call)` returns the outputs and writes the Tensor(a!) arguments of `call`, like `op(call)`, the
    default: the CPU kernel, eager) on the same inputs, written buffers checked in the caller's memory. The kernel's
    Python runs once, at capture; call 1's outputs are intact or (static output memory) hold call 3's values; a host
    value the kernel reads from Python state per call is named (frozen at capture); new memory for a written
    argument recaptures once. A host sync in the kernel fails with its file, line and fix; random-number ops fail
    unless `allow_random` (default: the environment variable OPGEN_ALLOW_RANDOM_IN_CAPTURE=1), a warning then.
    `options`: CompilerConfig fields, for opgen's own tests.

    Returns (and prints) what happened: which kernel was captured, the launches, the static outputs, the recapture."""
    loader = npugraph_ex_cpu(capture=True)
    if allow_random is None:
        import os

        allow_random = os.environ.get(ALLOW_RANDOM) == "1"
    torch.compiler.reset()
    torch._dynamo.utils.counters.clear()
    with loader.Session(capture=True) as session, torch.no_grad():
        compiled = torch.compile(lambda **kwargs: op.overload(**kwargs), backend=session.backend(**(options or {})),
                                 fullgraph=True, dynamic=False)
        run = _CaptureRun(op, session, compiled, reference or op, allow_random)
        calls = _calls_with_reused_buffers(op, _new_values(make_call, reference or op), (0, 1, 2))
        for number, call in enumerate(calls, start=1):
            run.call(number, call)
        run.assert_outputs_kept(number)
        run.assert_nothing_frozen(call)
        captures = len(session.emulation.captures)
        if op.written:
            run.different_buffers(call)
        report = run.report(number, captures)
    print(report)
    return report
