"""The package's own fake (Meta) function run under symbolic sizes: each output size comes back as an expression of
the input sizes (sympy), printed in the semantics language (`x.shape[0] * 2`, `dynamic`).

Every input size is its own symbol (no duck sizing: two sizes equal in the example are not assumed equal), sizes
0 and 1 included; an equality the fake checks (`torch._check(x.shape[1] == w.shape[0])`) makes them one symbol, named
after the first input that holds it. A size the fake makes from the data (`new_dynamic_size()`) is `dynamic`."""

from __future__ import annotations

import inspect

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext


class Unexpressible(Exception):
    """A size the semantics language cannot say (the reason is the message)."""


def shape_env() -> ShapeEnv:
    wanted = {"duck_shape": False, "specialize_zero_one": False}
    init = getattr(ShapeEnv, "_init", ShapeEnv.__init__)  # torch >= 2.1 takes its keywords through _init
    accepted = inspect.signature(init).parameters
    return ShapeEnv(**{key: value for key, value in wanted.items() if key in accepted})


def symbolic_call(mode: FakeTensorMode, call: dict) -> tuple[dict, dict]:
    """(the call with every tensor fake and every size a symbol, {symbol: its text in the semantics language})."""
    names: dict = {}
    fake_call = {}
    for name, value in call.items():
        if isinstance(value, torch.Tensor):
            fake_call[name] = _fake(mode, value, name, names)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
            fake_call[name] = [_fake(mode, v, f"{name}[{i}]", names) for i, v in enumerate(value)]
        else:
            fake_call[name] = value
    return fake_call, names


def _fake(mode: FakeTensorMode, tensor: torch.Tensor, text: str, names: dict) -> torch.Tensor:
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * tensor.dim(),
                                       constraint_sizes=[None] * tensor.dim())
    from torch._dynamo.source import LocalSource

    fake = mode.from_tensor(tensor, source=LocalSource(text.replace("[", "_").replace("]", "")),
                            symbolic_context=context)
    for dim, size in enumerate(fake.shape):
        if isinstance(size, torch.SymInt):
            names.setdefault(size.node.expr, f"{text}.shape[{dim}]")
    return fake


def sizes_text(sizes, env: ShapeEnv, names: dict) -> tuple[str, ...]:
    """Each size of an output in the semantics language; Unexpressible where one has no form there."""
    return tuple(size_text(size, env, names) for size in sizes)


def name_data_dependent(sizes, names: dict, output: str) -> None:
    """Name each data-dependent size of an output after it, for the outputs after it."""
    for dim, size in enumerate(sizes):
        if isinstance(size, torch.SymInt) and str(size.node.expr).startswith("u"):
            names.setdefault(size.node.expr, f"{output}.shape[{dim}]")


def size_text(size, env: ShapeEnv, names: dict) -> str:
    if not isinstance(size, torch.SymInt):
        return str(int(size))
    expr = env.replace(size.node.expr) if hasattr(env, "replace") else size.node.expr
    resolved = {symbol: env.replace(symbol) for symbol in names} if hasattr(env, "replace") else {}
    by_symbol = {}
    for symbol, text in names.items():
        target = resolved.get(symbol, symbol)
        if isinstance(target, sympy.Symbol):
            by_symbol.setdefault(target, text)
    text = _print(expr, by_symbol)
    if text == "dynamic":
        bound = _upper_bound(expr, env, by_symbol)
        return f"dynamic(max={bound})" if bound else text
    return text


def _upper_bound(symbol, env: ShapeEnv, names: dict) -> str:
    """The input size a data-dependent size is checked against (`torch._check(n <= x.shape[0])`), or ""."""
    for asserted in getattr(env, "deferred_runtime_asserts", {}).get(symbol, ()):
        relation = asserted.expr
        if isinstance(relation, sympy.LessThan) and relation.args[0] == symbol:
            bound = relation.args[1]
        elif isinstance(relation, sympy.GreaterThan) and relation.args[1] == symbol:
            bound = relation.args[0]
        else:
            continue
        try:
            return _print(bound, names)
        except Unexpressible:
            continue
    return ""


def _print(expr, names: dict) -> str:
    """`expr` in the semantics language; Unexpressible where it has no such form."""
    if expr.is_Integer:
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        if expr in names:
            return names[expr]
        if str(expr).startswith("u"):  # unbacked: made by the fake from the data
            return "dynamic"
        raise Unexpressible(f"the size {expr} comes from no input size")
    kind = type(expr).__name__
    if isinstance(expr, sympy.Add):
        terms = sorted(expr.args, key=lambda t: (_negative(t), str(t)))
        text = _print(terms[0], names)
        for term in terms[1:]:
            text += f" - {_factor(-term, names)}" if _negative(term) else f" + {_print(term, names)}"
        return text
    if isinstance(expr, sympy.Mul):
        coefficient, rest = expr.as_coeff_Mul()
        factors = [_factor(f, names) for f in sympy.Mul.make_args(rest)]
        if coefficient == -1:
            return "-" + " * ".join(factors)
        return " * ".join(([str(int(coefficient))] if coefficient != 1 else []) + factors)
    if kind == "FloorDiv":
        return f"{_factor(expr.args[0], names)} // {_factor(expr.args[1], names)}"
    if kind in ("Mod", "PythonMod"):
        return f"{_factor(expr.args[0], names)} % {_factor(expr.args[1], names)}"
    if kind in ("Max", "Min"):
        inner = [_print(arg, names) for arg in expr.args]
        text = inner[0]
        for other in inner[1:]:
            text = f"{kind.lower()}({text}, {other})"
        return text
    if isinstance(expr, sympy.Pow) and expr.args[1].is_Integer and expr.args[1] > 0:
        return " * ".join([_factor(expr.args[0], names)] * int(expr.args[1]))
    raise Unexpressible(f"the size {expr} ({kind}) has no form in the semantics language")


def _negative(term) -> bool:
    return term.could_extract_minus_sign()


def _factor(expr, names: dict) -> str:
    text = _print(expr, names)
    return f"({text})" if isinstance(expr, sympy.Add) else text


def fake_mode() -> tuple[FakeTensorMode, ShapeEnv]:
    env = shape_env()
    return FakeTensorMode(shape_env=env, allow_non_fake_inputs=True), env
