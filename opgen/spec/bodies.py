"""Python bodies in a spec (`reference:`, `autograd:`, `fusion.pattern`): each is parsed exactly as opgen will write it,
after its own `def` line, and an error is placed at the body's line and column in the spec file."""

from __future__ import annotations

import ast
import textwrap

from yaml.nodes import ScalarNode

from .autograd import FOREIGN_LINE_BREAKS, function_source
from .nodes import SpecError, _scalar, _Source


def check_body(source: _Source, node: ScalarNode, body: str, field: str, header: list[str], hint: str):
    """Parse `body` exactly as it will be generated (after opgen's `header` lines): the function's AST.

    Validating the very text that is written is what keeps the code inside its function: the module
    must be that one `def`, so the body can neither end the function early nor add code around it."""
    for char in body:
        if char in FOREIGN_LINE_BREAKS or char == "\0":
            raise source.error(node, f"{field} contains the control character {char!r}",
                               "write the code with plain newlines (a `|` block)")
    text = function_source(header, body)
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        line = max((error.lineno or 1) - 1 - len(header), 0)
        raise body_error(source, node, line, max((error.offset or 1) - 4, 1),
                         f"{field} is not valid Python: {error.msg}", hint) from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):  # cannot happen: belt and braces
        raise source.error(node, f"{field} does not stay inside its function", hint)
    return tree.body[0]


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
