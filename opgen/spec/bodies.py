"""Python bodies in a spec (`reference:`, `autograd:`, `fusion.pattern`): each is parsed exactly as opgen will write it,
after its own `def` line, and an error is placed at the body's line and column in the spec file."""

from __future__ import annotations

import ast
import textwrap

from yaml.nodes import ScalarNode

from .autograd import FOREIGN_LINE_BREAKS, function_source
from .nodes import SpecError, _scalar, _Source

# How deep a body's syntax tree may nest (calls in calls, `a + b + ...` chains: each term one level). Python
# compiles about 3000, but its own ast.unparse and every recursive visitor (opgen's, the linters') stop near
# 500; real bodies need 20.
MAX_BODY_DEPTH = 200


def check_body(source: _Source, node: ScalarNode, body: str, field: str, header: list[str], hint: str):
    """Parse `body` exactly as it will be generated (after opgen's `header` lines): the function's AST.

    Validating the very text that is written is what keeps the code inside its function: the module
    must be that one `def`, so the body can neither end the function early nor add code around it."""
    for char in body:
        if char in FOREIGN_LINE_BREAKS or char == "\0":
            raise source.error(node, f"{field} contains the control character {char!r}",
                               "write the code with plain newlines (a `|` block)")
    text = function_source(header, body)
    too_deep = f"{field} nests more than {MAX_BODY_DEPTH} levels deep"
    deep_hint = "split the expression with intermediate variables"
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        line = max((error.lineno or 1) - 1 - len(header), 0)
        raise body_error(source, node, line, max((error.offset or 1) - 4, 1),
                         f"{field} is not valid Python: {error.msg}", hint) from None
    except (RecursionError, MemoryError):  # deeper than Python's own parser goes
        raise source.error(node, too_deep, deep_hint) from None
    deepest = deepest_node(tree, MAX_BODY_DEPTH)
    if deepest is not None:
        raise body_error(source, node, max(deepest.lineno - 1 - len(header), 0),
                         max(deepest.col_offset + 1 - 4, 1), too_deep, deep_hint)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):  # cannot happen: belt and braces
        raise source.error(node, f"{field} does not stay inside its function", hint)
    return tree.body[0]


def deepest_node(tree: ast.AST, limit: int) -> ast.AST | None:
    """The first node nested deeper than `limit` below `tree` (found without recursion), or None."""
    pending = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return node
        # operators and contexts (ast.Add, ast.Load) are leaves without a position
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if hasattr(child, "col_offset"))
    return None


def body_error(source: _Source, node: ScalarNode, line: int, column: int, message: str, hint: str) -> SpecError:
    """An error at 0-based `line`, 1-based `column` of a body as dedented (a `|` block maps to the file)."""
    body = _scalar(node)
    if node.style != "|" or not isinstance(body, str):
        return source.error(node, message, hint)
    raw = body.split("\n")
    skipped = next((i for i, text in enumerate(raw) if text.strip()), 0)  # blank lines dropped before the code
    index = min(line + skipped, len(raw) - 1)
    dedented = textwrap.dedent(body).split("\n")
    common = len(raw[index]) - len(dedented[index]) if index < len(dedented) else 0
    file_line = node.start_mark.line + 1 + index
    text = source.lines[file_line] if file_line < len(source.lines) else ""
    margin = len(text) - len(raw[index]) if text.endswith(raw[index]) else 0
    return source.error(None, message, hint, line=file_line, column=margin + common + column)


def own_returns(function: ast.FunctionDef) -> list[ast.Return]:
    """Every `return` statement of a function itself (not of functions or classes nested in it), in order."""
    found, pending = [], list(function.body)
    while pending:
        statement = pending.pop(0)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(statement, ast.Return):
            found.append(statement)
        pending.extend(ast.iter_child_nodes(statement))
    return found


def value_returns(function: ast.FunctionDef) -> list[ast.Return]:
    """The `return X` statements of a function itself, X not None."""
    return [statement for statement in own_returns(function) if statement.value is not None and not (
        isinstance(statement.value, ast.Constant) and statement.value.value is None)]
