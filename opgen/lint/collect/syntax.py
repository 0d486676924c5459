"""Small questions about `ast` nodes that every reader of a file asks: a call's arguments by name, a
function's parameter names, a dotted name, the blocks of a compound statement."""

from __future__ import annotations

import ast


def arguments(call: ast.Call, names: tuple[str, ...]) -> dict[str, ast.AST]:
    """Bind positional and keyword arguments of a call to parameter names."""
    bound = {name: arg for name, arg in zip(names, call.args) if not isinstance(arg, ast.Starred)}
    for keyword in call.keywords:
        if keyword.arg in names:
            bound[keyword.arg] = keyword.value
    return bound


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def has_keyword(call: ast.Call, name: str) -> bool:
    """Whether `name=` is given, or could be (`**kwargs`)."""
    return any(k.arg == name or k.arg is None for k in call.keywords)


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def arg_names(node: ast.AST) -> list[str]:
    """The names of a function's positional and keyword-only parameters."""
    a = node.args
    return [arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def own_args(node: ast.FunctionDef) -> list[ast.arg]:
    """Every parameter of a function, `*args` and `**kwargs` included."""
    a = node.args
    own = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if a.vararg:
        own.append(a.vararg)
    if a.kwarg:
        own.append(a.kwarg)
    return own


def children(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes(node)` as a list, in its order (a plain loop: the generators over `iter_fields` cost
    a third of reading a file's registrations)."""
    found = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


def walk(node: ast.AST) -> list[ast.AST]:
    """`list(ast.walk(node))`: every node below `node` and itself, in its breadth-first order."""
    found = [node]
    append, extend, is_ast = found.append, found.extend, ast.AST
    for current in found:  # visits what the loop appends, in order
        for name in current._fields:
            value = getattr(current, name, None)
            if isinstance(value, is_ast):
                append(value)
            elif isinstance(value, list):
                extend(item for item in value if isinstance(item, is_ast))
    return found


def _fieldless() -> frozenset[type]:
    """Node types with nothing below them and nothing to read but their type: contexts (`Load`, `Store`) and
    operators (`Add`, `Not`, `Eq`), read through their parent (`name.ctx`, `binop.op`), and `pass`, `break`,
    `continue`."""
    found, todo = set(), [ast.AST]
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        if kind is not ast.AST and not kind._fields and not kind.__subclasses__():
            found.add(kind)
    return frozenset(found)


FIELDLESS = _fieldless()


def body_nodes(node: ast.AST) -> list[ast.AST]:
    """`walk(node)` less the FIELDLESS nodes (a third of a function body's nodes), in the same order: for readers
    that look at each node's own type and fields only."""
    found = [node]
    append, is_ast, fieldless = found.append, ast.AST, FIELDLESS
    for current in found:
        for name in current._fields:
            value = getattr(current, name, None)
            if isinstance(value, is_ast):
                if type(value) not in fieldless:
                    append(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, is_ast) and type(item) not in fieldless:
                        append(item)
    return found


def mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id == name for sub in walk(node))


def mentions_any(node: ast.AST, names: list[str]) -> bool:
    wanted = set(names)
    return any(isinstance(sub, ast.Name) and sub.id in wanted for sub in walk(node))


def is_function(node: ast.AST) -> bool:
    kind = type(node)
    return kind is ast.FunctionDef or kind is ast.AsyncFunctionDef


def is_main_guard(test: ast.AST) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in sides) and any(
        isinstance(n, ast.Constant) and n.value == "__main__" for n in sides)


def child_statements(statement: ast.AST) -> list[list[ast.stmt]]:
    """The statement blocks inside a compound statement (bodies, else, finally, handlers, cases)."""
    blocks = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            blocks.append(block)
    for handler in getattr(statement, "handlers", ()) or ():
        blocks.append(handler.body)
    for case in getattr(statement, "cases", ()) or ():
        blocks.append(case.body)
    blocks.sort(key=lambda block: block[0].lineno)
    return blocks


def assigned_names(statement: ast.AST) -> list[ast.AST]:
    """The targets of an assignment statement (`a = b = v`, `a: T = v`), none for anything else."""
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, ast.AnnAssign):
        return [statement.target]
    return []
