"""The CPU kernel opgen writes from `reference:`: the spec's body, returning what the spec declares.

An output without `like:` is contiguous (its fake function allocates it so); a reference that returns, say,
`xs[0].clone()` of a transposed input keeps that input's strides, and the fake and the kernel would disagree.
So each returned value of such an output gets `.contiguous()` (free when it already is). Only `return`
statements of the body itself are rewritten (not those of functions nested in it), and only when their value
has the op's shape of returns: one expression, or a tuple display of one item per output.
"""

from __future__ import annotations

import ast
import textwrap

from ..spec.model import OpSpec


def reference_lines(op: OpSpec) -> list[str]:
    """The spec's `reference:` body, dedented, as lines."""
    return textwrap.dedent(op.reference or "").strip("\n").split("\n")


def kernel_lines(op: OpSpec) -> list[str]:
    """The CPU kernel's body: the reference with the returns of outputs without `like:` made contiguous."""
    lines = reference_lines(op)
    # (a Tensor[] output is a list: its tensors are whatever the reference made them)
    contiguous = [out.like is None and out.returns_argument is None and not out.is_list for out in op.outputs]
    if not any(contiguous):
        return lines
    source = "\n".join(lines)
    edits = []
    for node in _own_returns(ast.parse(source)):
        if node.value is None:
            continue
        values = node.value.elts if isinstance(node.value, ast.Tuple) and len(op.outputs) > 1 else [node.value]
        if len(values) != len(op.outputs):
            continue
        edits += [(value, _contiguous(ast.get_source_segment(source, value), value)) for value, wanted
                  in zip(values, contiguous, strict=True) if wanted and not _is_contiguous_call(value)]
    return _apply(lines, edits)


def _own_returns(tree: ast.Module) -> list[ast.Return]:
    """The `return` statements of the body, not of functions or classes defined in it."""
    found, pending = [], list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            pending += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    return found


def _is_contiguous_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "contiguous"


def _contiguous(text: str, node: ast.expr) -> str:
    atom = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return f"{text}.contiguous()" if atom else f"({text}).contiguous()"


def _apply(lines: list[str], edits: list[tuple[ast.expr, str]]) -> list[str]:
    """`lines` with each expression's source replaced (last first, so earlier positions stay right)."""
    for node, text in sorted(edits, key=lambda edit: (edit[0].lineno, edit[0].col_offset), reverse=True):
        first, last = node.lineno - 1, node.end_lineno - 1
        # ast's columns count UTF-8 bytes
        head = lines[first].encode()[:node.col_offset].decode()
        tail = lines[last].encode()[node.end_col_offset:].decode()
        lines[first:last + 1] = (head + text + tail).split("\n")
    return lines
