"""The semantics language: parsing, checking, and the Python it prints run for real against torch."""

from __future__ import annotations

import ast
import os
import re
import string

import pytest
import torch

from opgen.errors import OpgenError
from opgen.schema import parse_schema
from opgen.spec.semantics import (
    DtypeRule,
    PyContext,
    Scope,
    SemanticsError,
    ShapeRule,
    binding_statements,
    parse_binding,
    parse_condition,
    parse_dtype,
    parse_shape,
)
from opgen.spec.semantics_ir import DTYPE_ALIASES, DTYPES

SHAPE_SCHEMA = parse_schema(
    "t::f(Tensor x, Tensor gamma, Tensor a, Tensor b, Tensor[] xs, Tensor? bias, int n, bool flag, "
    "int[] size, str mode, int? k, float eps, Tensor?[] ys, int[1]? dim) -> Tensor"
)


def _bindings(schema, pairs):
    """`let:` names as the loader builds them: each one may read the ones before it."""
    bindings = []
    for name, text in pairs:
        bindings.append(parse_binding(name, text, schema, Scope(bindings=tuple(bindings))))
    return tuple(bindings)


# every shape rule below is checked in this scope: `let:` names and the element index are readable
SHAPE_SCOPE = Scope(bindings=_bindings(SHAPE_SCHEMA, [("d", "wrap_dim(n, x)"), ("half", "x.shape[d] // 2"),
                                                        ("w", "xs[0]"), ("rows", "x.shape[:-1]")]))


def shape_inputs(**overrides):
    inputs = {
        "x": torch.randn(2, 3, 4), "gamma": torch.randn(4), "a": torch.randn(5, 1, 3), "b": torch.randn(4, 1),
        "xs": [torch.randn(2, 3) for _ in range(3)], "bias": None, "n": 3, "flag": True, "size": [7, 8],
        "mode": "mean", "k": None, "eps": 1e-6, "ys": [None, torch.randn(6)], "dim": None,
    }
    inputs.update(overrides)
    return inputs


def compile_fake(schema, *lines_and_exprs):
    """A function named like the schema arguments whose body is printed rules; returns its results."""
    params = ", ".join(a.name for a in schema.arguments)
    body = [line for statements, _ in lines_and_exprs for line in statements]
    results = ", ".join(expr for _, expr in lines_and_exprs)
    source = f"def fake({params}):\n" + "".join(f"    {line}\n" for line in body) + f"    return ({results},)\n"
    namespace = {"torch": torch}
    exec(compile(source, "<fake>", "exec"), namespace)  # noqa: S102 - running generated code is the test
    return namespace["fake"], source


def scoped_python(rule, scope, ctx=None):
    """(statements, expression) of a rule, its `let:` names assigned first, as a fake function prints them."""
    lets = binding_statements(scope.bindings, [rule], ctx)
    if isinstance(rule, ShapeRule):
        statements, expr = rule.python(ctx)
    else:
        statements, expr = rule.python_with_statements(ctx)
    return lets + statements, expr


def run_shape(text, schema=SHAPE_SCHEMA, **inputs):
    rule = parse_shape(text, schema, scope=SHAPE_SCOPE)
    fake, _ = compile_fake(schema, scoped_python(rule, SHAPE_SCOPE))
    (sizes,) = fake(**shape_inputs(**inputs))
    # The printed expression must be usable as the sizes of a new tensor.
    return list(torch.empty(sizes).shape)


SHAPE_CASES = [
    ("x.shape", {}, [2, 3, 4]),
    ("x.shape[:x.dim() - gamma.dim()] + [1] * gamma.dim()", {}, [2, 3, 1]),
    ("broadcast(a.shape, b.shape)", {}, [5, 4, 3]),
    ("broadcast(a, b, [1, 3])", {}, [5, 4, 3]),
    ("[len(xs)] + xs[0].shape", {}, [3, 2, 3]),
    ("[x.shape[-1], x.shape[0]]", {}, [4, 2]),
    ("x.shape[:-1]", {}, [2, 3]),
    ("x.shape[1:]", {}, [3, 4]),
    ("x.shape[1:-1]", {}, [3]),
    ("x.shape[-2:]", {}, [3, 4]),
    ("x.shape[:n - 1]", {}, [2, 3]),
    ("x.shape[:]", {}, [2, 3, 4]),
    ("[x.size(0), x.size(-1)]", {}, [2, 4]),
    ("x.size()", {}, [2, 3, 4]),
    ("[x.dim(), x.ndim, x.numel()]", {}, [3, 3, 24]),
    ("[len(xs), len(size), len(x.shape)]", {}, [3, 2, 3]),
    ("[xs[-1].shape[0]]", {}, [2]),
    ("xs[1].shape", {}, [2, 3]),
    ("[1] * n", {}, [1, 1, 1]),
    ("n * [1]", {}, [1, 1, 1]),
    ("x.shape * 2", {}, [2, 3, 4, 2, 3, 4]),
    ("[1, 2] * 2", {}, [1, 2, 1, 2]),
    ("[x.shape[0] + 1, x.shape[1] - 1, x.shape[2] * 2, x.shape[2] // 3, x.shape[2] % 3]", {}, [3, 2, 8, 1, 1]),
    ("[-x.shape[0] + 10, +x.shape[0]]", {}, [8, 2]),
    ("[- -x.shape[0], -(-n), -(x.shape[0] - 5)]", {}, [2, 3, 3]),
    ("[x.shape[0] - (x.shape[1] - x.shape[2])]", {}, [3]),
    ("[(x.shape[0] + 1) * 2, x.shape[2] // (x.shape[0] * 2)]", {}, [6, 1]),
    ("x.shape if flag else []", {}, [2, 3, 4]),
    ("x.shape if flag else []", {"flag": False}, []),
    ("[n if n > 2 and not flag else 0]", {}, [0]),
    ("[n if n > 2 or flag else 0]", {"flag": False}, [3]),
    ("[1 if mode == 'mean' else 2]", {}, [1]),
    ("[1 if mode != \"mean\" else 2]", {}, [2]),
    ("[1 if mode == 'say \"hi\"\\\\n' else 2]", {"mode": 'say "hi"\\n'}, [1]),
    ("[1 if mode == 'é\\t' else 2]", {"mode": "é\t"}, [1]),
    ("bias.shape if bias is not None else [x.shape[0]]", {}, [2]),
    ("bias.shape if bias is not None else [x.shape[0]]", {"bias": torch.randn(6)}, [6]),
    ("[x.shape[0]] if bias is None else bias.shape", {"bias": torch.randn(6)}, [6]),
    ("[bias.shape[0] if bias is not None and bias.dim() == 1 else 0]", {"bias": torch.randn(6)}, [6]),
    ("[0 if bias is None or bias.dim() != 1 else bias.shape[0]]", {"bias": torch.randn(6)}, [6]),
    ("[0 if not bias is not None else bias.shape[0]]", {"bias": torch.randn(5)}, [5]),
    ("[k if k is not None else n]", {}, [3]),
    ("[(k if k is None else 2) if k is not None else n]", {"k": 5}, [2]),
    ("ys[1].shape if ys[1] is not None and ys[1] is not None else []", {}, [6]),
    ("[k if k is not None else n]", {"k": 5}, [5]),
    ("ys[1].shape if ys[1] is not None else []", {}, [6]),
    ("ys[0].shape if ys[0] is not None else []", {}, []),
    ("size", {}, [7, 8]),
    ("size + [n]", {}, [7, 8, 3]),
    ("[*size, *x.shape[1:]]", {}, [7, 8, 3, 4]),
    ("[n, *size]", {}, [3, 7, 8]),
    ("size[-1:]", {}, [8]),
    ("[size[0], size[-1]]", {}, [7, 8]),
    ("[max(n, x.shape[0]), min(n, x.shape[0]), max(1, 2, n)]", {}, [3, 2, 3]),
    ("[x.shape[0]] + (x.shape[1:] if flag else [])", {}, [2, 3, 4]),
    ("(x.shape[0], x.shape[1])", {}, [2, 3]),
    ("(x.shape[0],)", {}, [2]),
    ("[]", {}, []),
    ("[1] if x.shape == a.shape else [0]", {}, [0]),
    ("[1] if x.shape == [2, 3, 4] else [0]", {}, [1]),
    ("[1] if [2, 3, 4] == x.shape else [0]", {}, [1]),
    ("[1] if x.shape[1:] != size else [0]", {}, [1]),
    ("[1] if x.dtype == float32 else [2]", {}, [1]),
    ("[1] if x.dtype != gamma.dtype else [2]", {}, [2]),
    ("[1] if flag == True else [2]", {}, [1]),
    ("[1] if False != flag else [2]", {"flag": False}, [2]),
    ("[1] if eps < 0.5 else [2]", {}, [1]),
    ("(x.shape[:-1] + [1])[0:1]", {}, [2]),
    ("[(x.shape[:-1] + [7])[-1]]", {}, [7]),
    ("broadcast(x.shape)", {}, [2, 3, 4]),
    ("x.shape\n    + [1]", {}, [2, 3, 4, 1]),
    ("  x.shape  ", {}, [2, 3, 4]),
    # reduce: a torch reduction's sizes (more cases, with torch as the oracle, in REDUCE_CASES below)
    ("reduce(x.shape, [-1])", {}, [2, 3]),
    ("reduce(x.shape, [0, 2], True)", {}, [1, 3, 1]),
    ("reduce(x.shape, [])", {}, []),
    ("reduce(x, size, keepdim=flag)", {"size": [1]}, [2, 1, 4]),
    ("reduce(x.shape[1:], [0], not flag)", {}, [4]),
    ("reduce(reduce(x, [n - 3]), [-1], True)", {}, [3, 1]),
    ("reduce(x.shape[:0], [-1], True)", {}, []),
    ("reduce(bias.shape, size) if bias is not None else []", {"bias": torch.randn(6, 2), "size": [-1]}, [6]),
    ("[len(xs)] + reduce(xs[0], [0])", {}, [3, 3]),
    # Python's `%`, `//`, negative indices and slice bounds that are not literals: the C++ must agree
    ("[n % 4, (n - 1) // 2 + 5]", {"n": -3}, [1, 3]),
    ("[n % 4, (n - 1) // 2 + 5]", {"n": 3}, [3, 6]),
    ("[x.shape[2] // n + 9, x.shape[2] % n + 5]", {"n": -3}, [7, 3]),
    ("x.shape[:n % x.dim()] + [x.shape[n] // 2] + x.shape[n % x.dim() + 1:]", {"n": -1}, [2, 3, 2]),
    ("x.shape[:n % x.dim()] + [x.shape[n] // 2] + x.shape[n % x.dim() + 1:]", {"n": 1}, [2, 1, 4]),
    ("x.shape[:n % x.dim()] + [x.shape[n] // 2] + x.shape[n % x.dim() + 1:]", {"n": -2}, [2, 1, 4]),
    ("x.shape[:n]", {"n": -1}, [2, 3]),
    ("x.shape[n:]", {"n": -2}, [3, 4]),
    ("x.shape[:n]", {"n": 5}, [2, 3, 4]),
    ("x.shape[n:]", {"n": -7}, [2, 3, 4]),
    ("x.shape[n:n + 2]", {"n": -3}, [2, 3]),
    ("x.shape[1:n]", {"n": -3}, []),
    ("size[n:]", {"n": -1}, [8]),
    ("[size[n], xs[n].shape[1]]", {"n": -1}, [8, 3]),
    ("[size[n], xs[n].shape[1]]", {"n": 0}, [7, 3]),
    # dimension helpers (a negative dim counts from the end, as in torch)
    ("replace_size(x.shape, n, 9)", {"n": -1}, [2, 3, 9]),
    ("replace_size(x.shape, n, 9)", {"n": 0}, [9, 3, 4]),
    ("replace_size(x, -1, x.shape[-1] // 2)", {}, [2, 3, 2]),
    ("replace_size(xs[0], n, 5)", {"n": -1}, [2, 5]),
    ("replace_size(size + [n], 0, 1)", {}, [1, 8, 3]),
    ("insert_size(x.shape, n, 1)", {"n": -1}, [2, 3, 4, 1]),
    ("insert_size(x.shape, n, 1)", {"n": 0}, [1, 2, 3, 4]),
    ("insert_size(x.shape, n, 1)", {"n": 3}, [2, 3, 4, 1]),
    ("insert_size(x.shape, n, 1)", {"n": -4}, [1, 2, 3, 4]),
    ("insert_size(size, 1, n)", {}, [7, 3, 8]),
    ("remove_size(x.shape, n)", {"n": -1}, [2, 3]),
    ("remove_size(x.shape, n)", {"n": 1}, [2, 4]),
    ("remove_size(size + [n], -1)", {}, [7, 8]),
    ("[wrap_dim(n, x), wrap_dim(n, size), wrap_dim(n, 5), wrap_dim(n, x.shape[1:])]", {"n": -1}, [2, 1, 4, 1]),
    ("[wrap_dim(n, x), wrap_dim(n, size), wrap_dim(n, 5)]", {"n": 1}, [1, 1, 1]),
    ("x.shape[wrap_dim(n, x):]", {"n": -2}, [3, 4]),
    ("[1] if x.is_contiguous() else [0]", {}, [1]),
    ("[1] if x.is_contiguous() else [0]", {"x": torch.randn(4, 3, 2).transpose(0, 2)}, [0]),
    # `let:` names (SHAPE_SCOPE): d = wrap_dim(n, x), half = x.shape[d] // 2, w = xs[0], rows = x.shape[:-1]
    ("replace_size(x.shape, d, half)", {"n": -1}, [2, 3, 2]),
    ("replace_size(x.shape, d, half)", {"n": 0}, [1, 3, 4]),
    ("rows + [half, w.shape[1]]", {"n": 1}, [2, 3, 1, 3]),
    ("[d] if flag else rows", {"n": -2}, [1]),
]


