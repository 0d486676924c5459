"""Which function a registration names, and its facts: a `def` of this file (the latest one above the
registration), a lambda, the function a wrapper's use passes, or a module-level function of another file
it is imported from (a placeholder the checks resolve, so that file is parsed only when needed)."""

from __future__ import annotations

import ast

from ..records import FileRecord, Function, Where
from .context import FileContext
from .facts import FunctionReader


def function_arg(ctx: FileContext, node: ast.AST | None, line: int) -> Function | None:
    """The function an argument (a name or a lambda) of a registration call at `line` stands for."""
    if isinstance(node, ast.Lambda):  # `lib.impl("f", lambda x: x.add_(1), "CPU")`: its body is read too
        return function_node(ctx, node)
    if not isinstance(node, ast.Name):
        return None
    names = ctx.names
    if node.id in names.bindings:  # a wrapper's function parameter: the function given at the use
        bound = names.bindings[node.id]
        if isinstance(bound, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return function_node(ctx, bound)
        saved, names.bindings = names.bindings, {}
        try:
            return function_arg(ctx, bound if isinstance(bound, ast.expr) else None, line)
        finally:
            names.bindings = saved
    candidates = ctx.functions.get(node.id)
    if not candidates:
        return imported_function(ctx, node.id)
    before = [f for f in candidates if f.lineno <= line]
    return function_node(ctx, before[-1] if before else candidates[-1])


def applied(ctx: FileContext, call: ast.Call) -> Function | None:
    """The function a registration call is applied to (`register_fake("ns::f")(fake)`), if any."""
    name = ctx.applied.get(id(call))
    return function_arg(ctx, name, call.lineno) if name is not None else None


def decorated_or(ctx: FileContext, decorated: ast.AST | None, call: ast.Call, argument: ast.AST | None
                 ) -> Function | None:
    """The function a registration registers: the one it decorates, else its function argument, else the
    one it is applied to."""
    if decorated is not None:
        return function_node(ctx, decorated)
    if argument is not None:
        return function_arg(ctx, argument, call.lineno)
    return applied(ctx, call)


def imported_function(ctx: FileContext, local: str) -> Function | None:
    """A placeholder for a function imported from a file next to this one (resolved by the checks)."""
    found = ctx.names.imported_file(local)
    if found is None:
        return None
    target, name = found
    return Function(name, Where(target, 1, 1), [], None, imported_from=target)


def function_node(ctx: FileContext, node: ast.AST | None) -> Function | None:
    """The facts of a def or lambda (read once per node)."""
    if node is None:
        return None
    cached = ctx.function_facts.get(id(node))
    if cached is None:
        reader = FunctionReader(ctx, node)
        cached = ctx.function_facts[id(node)] = reader.read()
        if reader.asks_compiling:  # `if torch.compiler.is_compiling():` is false where a kernel runs, true in a fake
            cached.under_compile = FunctionReader(ctx, node, compiling=True).read()
    return cached


def function_in_file(path: str, name: str) -> Function | None:
    """Facts about the module-level function `name` of another file (a kernel or fake imported by a
    registration), or None when it is not there."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", errors="replace")
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    ctx = FileContext(FileRecord(path), text, tree)
    ctx.add_imports([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))])
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            ctx.functions.setdefault(name, []).append(node)
    definition = ctx.functions.get(name)
    if not definition:
        return imported_function(ctx, name)
    return function_node(ctx, definition[-1])
