"""Which parts of a file's tree are read: the module-level statements (functions, how often each name is
assigned, imports, a main guard), then only the statements covering a line that mentions a registration
API, gathering their calls, defs and assignments in order, and who owns each (the function it is written
in), which is how registration wrappers are found."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..records import is_entry_point
from .context import FileContext
from .source import covers, interesting_lines
from .syntax import FIELDLESS, child_statements, is_function, is_main_guard


@dataclass
class Gathered:
    """The nodes a walk over the interesting statements finds, for the readers to read in order."""

    calls: list = field(default_factory=list)
    defs: list = field(default_factory=list)
    assigns: list = field(default_factory=list)
    nested_imports: list = field(default_factory=list)


def top_level(ctx: FileContext) -> tuple[dict[str, int], list[ast.AST]]:
    """Module-level functions (recorded), how often each name is assigned, and the imports."""
    counts: dict[str, int] = {}
    imports: list[ast.AST] = []
    for statement in ctx.tree.body:
        ctx.module_level_ids.add(id(statement))
        kind = type(statement)
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            ctx.functions.setdefault(statement.name, []).append(statement)
        elif kind is ast.Assign or kind is ast.AnnAssign:
            targets = statement.targets if kind is ast.Assign else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    counts[target.id] = counts.get(target.id, 0) + 1
        elif kind is ast.Import or kind is ast.ImportFrom:
            imports.append(statement)
        elif kind is ast.If and is_main_guard(statement.test):
            ctx.record.entry_point = True
    ctx.record.entry_point = is_entry_point(ctx.path, ctx.record.entry_point)
    return counts, imports


def gather(ctx: FileContext) -> Gathered:
    """Walk the statements that mention a registration API, or a local alias or wrapper of one."""
    gathered = Gathered()
    local = ctx.names.registration_aliases() | ctx.wrappers.keys()
    _visit(ctx, ctx.tree.body, True, interesting_lines(ctx.source.text, local), gathered, None)
    return gathered


def _visit(ctx: FileContext, statements: list, top: bool, interesting: list[int], gathered: Gathered,
           owner) -> None:
    for statement in statements:
        kind = type(statement)
        if not top:  # what a registration may name later, even when not walked
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                ctx.functions.setdefault(statement.name, []).append(statement)
            elif kind is ast.Import or kind is ast.ImportFrom:
                gathered.nested_imports.append(statement)
        first = statement.decorator_list[0].lineno if getattr(statement, "decorator_list", None) \
            else statement.lineno
        if not covers(interesting, first, statement.end_lineno or first):
            continue
        children = child_statements(statement)
        if children and not covers(interesting, first, children[0][0].lineno - 1):
            inner = statement if is_function(statement) else owner
            if inner is not owner:
                ctx.owners[id(inner)] = owner
            for block in children:  # a plain header (class, if, try, def): look inside only
                _visit(ctx, block, False, interesting, gathered, inner)
        else:
            _walk(ctx, statement, gathered, owner)


def _walk(ctx: FileContext, statement, gathered: Gathered, owner) -> None:
    """Gather the calls, defs and assignments of one statement; `owners` maps each call and def to the
    function it is written in (None: module level)."""
    plain = id(statement) in ctx.module_level_ids and type(statement) in (ast.Expr, ast.Assign, ast.AnnAssign)
    stack = [(statement, owner)]
    while stack:
        node, owner = stack.pop()
        kind = type(node)
        if kind is ast.Call:
            gathered.calls.append(node)
            ctx.owners[id(node)] = owner
            if plain:
                ctx.unconditional.add(id(node))
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            gathered.defs.append(node)
            ctx.owners[id(node)] = owner
            if node is not statement:
                ctx.functions.setdefault(node.name, []).append(node)
            for decorator in node.decorator_list:
                ctx.decorator_ids.add(id(decorator))
            owner = node
        elif kind is ast.Assign or kind is ast.AnnAssign or kind is ast.With:
            gathered.assigns.append(node)
        elif (kind is ast.Import or kind is ast.ImportFrom) and node is not statement:
            gathered.nested_imports.append(node)
        for name in node._fields:  # the children, less the leaves (names, constants, contexts, operators)
            value = getattr(node, name, None)
            if isinstance(value, list):
                stack.extend([(item, owner) for item in value
                              if type(item) not in _LEAVES and isinstance(item, ast.AST)])
            elif type(value) not in _LEAVES and isinstance(value, ast.AST):
                stack.append((value, owner))


_LEAVES = FIELDLESS | {ast.Name, ast.Constant}  # nothing below them that the walk gathers
