"""A project's own registration wrappers, one level deep: a local function whose body forwards its own
parameters to a registration call (`def impl_abstract(op_name, fn): torch.library.register_fake(op_name,
fn)`, called), one returning the registration decorator, or a decorator factory whose inner function
registers what it decorates (torchvision's `register_meta`). The registrations module reads each use as
that registration, with the wrapper's parameters bound to the arguments given there."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .context import FileContext
from .names import LIB
from .syntax import arg_names, keyword, mentions_any, walk

KNOWN_HELPERS = frozenset({"direct_register_custom_op"})
WRAPPED_APIS = frozenset({"register_fake", "impl_abstract", "_register_fake", "impl", "_impl", "register_kernel"})


@dataclass
class Wrapper:
    """`function`'s parameters reach `call`, a registration; `kind` is "call" (used as `wrapper("ns::f",
    fn)`), "decorator" (returns the registration decorator) or "factory" (returns `inner`, which registers
    the function it decorates)."""

    function: ast.FunctionDef
    call: ast.Call
    inner: ast.FunctionDef | None
    kind: str


def find_wrappers(ctx: FileContext, calls: list[ast.Call]) -> bool:
    """Record the wrappers among the functions owning `calls`; True when there is one."""
    for call in calls:
        op_node = _template_op(ctx, call)
        owner = ctx.owners.get(id(call))
        if op_node is None or owner is None:
            continue
        outer = ctx.owners.get(id(owner))
        for candidate, inner in ((owner, None), (outer, owner)):
            if candidate is None or candidate.name in KNOWN_HELPERS \
                    or not mentions_any(op_node, arg_names(candidate)):
                continue  # a copy of vLLM's helper is read as that helper (it defines the op too)
            kind = "factory" if inner is not None else ("decorator" if _returns(candidate, call) else "call")
            if kind == "factory" and not _returns_name(candidate, inner.name):
                continue
            ctx.wrappers[candidate.name] = Wrapper(candidate, call, inner, kind)
            ctx.templates.add(id(call))
            break
    return bool(ctx.wrappers)


def _template_op(ctx: FileContext, call: ast.Call) -> ast.AST | None:
    """The op argument of a registration call (None when the call registers nothing)."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("impl", "_register_fake"):
        return call.args[0] if call.args else keyword(call, "op_name")
    qual = ctx.qualname(func)
    if qual is not None and qual.startswith(LIB) and qual[len(LIB):] in WRAPPED_APIS:
        return call.args[0] if call.args else (keyword(call, "qualname") or keyword(call, "op"))
    return None


def wrapper_at(ctx: FileContext, node: ast.AST) -> Wrapper | None:
    """The wrapper a call uses (never while another use is being read: one level)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not ctx.names.bindings:
        return ctx.wrappers.get(node.func.id)
    return None


def bind(wrapper: Wrapper, site: ast.Call, decorated: ast.AST | None) -> dict[str, object] | None:
    """The wrapper's parameters bound to the arguments given at `site` (else to their defaults), and for a
    factory its inner function's parameter to the decorated function; None when the use does not fit the
    wrapper's kind."""
    bindings = _bind(wrapper.function, site)
    if wrapper.kind == "factory":
        if decorated is None or not arg_names(wrapper.inner):
            return None
        bindings[arg_names(wrapper.inner)[0]] = decorated
    elif (wrapper.kind == "decorator") != (decorated is not None):
        return None
    return bindings


def _returns(function: ast.AST, call: ast.Call) -> bool:
    return any(isinstance(n, ast.Return) and n.value is call for n in walk(function))


def _returns_name(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id == name
               for n in function.body)


def _bind(function: ast.FunctionDef, call: ast.Call) -> dict[str, object]:
    a = function.args
    positional = [*a.posonlyargs, *a.args]
    bound: dict[str, object] = {}
    for arg, default in zip(reversed(positional), reversed(a.defaults)):
        bound[arg.arg] = default
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        if default is not None:
            bound[arg.arg] = default
    for arg, value in zip(positional, call.args):
        if not isinstance(value, ast.Starred):
            bound[arg.arg] = value
    for keyword_ in call.keywords:
        if keyword_.arg is not None:
            bound[keyword_.arg] = keyword_.value
    return bound