def _reduce_cases():
    """`reduce(x, dim, flag)` over shapes, dims (None, empty, negative, several) and keepdim; expected sizes
    from torch.sum itself, which also decides what an empty list means (every dimension, as for None)."""
    cases = []
    for x in (torch.randn(2, 3, 4), torch.tensor(1.0), torch.randn(5)):
        for dim in (None, [], [0], [-1], [0, -1], [2, 0]):
            for keepdim in (False, True):
                try:
                    expected = list(torch.sum(x, dim, keepdim).shape)
                except (IndexError, RuntimeError):  # out of range or repeated for this rank: torch refuses
                    continue
                cases.append(("reduce(x, dim, flag)", {"x": x, "dim": dim, "flag": keepdim}, expected))
    return cases


REDUCE_CASES = _reduce_cases()
SHAPE_CASES += REDUCE_CASES


@pytest.mark.parametrize(("text", "inputs", "expected"), SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_rule_python_runs_against_torch(text, inputs, expected):
    assert run_shape(text, **inputs) == expected


@pytest.mark.parametrize(("text", "inputs", "expected"), SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_rule_python_runs_on_symbolic_fake_tensors(text, inputs, expected):
    """What a fake function really receives under torch.compile(dynamic=True): SymInt sizes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    rule = parse_shape(text, SHAPE_SCHEMA, scope=SHAPE_SCOPE)
    fake, _ = compile_fake(SHAPE_SCHEMA, scoped_python(rule, SHAPE_SCOPE))
    real = shape_inputs(**inputs)
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        def to_fake(value):
            if isinstance(value, torch.Tensor):
                return mode.from_tensor(value)
            if isinstance(value, list) and any(isinstance(v, torch.Tensor) for v in value):
                return [to_fake(v) for v in value]
            return value

        fakes = {name: to_fake(value) for name, value in real.items()}
        assert real["x"].dim() == 0 or any(isinstance(s, torch.SymInt) for s in fakes["x"].shape)
        (sizes,) = fake(**fakes)
        out = fakes["x"].new_empty(sizes)
    assert [int(s) for s in out.shape] == expected


@pytest.mark.parametrize("text", ["x.shape", "broadcast(a.shape, b.shape)", "[len(xs)] + xs[0].shape"])
def test_shape_rule_readable_python(text):
    _, expr = parse_shape(text, SHAPE_SCHEMA).python()
    assert ast.parse(expr, mode="eval")


def test_python_snapshots():
    def py(text):
        return parse_shape(text, SHAPE_SCHEMA).python()

    assert py("x.shape") == ([], "x.shape")
    assert py("x.shape[:x.dim() - gamma.dim()] + [1] * gamma.dim()") == (
        [], "[*x.shape[:x.dim() - gamma.dim()], *([1] * gamma.dim())]")
    assert py("broadcast(a.shape, b.shape)") == ([], "torch.broadcast_shapes(a.shape, b.shape)")
    assert py("[len(xs)] + xs[0].shape") == ([], "[len(xs), *xs[0].shape]")
    assert py("[x.size(-1) // 2]") == ([], "[x.shape[-1] // 2]")
    assert py("bias.shape if bias is not None else []") == ([], "(bias.shape if bias is not None else [])")
    assert py("[x.shape[0] - (x.shape[1] - 1)]") == ([], "[x.shape[0] - (x.shape[1] - 1)]")
    assert py("[(x.shape[0] - x.shape[1]) - 1]") == ([], "[x.shape[0] - x.shape[1] - 1]")
    assert py("[dynamic(max=x.shape[0]), x.shape[1]]") == (
        ["_n0 = torch.library.get_ctx().new_dynamic_size()", "torch._check(_n0 <= x.shape[0])"],
        "[_n0, x.shape[1]]")
    assert py("[dynamic(min=1, max=16) * 2]") == (
        ["_n0 = torch.library.get_ctx().new_dynamic_size(min=1, max=16)"], "[_n0 * 2]")
    assert py("[dynamic(min=n), dynamic]") == (
        ["_n0 = torch.library.get_ctx().new_dynamic_size()", "torch._check(_n0 >= n)",
         "_n1 = torch.library.get_ctx().new_dynamic_size()"], "[_n0, _n1]")


def test_python_is_deterministic_and_context_shares_fresh_names():
    schema = parse_schema("t::u(Tensor x, Tensor _n0) -> (Tensor a, Tensor b)")
    first = parse_shape("[dynamic(max=x.shape[0])]", schema)
    second = parse_shape("[dynamic, _n0.shape[0]]", schema)
    assert first.python() == first.python()
    ctx = PyContext(reserved={"x", "_n0"})
    stmts_a, expr_a = first.python(ctx)
    stmts_b, expr_b = second.python(ctx)
    assert expr_a == "[_n1]" and expr_b == "[_n2, _n0.shape[0]]"
    assert stmts_a[0].startswith("_n1 = ") and stmts_b[0].startswith("_n2 = ")
    # Without a context, argument names are still avoided.
    assert second.python() == (["_n1 = torch.library.get_ctx().new_dynamic_size()"], "[_n1, _n0.shape[0]]")


def test_python_context_renames_arguments():
    rule = parse_shape("[len(xs)] + x.shape", SHAPE_SCHEMA)
    assert rule.python(PyContext(names={"x": "self_"})) == ([], "[len(xs), *self_.shape]")


def test_uses_and_is_dynamic():
    rule = parse_shape("bias.shape if bias is not None and flag else [x.shape[0] + n]", SHAPE_SCHEMA)
    assert rule.uses == frozenset({"bias", "flag", "x", "n"})
    assert not rule.is_dynamic
    assert parse_shape("[dynamic]", SHAPE_SCHEMA).is_dynamic
    assert parse_shape("[dynamic(max=x.shape[0])]", SHAPE_SCHEMA).uses == frozenset({"x"})
    assert isinstance(parse_shape("x.shape", SHAPE_SCHEMA), ShapeRule)
    assert isinstance(parse_dtype("x", SHAPE_SCHEMA), DtypeRule)
    assert parse_dtype("promote(x, gamma)", SHAPE_SCHEMA).uses == frozenset({"x", "gamma"})


def test_generated_module_passes_ruff(tmp_path):
    """Printed rules inside a fake function: no undefined names, no lint (as generated files must be)."""
    import subprocess
    import sys

    rules = [scoped_python(parse_shape(text, SHAPE_SCHEMA, scope=SHAPE_SCOPE), SHAPE_SCOPE) for text, _, _ in SHAPE_CASES]
    rules.append(parse_shape("[dynamic(max=x.shape[0]), dynamic(min=n)]", SHAPE_SCHEMA).python())
    dtype_params = ", ".join(a.name for a in DTYPE_SCHEMA.arguments)
    params = ", ".join(a.name for a in SHAPE_SCHEMA.arguments)
    lines = ["import torch", ""]
    for number, (statements, expr) in enumerate(rules):
        lines += ["", f"def fake_{number}({params}):", *(f"    {s}" for s in statements), f"    return {expr}", ""]
    for number, (text, _, _) in enumerate(DTYPE_CASES):
        statements, expr = scoped_python(parse_dtype(text, DTYPE_SCHEMA, scope=DTYPE_SCOPE), DTYPE_SCOPE)
        lines += ["", f"def dtype_{number}({dtype_params}):", *(f"    {s}" for s in statements), f"    return {expr}", ""]
    path = tmp_path / "fakes.py"
    path.write_text("\n".join(lines).rstrip() + "\n")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                             "--select", "E,F,W", "--ignore", "F841,E501", str(path)],
                            check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# dynamic: a real op whose fake function comes from the rule


def _register_dynamic_op(name, rule_text, kernel):
    schema = parse_schema(f"semtest::{name}(Tensor x, int n) -> Tensor")
    rule = parse_shape(rule_text, schema)
    dtype = parse_dtype("x", schema)
    statements, expr = rule.python()
    params = ", ".join(a.name for a in schema.arguments)
    source = (f"def fake({params}):\n" + "".join(f"    {s}\n" for s in statements)
              + f"    return x.new_empty({expr}, dtype={dtype.python()})\n")
    namespace = {"torch": torch}
    exec(compile(source, "<fake>", "exec"), namespace)  # noqa: S102 - running generated code is the test
    op = torch.library.custom_op(f"semtest::{name}", mutates_args=())(kernel)
    op.register_fake(namespace["fake"])
    return op, source


def _nonzero_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[x.sum(1) > 0].clone()


def test_dynamic_size_in_a_real_fake_impl():
    op, source = _register_dynamic_op("rows_max", "[dynamic(max=x.shape[0]), x.shape[1]]", _nonzero_rows)
    assert "new_dynamic_size()" in source and "torch._check(_n0 <= x.shape[0])" in source
    x = torch.tensor([[1.0, 2.0], [-5.0, 1.0], [3.0, 3.0]])
    torch.library.opcheck(op, (x, 1), test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv(allow_dynamic_output_shape_ops=True)
    with FakeTensorMode(shape_env=shape_env) as mode:
        fake_x = mode.from_tensor(x)
        out = torch.ops.semtest.rows_max(fake_x, 1)
    rows, cols = out.shape
    assert cols is fake_x.shape[1] or cols == fake_x.shape[1]
    (symbol,) = rows.node.expr.free_symbols
    assert symbol.name.startswith("u")  # unbacked: data-dependent
    # torch._check(_n0 <= x.shape[0]) reached the shape env as a relation to the symbolic input size.
    asserts = [str(a.expr) for a in shape_env.deferred_runtime_asserts[symbol]]
    assert asserts == [f"{symbol} <= {fake_x.shape[0]}"]

    compiled = torch.compile(lambda t: op(t, 1) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), op(x, 1) * 2)


def test_dynamic_size_with_static_bounds():
    def first_n(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[: max(1, (x.sum(1) > 0).sum().item())].clone()

    op, source = _register_dynamic_op("rows_bounded", "[dynamic(min=1, max=8), x.shape[1]]", first_n)
    assert "new_dynamic_size(min=1, max=8)" in source
    x = torch.tensor([[1.0, 2.0], [-5.0, 1.0], [3.0, 3.0]])
    torch.library.opcheck(op, (x, 1), test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv(allow_dynamic_output_shape_ops=True)
    with FakeTensorMode(shape_env=shape_env) as mode:
        out = torch.ops.semtest.rows_bounded(mode.from_tensor(x), 1)
    value_range = shape_env.var_to_range[next(iter(out.shape[0].node.expr.free_symbols))]
    assert (int(value_range.lower), int(value_range.upper)) == (1, 8)


def test_outputs_share_one_dynamic_size_through_an_earlier_output():
    """unique-style op: `counts` has the data-dependent length of `values`, not a second unknown size."""
    schema = parse_schema("semtest::unique_counts(Tensor x) -> (Tensor values, Tensor counts)")
    values_shape = parse_shape("[dynamic(max=x.numel())]", schema)
    counts_shape = parse_shape("values.shape", schema, outputs=["values"])
    counts_dtype = parse_dtype("int64", schema, outputs=["values"])
    assert counts_shape.uses == frozenset() and counts_shape.uses_outputs == {"values"}
    ctx = PyContext(reserved={"x", "values", "counts"})
    statements, values_expr = values_shape.python(ctx)
    _, counts_expr = counts_shape.python(ctx)
    source = ("def fake(x):\n" + "".join(f"    {s}\n" for s in statements)
              + f"    values = x.new_empty({values_expr})\n"
              + f"    counts = x.new_empty({counts_expr}, dtype={counts_dtype.python(ctx)})\n"
              + "    return values, counts\n")
    namespace = {"torch": torch}
    exec(compile(source, "<fake>", "exec"), namespace)  # noqa: S102 - running generated code is the test

    @torch.library.custom_op("semtest::unique_counts", mutates_args=())
    def unique_counts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, counts = torch.unique(x, return_counts=True)
        return values, counts

    unique_counts.register_fake(namespace["fake"])
    x = torch.tensor([3.0, 1.0, 3.0, 2.0])
    torch.library.opcheck(unique_counts, (x,), test_utils=("test_schema", "test_faketensor",
                                                           "test_aot_dispatch_dynamic"))
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv(allow_dynamic_output_shape_ops=True)) as mode:
        values, counts = unique_counts(mode.from_tensor(x))
    assert values.shape[0] is counts.shape[0] or values.shape[0].node.expr == counts.shape[0].node.expr
    assert counts.dtype == torch.int64
    def weighted(t):
        values, counts = unique_counts(t)
        return values * counts  # one length, by the rule

    compiled = torch.compile(weighted, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), torch.tensor([1.0, 2.0, 6.0]))


def test_an_output_not_yet_computed_is_a_clear_error():
    schema = parse_schema("t::u(Tensor x) -> (Tensor values, Tensor counts)")
    with pytest.raises(SemanticsError) as info:
        parse_shape("[values.shape[0] + 1]", schema)
    assert info.value.message == "`values` is an output that is not computed before this rule"
    assert info.value.column == 2 and "(here: none)" in info.value.hint
    with pytest.raises(SemanticsError) as info:
        parse_shape("valuse.shape", schema, outputs=["values"])
    assert "did you mean `values`?" in info.value.hint and "earlier outputs: values" in info.value.hint
    # An argument of the same name as an earlier output wins: rules always mean the op's inputs first.
    clash = parse_schema("t::v(Tensor values) -> (Tensor values, Tensor other)")
    assert parse_shape("values.shape", clash, outputs=["values"]).uses == {"values"}


# ---------------------------------------------------------------------------------------------
# dtype rules

DTYPE_SCHEMA = parse_schema(
    "t::g(Tensor x, Tensor h, Tensor i, ScalarType out_dtype, bool upcast, ScalarType? dtype=None, int code=1, "
    "int? dst_type=None) -> Tensor")
# torch_npu's codes (TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP of its Meta functions), a few of them
DTYPE_SCOPE = Scope(dtype_codes=((1, "int8"), (5, "float16"), (23, "float8_e5m2"), (24, "float8_e4m3fn"),
                                 (290, "uint8"), (291, "float8_e5m2")),
                    bindings=_bindings(DTYPE_SCHEMA, [("wide", "float32 if h.dtype == float16 else h")]))


def dtype_inputs(**overrides):
    inputs = {"x": torch.randn(2), "h": torch.randn(2).half(), "i": torch.arange(2), "dtype": None,
              "out_dtype": torch.int8, "upcast": True, "code": 1, "dst_type": None}
    inputs.update(overrides)
    return inputs


def run_dtype(text, **overrides):
    inputs = dtype_inputs(**overrides)
    rule = parse_dtype(text, DTYPE_SCHEMA, scope=DTYPE_SCOPE)
    fake, _ = compile_fake(DTYPE_SCHEMA, scoped_python(rule, DTYPE_SCOPE))
    (dtype,) = fake(**inputs)
    assert isinstance(dtype, torch.dtype)
    return dtype


DTYPE_CASES = [
    ("x.dtype", {}, torch.float32),
    ("h", {}, torch.float16),
    ("float32", {}, torch.float32),
    ("bfloat16", {}, torch.bfloat16),
    ("int64", {}, torch.int64),
    ("bool", {}, torch.bool),
    ("complex64", {}, torch.complex64),
    ("float", {}, torch.float32),
    ("half", {}, torch.float16),
    ("long", {}, torch.int64),
    ("int", {}, torch.int32),
    ("double", {}, torch.float64),
    ("promote(x, i)", {}, torch.float32),
    ("promote(h, i)", {}, torch.float16),
    ("promote(h, x.dtype, float64)", {}, torch.float64),
    ("promote(i, bool)", {}, torch.int64),
    ("dtype or x.dtype", {}, torch.float32),
    ("dtype or x.dtype", {"dtype": torch.bfloat16}, torch.bfloat16),
    ("dtype or h", {}, torch.float16),
    ("dtype if dtype is not None else x.dtype", {}, torch.float32),
    ("dtype if dtype is not None else x.dtype", {"dtype": torch.int32}, torch.int32),
    ("x.dtype if dtype is None else dtype", {"dtype": torch.int32}, torch.int32),
    ("out_dtype", {}, torch.int8),
    ("float32 if h.dtype == float16 else h", {}, torch.float32),
    ("float32 if upcast else h", {"upcast": False}, torch.float16),
    ("x if upcast else h", {"upcast": False}, torch.float16),
    ("promote(dtype or x, i)", {"dtype": torch.float64}, torch.float64),
    ("float8_e4m3fn", {}, torch.float8_e4m3fn),
    ("from_code(code)", {}, torch.int8),
    ("from_code(code)", {"code": 24}, torch.float8_e4m3fn),
    ("from_code(dst_type) if dst_type is not None else int8", {"dst_type": 291}, torch.float8_e5m2),
    ("from_code(dst_type) if dst_type is not None else int8", {}, torch.int8),
    ("float16 if from_code(code) == float16 else from_code(23)", {"code": 5}, torch.float16),
    ("float16 if from_code(code) == float16 else from_code(23)", {}, torch.float8_e5m2),
    ("wide", {}, torch.float32),
    ("promote(wide, x)", {"h": torch.randn(2).bfloat16()}, torch.float32),
]
# every dtype name and alias of the table, so that each one's ATen constant is compiled below
DTYPE_CASES += [(name, {}, getattr(torch, name)) for name in [*DTYPES, *DTYPE_ALIASES] if (name, {}, getattr(torch, name))
                not in DTYPE_CASES]


@pytest.mark.parametrize(("text", "inputs", "expected"), DTYPE_CASES, ids=[c[0] for c in DTYPE_CASES])
def test_dtype_rule_python_runs_against_torch(text, inputs, expected):
    assert run_dtype(text, **inputs) == expected


def test_dtype_python_snapshots():
    def py(text):
        return parse_dtype(text, DTYPE_SCHEMA).python()

    assert py("x.dtype") == "x.dtype"
    assert py("x") == "x.dtype"
    assert py("float") == "torch.float32"
    assert py("promote(x, i)") == "torch.promote_types(x.dtype, i.dtype)"
    assert py("dtype or x.dtype") == "(dtype if dtype is not None else x.dtype)"
    assert py("dtype if dtype is not None else x.dtype") == "(dtype if dtype is not None else x.dtype)"


def test_dtype_table_names_real_torch_dtypes():
    for name, (attribute, _) in DTYPES.items():
        assert isinstance(getattr(torch, attribute), torch.dtype), name
    for alias, target in DTYPE_ALIASES.items():
        assert getattr(torch, alias) == getattr(torch, DTYPES[target][0]), alias


def test_dtype_table_has_every_torch_dtype():
    """float8, packed low-bit and quantized dtypes included (`float8_e4m3fn` once got "did you mean float64?")."""
    everything = {value for value in vars(torch).values() if isinstance(value, torch.dtype)}
    assert everything == {getattr(torch, attribute) for attribute, _ in DTYPES.values()}
    spelled = {name for name, value in vars(torch).items() if isinstance(value, torch.dtype)}
    assert spelled == {*DTYPES, *DTYPE_ALIASES}


# ---------------------------------------------------------------------------------------------
# errors: message, column, hint


ERROR_CASES = [
    # (kind, text, message regex, column, hint regex)
    ("shape", "gama.shape", r"unknown name `gama`", 1, r"did you mean `gamma`\?.*arguments are: x, gamma"),
    ("shape", "[x.shape[0], nn]", r"unknown name `nn`", 14, r"did you mean `n`\?"),
    ("shape", "broadcst(a.shape, b.shape)", r"unknown function `broadcst`", 1, r"did you mean `broadcast`\?"),
    ("shape", "foo(x)", r"unknown function `foo`", 1, r"the functions are broadcast, dynamic"),
    ("shape", "len", r"`len` is a function: call it", 1, r"len\(xs\)"),
    ("shape", "[len(xs, xs)]", r"`len\(\)` takes 1 argument, got 2", 2, r"len\(xs\)"),
    ("shape", "broadcast()", r"`broadcast\(\)` takes at least 1 argument, got 0", 1, r"broadcast\(a.shape"),
    ("shape", "[x.size(0, 1)]", r"`.size\(\)` takes 0 or 1 arguments, got 2", 2, r"x.size\(0\)"),
    ("shape", "[x.dim(0)]", r"`.dim\(\)` takes no arguments, got 1", 2, r"x.dim\(\)"),
    ("shape", "[max(n)]", r"`max\(\)` takes at least 2 arguments, got 1", 2, None),
    ("dtype", "promote(x)", r"`promote\(\)` takes at least 2 arguments, got 1", 1, r"promote\(x, y\)"),
    ("shape", "eps.shape", r"`.shape` needs a tensor, but `eps` is a float", 1, None),
    ("shape", "[n.size(0)]", r"`.size\(\)` needs a tensor, but `n` is an int", 2, None),
    ("shape", "xs.shape", r"`.shape` needs a tensor, but `xs` is a tensor list", 1, r"xs\[0\].shape"),
    ("shape", "size.shape", r"`.shape` needs a tensor, but `size` is a list of sizes", 1, r"use it directly"),
    ("shape", "[len(n)]", r"`len\(\)` needs a list, but `n` is an int", 6, r"Tensor\[\] or int\[\]"),
    ("shape", "[len(x)]", r"`len\(\)` needs a list, but `x` is a tensor", 6, r"x.dim\(\)"),
    ("shape", "[x.dtype]", r"expected a list element \(an int\), got a dtype: `x.dtype`", 2, r"dtype"),
    ("shape", "x.dtype", r"a shape rule must be a list of sizes, got a dtype", 1, r"`dtype:` field"),
    ("shape", "[float32]", r"expected a list element \(an int\), got a dtype", 2, None),
    ("shape", "[x.shape[0] * eps]", r"float arithmetic on sizes: `eps` is a float", 15, r"integers"),
    ("shape", "[x.shape[0] * 0.5]", r"float arithmetic on sizes: `0.5` is a float", 15, None),
    ("shape", "[x.shape[0] / 2]", r"`/` is true division", 2, r"use `//`"),
    ("shape", "x.shape[:x.dim() / 2]", r"`/` is true division", 10, r"use `//`"),
    ("shape", "lambda: x.shape", r"unsupported syntax: a lambda", 1, r"rules may use"),
    ("shape", "[i for i in size]", r"unsupported syntax: a list comprehension", 1, None),
    ("shape", "[x.shape[0] ** 2]", r"unsupported operator", 2, r"\+ - \* // %"),
    ("shape", "[x.shape[0] << 1]", r"unsupported operator", 2, None),
    ("shape", "x.device", r"unsupported attribute `.device`", 3, r"tensors offer `.shape`"),
    ("shape", "[x.storage_offset()]", r"unsupported attribute `.storage_offset`", 4, r"tensors offer .*`.stride\(i\)`"),
    ("shape", "x.shap", r"unsupported attribute `.shap`", 3, r"did you mean `.shape`\?"),
    ("shape", "[x.dim]", r"`.dim` is a method: call it", 4, r"x.dim\(\)"),
    ("shape", "x.shape()", r"`.shape` is not a method", 1, r"write `x.shape`"),
    ("shape", "bias.shape", r"`bias` is optional \(a tensor or None\) and may be None here", 1,
     r"bias.shape if bias is not None else"),
    ("shape", "[k]", r"`k` is optional \(an int or None\)", 2, r"is not None"),
    ("shape", "ys[0].shape", r"`ys\[0\]` is optional", 1, None),
    ("shape", "bias.shape if bias is None else []", r"`bias` is optional", 1, None),
    ("shape", "x.shape if x is not None else []", r"`x` is a tensor and is never None", 12, r"optional arguments"),
    ("shape", "x.shape if bias is 3 else []", r"`is` / `is not` only compare with None", 20, r"use `==`"),
    ("shape", "n", r"a shape rule must be a list of sizes, got an int: `n`", 1, r"write `\[n\]`"),
    ("shape", "x", r"a shape rule must be a list of sizes, got a tensor: `x`", 1, r"use `x.shape`"),
    ("shape", "xs", r"got a tensor list", 1, r"xs\[0\].shape"),
    ("shape", "x.shape + 1", r"cannot apply `\+` to a list of sizes and an int", 1, r"shape \+ \[n\]"),
    ("shape", "x.shape - [1]", r"cannot apply `-` to a list of sizes", 1, r"concatenate"),
    ("shape", "[x.shape]", r"expected a list element \(an int\), got a list of sizes", 2, r"x.shape\[0\]"),
    ("shape", "x[0].shape", r"indexing the tensor `x` would read its data", 1, r"x.shape\[i\]"),
    ("shape", "[n[0]]", r"`n` is an int and cannot be indexed", 2, None),
    ("shape", "x.shape[::2]", r"slices with a step are not supported", 11, None),
    ("shape", "xs[1:]", r"slicing the tensor list `xs` is not supported", 4, r"xs\[0\]"),
    ("shape", "[1] if flag else x.dtype", r"the branches of `if ... else` differ", 1, r"both branches"),
    ("shape", "[1] if n else []", r"a condition must be a bool, got an int", 8, r"n != 0"),
    ("shape", "[1] if k else []", r"a condition must be a bool, got an optional int", 8, r"`k is not None`"),
    ("shape", "[1] if 0 < n < 3 else []", r"chained comparisons", 8, r"and"),
    ("shape", "[1] if n in size else []", r"unsupported comparison", 8, None),
    ("shape", "[1] if x.shape < a.shape else []", r"`<` does not order", 8, r"`==`"),
    ("shape", "[1] if x == a else []", r"cannot compare two tensors", 8, r"`x.dtype == a.dtype` or `x.shape == a.shape`"),
    ("shape", "[1] if x == n else []", r"cannot compare a tensor", 8, r"dtypes with dtypes"),
    ("shape", "[dynamic if flag else 1]", r"`dynamic` cannot be used here", 2, r"element of the shape list"),
    ("shape", "[1] * dynamic", r"`dynamic` cannot be used in a repetition count", 7, r"element of the shape"),
    ("shape", "x.shape[:dynamic]", r"`dynamic` cannot be used here", 10, None),
    ("shape", "[dynamic(3)]", r"`dynamic` takes only keyword arguments", 10, r"dynamic\(max="),
    ("shape", "[dynamic(maxx=3)]", r"`dynamic` has no argument `maxx`", 10, r"did you mean `max=`\?"),
    ("shape", "[dynamic(min=-1)]", r"`min=-1`: a size is never negative", 14, None),
    ("shape", "[dynamic(min=4, max=2)]", r"`max=2` is below `min=4`", 21, None),
    ("shape", "[dynamic(max=dynamic)]", r"`dynamic` cannot be used here", 14, None),
    ("shape", "[dynamic(max=eps)]", r"float arithmetic on sizes: `eps` is a float, the `max=` bound", 14, None),
    ("shape", "x.shape[", r"not a valid expression: '\[' was never closed", 8, r"Python expression syntax"),
    ("shape", "x.shape +", r"not a valid expression: the expression ends too early", 10, None),
    ("shape", "[x.shape[0] if n]", r"expected 'else' after 'if' expression", 2, None),
    ("shape", "", r"empty rule", 1, r"x.shape"),
    ("shape", "x.shape  # all of it", r"comments are not allowed", 10, r"doc"),
    ("shape", "[x.shape[0],\n nn]", r"unknown name `nn`", 2, None),
    ("shape", "[len(g)]", r"argument `g` has type `Generator\?`", 6, r"rules can use"),
    ("shape", "[n if True else eps]", r"the branches of `if ... else` differ", 2, None),
    ("shape", "[1] if mode else []", r"a condition must be a bool, got a string", 8, None),
    ("shape", "[1] if not n else []", r"a condition must be a bool", 12, None),
    ("shape", "[flag]", r"expected a list element \(an int\), got a bool", 2, r"1 if flag else 0"),
    ("shape", "x.shape + [~n]", r"unsupported operator `~`", 12, None),
    ("shape", "[len(*xs)]", r"`\*` unpacking in a call", 6, None),
    ("shape", "[len(xs=1)]", r"`len` takes no keyword arguments", 9, None),
    ("shape", "*x.shape", r"not a valid expression|unsupported syntax", 1, None),
    ("shape", "{1: 2}", r"unsupported syntax: a dict", 1, None),
    ("shape", "f'{n}'", r"unsupported syntax: an f-string", 1, None),
    ("shape", "[1j]", r"unsupported literal `1j`", 2, None),
    ("shape", "[1] if eps < 1e999 else []", r"`1e999` is not a finite number", 14, None),
    ("shape", "[n if True else 99999999999999999999]", r"does not fit in int64", 17, None),
    ("shape", "xs if flag else xs", r"got a tensor list: `xs if flag else xs`", 1, r"`\(xs if flag else xs\)\[0\]"),
    ("shape", "x if flag else a", r"got a tensor", 1, r"use `\(x if flag else a\).shape`"),
    ("dtype", "[1]", r"a dtype rule must be a dtype, got a list of sizes", 1, r"dtype name such as `float32`"),
    ("dtype", "flaot32", r"unknown name `flaot32`", 1, r"did you mean `float32`\?"),
    ("dtype", "dtype", r"`dtype` is optional \(a dtype or None\)", 1, r"`dtype or x.dtype`"),
    ("dtype", "upcast or x.dtype", r"a condition must be a bool, got a dtype", 11, None),
    ("dtype", "x.dtype or dtype", r"a condition must be a bool, got a dtype", 1, None),
    ("dtype", "promote(x, [1])", r"an argument of `promote` must be a dtype, got a list of sizes", 12, None),
    ("dtype", "dynamic", r"a dtype rule must be a dtype, got an int", 1, None),
    ("dtype", "torch.float32", r"`torch.float32`: rules are not Python run with torch", 1, r"write `float32`"),
    ("shape", "torch.broadcast_shapes(a, b)", r"rules are not Python run with torch", 1, r"`broadcast\(...\)`"),
    ("shape", "torch", r"`torch` is unknown", 1, r"write dtypes bare"),
    ("shape", "reduce(x.shape)", r"`reduce\(\)` takes 2 or 3 arguments, got 1", 1, r"reduce\(x.shape, dims, keepdim\)"),
    ("shape", "reduce", r"`reduce` is a function: call it", 1, r"reduce\(x.shape, dims, keepdim\)"),
    ("shape", "reduce(x.shape, n)", r"the dims of `reduce` must be a list of ints, got an int: `n`", 17, r"`\[n\]`"),
    ("shape", "reduce(x.shape, x)", r"the dims of `reduce` must be a list of ints, got a tensor", 17, r"int\[\]"),
    ("shape", "reduce(n, size)", r"the shape reduced by `reduce` must be a list of sizes, got an int", 8, r"`\[n\]`"),
    ("shape", "reduce(bias, size)", r"`bias` is optional", 8, r"is not None"),
    ("shape", "reduce(x.shape, size, n)", r"`keepdim` of `reduce` must be a bool, got an int: `n`", 23, r"bool"),
    ("shape", "reduce(x.shape, size, keepdim=mode)", r"`keepdim` of `reduce` must be a bool, got a string", 31, None),
    ("shape", "reduce(x.shape, size, keep=flag)", r"`reduce` has no argument `keep`", 23, r"did you mean `keepdim=`"),
    ("shape", "reduce(x.shape, size, flag, keepdim=flag)", r"`keepdim` is given twice", 29, r"drop"),
    ("shape", "reduce(x.shape, [0, -1, 0])", r"dim 0 appears twice in the dims of `reduce`", 25, r"once"),
    ("shape", "reduce(x.shape, [dynamic])", r"`dynamic` cannot be used here", 18, None),
    ("shape", "reduce(x.shape, [eps])", r"float arithmetic on sizes: `eps` is a float", 18, None),
    ("shape", "[reduce(x.shape, size)]", r"expected a list element \(an int\), got a list of sizes", 2, None),
    # dimension helpers, `let:` names, dtype codes
    ("shape", "replace_size(x.shape, n)", r"`replace_size\(\)` takes 3 arguments, got 2", 1, r"x.shape\[dim\] // 2"),
    ("shape", "remove_size(x.shape, eps)", r"float arithmetic on sizes: `eps`", 22, None),
    ("shape", "insert_size(mode, 0, 1)", r"the shape of `insert_size` must be a list of sizes, got a string", 13, None),
    ("shape", "replace_size(x, 0, size)", r"expected the size of `replace_size` \(an int\), got a list", 20, r"size\[0\]"),
    ("shape", "[wrap_dim(n, mode)]", r"expected a rank \(an int\), got a string", 14, None),
    ("shape", "[wrap_dim(n, bias)]", r"`bias` is optional", 14, r"is not None"),
    ("shape", "[x.is_contiguous]", r"`.is_contiguous` is a method: call it", 4, r"x.is_contiguous\(\)"),
    ("shape", "[x.is_contiguos()]", r"unsupported attribute `.is_contiguos`", 4, r"did you mean `.is_contiguous`"),
    ("shape", "[half + hlaf]", r"unknown name `hlaf`", 9, r"did you mean `half`\?.*`let:` names: d, half, w, rows"),
    ("shape", "[w]", r"expected a list element \(an int\), got a tensor: `w`", 2, r"w.shape\[i\]"),
    ("dtype", "from_code(code)", r"`from_code` needs the spec's `dtype_codes:` table", 1, r"dtype_codes: \{1: int8"),
    ("dtype", "from_code(7)", r"dtype code 7 is not in the spec's `dtype_codes:`", 11, r"codes: 1, 5, 23"),
    ("dtype", "from_code(dst_type)", r"`dst_type` is optional", 11, r"is not None"),
    ("dtype", "from_code(x)", r"expected a dtype code \(an int\), got a tensor", 11, None),
    ("dtype", "float8_e4m3", r"unknown name `float8_e4m3`", 1, r"did you mean `float8_e4m3fn`\?"),
]


@pytest.mark.parametrize(("kind", "text", "message", "column", "hint"), ERROR_CASES,
                         ids=[f"{c[0]}:{c[1]}" for c in ERROR_CASES])
def test_errors_have_message_column_and_hint(kind, text, message, column, hint):
    schema = SHAPE_SCHEMA if kind == "shape" else DTYPE_SCHEMA
    if "`g`" in message:
        schema = parse_schema("t::h(Tensor x, Generator? g) -> Tensor")
    if kind == "dtype" and text.startswith("promote"):
        schema = SHAPE_SCHEMA
    parse = parse_shape if kind == "shape" else parse_dtype
    # `from_code(code)` without a table is an error of its own; the other dtype codes have DTYPE_SCOPE's
    scope = SHAPE_SCOPE if kind == "shape" else Scope() if text == "from_code(code)" else DTYPE_SCOPE
    with pytest.raises(SemanticsError) as info:
        parse(text, schema, scope=scope)
    error = info.value
    assert isinstance(error, OpgenError)
    assert re.search(message, error.message), error.render()
    assert error.column == column, error.render()
    assert error.hint, error.render()  # every error says what to do instead
    if hint is not None:
        assert re.search(hint, error.hint), error.render()


@pytest.mark.parametrize("parse", [parse_shape, parse_dtype])
def test_absurdly_deep_rule_is_an_error_not_a_crash(parse):
    deep = "[" + " + ".join(["n"] * 20000) + "]"
    with pytest.raises(SemanticsError) as info:
        parse(deep, SHAPE_SCHEMA)
    assert "nests more than 64 levels deep" in info.value.message and info.value.column


def test_error_renders_caret_and_relocates_into_a_file():
    with pytest.raises(SemanticsError) as info:
        parse_shape("x.shape[:x.dim() - gama.dim()]", SHAPE_SCHEMA)
    text = info.value.render()
    assert text.splitlines()[1:3] == ["  | x.shape[:x.dim() - gama.dim()]", "  |                    ^"]
    located = info.value.located(path="opgen.yaml", line=7, column_offset=14)
    assert isinstance(located, SemanticsError)
    assert located.render().startswith("error: opgen.yaml:7:34: unknown name `gama`")


def test_multiline_error_reports_line_within_the_rule():
    with pytest.raises(SemanticsError) as info:
        parse_shape("[x.shape[0],\n  nn]", SHAPE_SCHEMA)
    assert (info.value.expr_line, info.value.column, info.value.source) == (2, 3, "  nn]")


def test_non_ascii_text_keeps_character_columns():
    with pytest.raises(SemanticsError) as info:
        parse_shape("[n, 'é' == mode, nn]", SHAPE_SCHEMA)
    # The element `'é' == mode` is a bool; its column counts characters, not UTF-8 bytes.
    assert info.value.column == 5
    with pytest.raises(SemanticsError) as info:
        parse_shape("[1 if mode == 'é' else 2, nn]", SHAPE_SCHEMA)
    assert info.value.column == 27
    with pytest.raises(SemanticsError) as info:
        parse_shape("[1 if mode == 'éé' else 2 +]", SHAPE_SCHEMA)
    assert info.value.column == 28  # a syntax error, located by Python, in characters too


# ---------------------------------------------------------------------------------------------
# C++


def cpp(text, schema=SHAPE_SCHEMA):
    return parse_shape(text, schema, scope=SHAPE_SCOPE).cpp()


def test_cpp_snapshots():
    assert cpp("x.shape") == "x.sizes()"
    assert cpp("[x.size(0), x.shape[-1] // 2]") == "c10::SmallVector<int64_t, 8>{x.size(0), x.size(-1) / 2}"
    assert cpp("broadcast(a.shape, b.shape)") == "at::infer_size(a.sizes(), b.sizes())"
    assert cpp("x.shape[:-1]") == "x.sizes().slice(0, x.dim() - 1)"
    assert cpp("x.shape[1:]") == "x.sizes().slice(1)"
    assert cpp("[1] * gamma.dim()") == "c10::SmallVector<int64_t, 8>(static_cast<size_t>(gamma.dim()), 1)"
    assert cpp("[len(xs)] + xs[0].shape") == (
        "[&] { c10::SmallVector<int64_t, 8> sizes; sizes.push_back(static_cast<int64_t>(xs.size())); "
        "for (int64_t size_ : xs[0].sizes()) sizes.push_back(size_); return sizes; }()")
    assert cpp("bias.shape if bias is not None else [x.shape[0]]") == (
        "(bias.has_value() ? c10::SmallVector<int64_t, 8>(bias->sizes()) : c10::SmallVector<int64_t, 8>{x.size(0)})")
    assert cpp("[k if k is not None else n]") == "c10::SmallVector<int64_t, 8>{k.has_value() ? k.value() : n}"
    assert cpp("[1] if not flag and mode == 'mean' else []") == (
        '(!flag && mode == "mean" ? c10::SmallVector<int64_t, 8>{1} : c10::SmallVector<int64_t, 8>{})')


def test_cpp_dtype_snapshots():
    def dtype_cpp(text):
        return parse_dtype(text, DTYPE_SCHEMA).cpp()

    assert dtype_cpp("x") == "x.scalar_type()"
    assert dtype_cpp("float32") == "at::kFloat"
    assert dtype_cpp("promote(x, i)") == "at::promote_types(x.scalar_type(), i.scalar_type())"
    assert dtype_cpp("dtype or x.dtype") == "dtype.value_or(x.scalar_type())"
    assert dtype_cpp("dtype if dtype is not None else x.dtype") == "dtype.value_or(x.scalar_type())"
    assert dtype_cpp("float32 if upcast else x") == "(upcast ? at::kFloat : x.scalar_type())"


def test_cpp_refuses_dynamic_with_location():
    with pytest.raises(SemanticsError) as info:
        cpp("[x.shape[0], dynamic(max=n)]")
    assert "not expressible in C++" in info.value.message
    assert info.value.column == 14 and info.value.hint


# `if (` is C++'s statement (inside a lambda); a Python conditional always has its `else` too.
_PYTHON_ONLY = re.compile(r"\b(and|or|not|is|None|True|False|if(?! \()|else|torch|len)\b|//|\*\*|\[:|:\]|\.shape\b|"
                          r"\.dtype\b")


def _balanced(text):
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', text):
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


@pytest.mark.parametrize("text", [c[0] for c in SHAPE_CASES])
def test_cpp_is_structurally_sane_for_every_shape_construct(text):
    out = cpp(text)
    assert _balanced(out), out
    assert not _PYTHON_ONLY.search(re.sub(r'"[^"]*"', '""', out)), out


@pytest.mark.parametrize("text", [c[0] for c in DTYPE_CASES])
def test_cpp_is_structurally_sane_for_every_dtype_construct(text):
    out = parse_dtype(text, DTYPE_SCHEMA, scope=DTYPE_SCOPE).cpp()
    assert _balanced(out), out
    assert not _PYTHON_ONLY.search(re.sub(r'"[^"]*"', '""', out)), out


def test_semantics_module_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, opgen.spec.semantics as s; from opgen.schema import parse_schema; "
            "s.parse_shape('x.shape', parse_schema('t::f(Tensor x) -> Tensor')).python(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# C++ compiled for real: every shape and dtype construct gives the same answer as its Python


def _cpp_library_source(schema, rules, kind):
    """Each rule as the body of an op `<kind>_<n>` taking the schema's arguments with the C++ parameter types an
    op_plugin kernel has (opgen.schema.types.cpp_type), registered with torch's dispatcher, which unboxes Python's
    arguments into them as it does for a real kernel; the op returns the sizes (int[]) or the ScalarType."""
    from opgen.schema.types import cpp_type

    params = ", ".join(f"{cpp_type(a)} {a.name}" for a in schema.arguments)
    arguments = ", ".join(str(a) for a in schema.arguments)
    lines, definitions = [], []
    for number, rule in enumerate(rules):
        name = f"{kind}_{number}"
        if kind == "shape":
            lines += [f"static std::vector<int64_t> {name}({params}) {{", f"  const auto& sizes = {rule.cpp()};",
                      "  return std::vector<int64_t>(sizes.begin(), sizes.end());", "}"]
            definitions.append(f'  m.def("{name}({arguments}) -> int[]", &{name});')
        else:
            lines += [f"static at::ScalarType {name}({params}) {{", f"  return {rule.cpp()};", "}"]
            definitions.append(f'  m.def("{name}({arguments}) -> ScalarType", &{name});')
    return lines, definitions


@pytest.fixture(scope="session")  # one compile per worker, kept while other modules' tests run in between
def compiled_rules(tmp_path_factory):
    """torch.ops.opgen_rules, every shape and dtype case of this module printed in C++ and compiled. The source
    includes the dispatcher's headers and the few ATen/c10 ones the printed rules call, not torch/extension.h
    (pybind11 and all of ATen's API: three quarters of the compile's 22 CPU-s)."""
    import shutil

    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler (c++) on PATH: cannot compile the C++ printing")
    from torch.utils.cpp_extension import load

    from opgen.spec.semantics_ir import FLOOR_DIV_HEADER

    shape_rules = [parse_shape(text, SHAPE_SCHEMA, scope=SHAPE_SCOPE) for text, _, _ in SHAPE_CASES]
    dtype_rules = [parse_dtype(text, DTYPE_SCHEMA, scope=DTYPE_SCOPE) for text, _, _ in DTYPE_CASES]
    shape_lines, shape_definitions = _cpp_library_source(SHAPE_SCHEMA, shape_rules, "shape")
    dtype_lines, dtype_definitions = _cpp_library_source(DTYPE_SCHEMA, dtype_rules, "dtype")
    # the kernels that print a rule include c10's floor division the way op_plugin/kernel.py does
    source = "\n".join([f"#include <{FLOOR_DIV_HEADER}>", "#include <ATen/ExpandUtils.h>",
                        "#include <c10/core/WrapDimMinimal.h>", "#include <torch/library.h>", *shape_lines,
                        *dtype_lines, "static int64_t scalar_type_code(at::ScalarType t) { return static_cast<int64_t>(t); }",
                        "TORCH_LIBRARY(opgen_rules, m) {", *shape_definitions, *dtype_definitions,
                        '  m.def("scalar_type_code(ScalarType t) -> int", &scalar_type_code);', "}"])
    # one build directory for every xdist worker: torch's build lock makes the others wait for the first
    # compile and load its result instead of compiling again
    build = tmp_path_factory.getbasetemp().parent / "cpp_rules" if os.environ.get("PYTEST_XDIST_WORKER") \
        else tmp_path_factory.mktemp("cpp_rules")
    build.mkdir(exist_ok=True)
    path = build / "opgen_rules.cpp"
    if not path.exists() or path.read_text(encoding="utf-8") != source:  # the same text: ninja builds nothing
        partial = build / f"opgen_rules.cpp.{os.getpid()}"
        partial.write_text(source, encoding="utf-8")
        partial.replace(path)
    load(name="opgen_rules", sources=[str(path)], build_directory=str(build), is_python_module=False,
         extra_cflags=["-O0", "-Werror=return-type"])
    return torch.ops.opgen_rules


@pytest.mark.parametrize("number", range(len(SHAPE_CASES)), ids=[c[0] for c in SHAPE_CASES])
@pytest.mark.slow
@pytest.mark.xdist_group("cpp_rules")  # one worker compiles the module, once
def test_cpp_shape_rule_compiles_and_agrees_with_python(compiled_rules, number):
    text, overrides, expected = SHAPE_CASES[number]
    inputs = shape_inputs(**overrides)
    names = [a.name for a in SHAPE_SCHEMA.arguments]
    assert getattr(compiled_rules, f"shape_{number}")(*(inputs[n] for n in names)) == expected, text


@pytest.mark.parametrize("number", range(len(DTYPE_CASES)), ids=[c[0] for c in DTYPE_CASES])
@pytest.mark.slow
@pytest.mark.xdist_group("cpp_rules")
def test_cpp_dtype_rule_compiles_and_agrees_with_python(compiled_rules, number):
    text, overrides, expected = DTYPE_CASES[number]
    inputs = dtype_inputs(**overrides)
    names = [a.name for a in DTYPE_SCHEMA.arguments]
    # a ScalarType comes back from the dispatcher as its number: the dtype whose number it is
    code = getattr(compiled_rules, f"dtype_{number}")(*(inputs[n] for n in names))
    dtypes = [value for value in vars(torch).values() if isinstance(value, torch.dtype)]
    assert {compiled_rules.scalar_type_code(d): d for d in dtypes}[code] == expected, text


# ---------------------------------------------------------------------------------------------
# Property: any text is either a clean SemanticsError or a rule whose Python runs without type errors


def _expressions():
    from hypothesis import strategies as st

    leaves = st.sampled_from([
        "x", "gamma", "a", "xs", "bias", "n", "flag", "size", "mode", "k", "eps", "ys", "float32", "half",
        "dynamic", "None", "True", "0", "1", "-1", "2", "'mean'", "x.shape", "xs[0]", "nope",
    ])
    forms = [
        "{0}.shape", "{0}.dtype", "{0}[{1}]", "[{0}, {1}]", "[{0}]", "{0} + {1}", "{0} - {1}", "{0} * {1}",
        "{0} // {1}", "{0} % {1}", "({0} if {1} else {2})", "len({0})", "{0}.size({1})", "{0}.dim()",
        "broadcast({0}, {1})", "{0} is not None", "{0} is None", "not {0}", "{0} == {1}", "{0} < {1}",
        "{0}[{1}:{2}]", "{0}[:{1}]", "dynamic(max={0})", "promote({0}, {1})", "{0} or {1}", "{0} and {1}",
        "-{0}", "max({0}, {1})", "[*{0}, {1}]", "{0} / {1}", "({0})", "{0}.numel()", "{0}.ndim",
    ]

    def extend(inner):
        return st.tuples(st.sampled_from(forms), inner, inner, inner).map(lambda t: t[0].format(*t[1:]))

    return st.recursive(leaves, extend, max_leaves=8)


_ACCEPTABLE_AT_RUN_TIME = (IndexError, RuntimeError, ValueError, ZeroDivisionError)


def _check_random_rule(text, parse):
    try:
        rule = parse(text, SHAPE_SCHEMA)
    except SemanticsError as error:
        assert error.column is not None and error.column >= 1 and error.hint, error.render()
        return
    if isinstance(rule, ShapeRule):
        statements, expr = rule.python()
        if not rule.is_dynamic:
            assert _balanced(rule.cpp())
    else:
        statements, expr = [], rule.python()
        assert _balanced(rule.cpp())
    fake, source = compile_fake(SHAPE_SCHEMA, (statements, expr))
    if isinstance(rule, ShapeRule) and rule.is_dynamic:
        return  # get_ctx() only exists inside a fake impl; the dynamic tests above run those
    for inputs in (shape_inputs(), shape_inputs(bias=torch.randn(3), k=2, flag=False, ys=[torch.randn(1), None])):
        try:
            (value,) = fake(**inputs)
        except _ACCEPTABLE_AT_RUN_TIME:
            continue  # a size that does not exist for these inputs (x.shape[5]): the rule is fine
        if isinstance(rule, ShapeRule):
            assert all(isinstance(s, int) for s in value), source
        else:
            assert isinstance(value, torch.dtype), source


def test_random_rules_are_errors_or_well_typed_python():
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_expressions())
    def check(text):
        _check_random_rule(text, parse_shape)
        _check_random_rule(text, parse_dtype)

    check()


def test_random_text_never_crashes():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("xn[]().:+-*/%,<=!#'\"abdimpsezy _0129\n\té")), max_size=30))
    def check(text):
        for parse in (parse_shape, parse_dtype):
            try:
                parse(text, SHAPE_SCHEMA)
            except SemanticsError as error:
                assert error.column is not None and error.column >= 1 and error.hint, error.render()
                error.render()

    check()


_TYPED_LEAVES = {
    "int": ["n", "0", "1", "2", "-1", "x.dim()", "len(xs)", "len(size)", "x.shape[0]", "x.shape[-1]", "x.numel()",
            "gamma.ndim", "(k if k is not None else 1)", "size[0]"],
    "small": ["n", "x.dim()", "gamma.dim()", "2", "len(xs)", "(k if k is not None else 1)"],
    "sizes": ["x.shape", "size", "[]", "[n]", "gamma.shape", "x.size()"],
    "bool": ["flag", "True", "bias is None", "k is not None", "mode == 'mean'", "eps > 0.5"],
    "tensor": ["x", "gamma", "a", "b", "xs[0]", "xs[-1]"],
    "dtype": ["x.dtype", "x", "float32", "half", "int64", "bool", "xs[0].dtype"],
}
# Forms per type; {int}, {sizes}… are filled with smaller expressions of that type.
_TYPED_FORMS = {
    "int": ["{int} + {int}", "{int} - {int}", "{int} * {small}", "{int} // {small}", "{int} % {small}", "-{int}",
            "({int} if {bool} else {int})", "max({int}, {int})", "min({int}, {int})", "len({sizes})",
            "{tensor}.size({small})", "{tensor}.shape[{small}]", "{sizes}[{small}]"],
    "sizes": ["[{int}, {int}]", "[{int}]", "{sizes} + {sizes}", "{sizes}[{small}:{int}]", "{sizes}[:{int}]",
              "{sizes}[{small}:]", "[1] * {small}", "{small} * [{int}]", "broadcast({sizes}, {sizes})",
              "({sizes} if {bool} else {sizes})", "[*{sizes}, {int}]", "{tensor}.shape",
              "(bias.shape if bias is not None else {sizes})", "(ys[1].shape if ys[1] is not None else {sizes})",
              "reduce({sizes}, [{int}], {bool})", "reduce({tensor}, dim)", "reduce({sizes}, size, keepdim={bool})"],
    "bool": ["{int} > {int}", "{int} == {int}", "not {bool}", "{bool} and {bool}", "{bool} or {bool}",
             "{sizes} == {sizes}", "{dtype} == float16", "promote({dtype}, {dtype}) != {dtype}"],
    "tensor": ["xs[{small}]", "({tensor} if {bool} else {tensor})"],
    "dtype": ["promote({dtype}, {dtype})", "({dtype} if {bool} else {dtype})", "{tensor}.dtype", "{tensor}"],
}


def _typed_rules(depth=3):
    """Well-typed shape and dtype rules of bounded depth, from the language's own typing (completeness)."""
    from hypothesis import strategies as st

    level = {kind: st.sampled_from(leaves) for kind, leaves in _TYPED_LEAVES.items()}
    for _ in range(depth):
        below = level

        def form(kind, below=below):
            def fill(template):
                fields = [name for _, name, _, _ in string.Formatter().parse(template) if name]
                return st.tuples(*(below[name] for name in fields)).map(
                    lambda values: _fill(template, values))
            return st.sampled_from(_TYPED_FORMS[kind]).flatmap(fill)

        level = {kind: st.one_of(below[kind], form(kind)) if kind in _TYPED_FORMS else below[kind]
                 for kind in _TYPED_LEAVES}
    return level["sizes"], level["dtype"]


def _fill(template, values):
    parts, it = [], iter(values)
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if name:
            value = next(it)
            parts.append(f"({value})" if " " in value and not literal.endswith(("(", "[", ", ")) else value)
    return "".join(parts)


# What rule_bounds refuses in a well-typed rule: a constant negative size (`[-1]`, `[0 - 1]`) is never a shape.
BOUNDS_REFUSALS = ("a size cannot be negative", "division by zero", "modulo by zero")


def test_well_typed_random_rules_are_accepted_and_run():
    from hypothesis import HealthCheck, given, settings

    sizes, dtypes = _typed_rules()

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sizes, dtypes)
    def check(shape_text, dtype_text):
        for text, parse in ((shape_text, parse_shape), (dtype_text, parse_dtype)):
            try:
                parse(text, SHAPE_SCHEMA)
            except SemanticsError as error:
                if error.message.startswith(BOUNDS_REFUSALS):  # well-typed, but fails every call (issue 37)
                    return
                raise AssertionError(f"well-typed rule refused: {text}\n{error.render()}") from None  # pragma: no cover
            _check_random_rule(text, parse)

    check()


def test_a_stride_reads_one_stride_in_python_and_cpp_and_takes_one_dim():
    """`x.stride(i)`: where a layout matters (a fusion's `when:` refusing a channels-last input); `x.stride()` alone
    is refused with the fix."""
    schema = parse_schema("f(Tensor x) -> Tensor")
    rule = parse_condition("x.dim() != 4 or x.stride(1) != 1", schema)
    assert rule.python() == "x.dim() != 4 or x.stride(1) != 1"
    cl = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert eval(rule.python(), {"x": torch.empty(2, 3, 4, 5)}) and not eval(rule.python(), {"x": cl})
    with pytest.raises(OpgenError, match=r"`.stride\(\)` takes 1 argument, got 0") as info:
        parse_condition("x.stride() == 1", schema)
    assert "x.stride(1)" in info.value.hint
