"""Top-level statements of op-plugin's Python files found with `ast` and edited as whole lines:
a Meta function `@impl(m, "npu_x")` of _meta_registrations.py (after the last one), a
`_add_torch_npu_docstr("npu_x", ...)` call of _op_plugin_docs.py (at the end), a test class of
test/core_tests/test_fake_tensor.py (after the last class, before `if __name__ == "__main__":`);
the imports a piece needs are added after the file's last top-level import when it lacks them."""

from __future__ import annotations

import ast
import functools

from .pieces import EditError, Piece, line_offsets, remove_lines


@functools.lru_cache(maxsize=8)
def _tree(text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as error:
        raise EditError(f"line {error.lineno}: not valid Python: {error.msg}") from None


def _span(text: str, node) -> tuple[int, int]:
    offsets = line_offsets(text)
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    end = offsets[node.end_lineno] - 1 if node.end_lineno < len(offsets) else len(text)
    return offsets[first - 1], end


def _after(text: str, cut: int, block: str, blank_lines: int = 2) -> tuple[str, int]:
    """`block` placed at offset `cut` (a line start, or the end), `blank_lines` blank lines before it; what follows
    keeps its gap. Also the offset just after the block (where the next block of the same kind goes)."""
    head = text[:cut]
    newline = "" if head.endswith("\n") else "\n"
    tail = text[cut:]
    head = head + newline + "\n" * blank_lines + block
    return head + ("\n" if tail or newline == "" else "") + tail, len(head) + (1 if tail or newline == "" else 0)


def _line_end(text: str, line: int) -> int:
    """The offset of the line after (1-based) `line`."""
    offsets = line_offsets(text)
    return offsets[line] if line < len(offsets) else len(text)


class _Appender:
    """Inserts blocks of one kind one after the other: the file is parsed for the first only, each later one
    goes right after the one before (so a contribution's pieces keep their order, and big files parse once)."""

    def __init__(self) -> None:
        self.anchor: tuple[str, int] | None = None

    def place(self, text: str, block: str, where) -> str:
        if self.anchor is not None and self.anchor[0] is text:
            cut = self.anchor[1]
        else:
            text, cut = where(text)
        result, end = _after(text, cut, block)
        self.anchor = (result, end)
        return result


def _mentions(text: str, name: str) -> bool:
    return f'"{name}"' in text or f"'{name}'" in text


def is_impl_m(decorator) -> bool:
    return (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name) and decorator.func.id == "impl"
            and len(decorator.args) >= 2 and isinstance(decorator.args[0], ast.Name) and decorator.args[0].id == "m")


def _impl_name(node) -> str | None:
    for decorator in getattr(node, "decorator_list", []):
        if is_impl_m(decorator) and isinstance(decorator.args[1], ast.Constant):
            return decorator.args[1].value
    return None


def add_imports(text: str, needed: dict[str, str]) -> str:
    """`needed` (name -> import line) added after the last top-level import for the names nothing imports."""
    tree = _tree(text)
    imported = set()
    last = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
            last = node.end_lineno
    missing = [line for name, line in needed.items() if name not in imported]
    if not missing:
        return text
    lines = text.split("\n")
    return "\n".join(lines[:last] + missing + lines[last:])


META_IMPORTS = {"torch": "import torch", "impl": "from torch.library import Library, impl"}


class MetaEditor(_Appender):
    def find(self, text: str, piece: Piece):
        if not _mentions(text, piece.key):
            return None
        for node in _tree(text).body:
            if isinstance(node, ast.FunctionDef) and _impl_name(node) == piece.key:
                return _span(text, node)
        return None

    def insert(self, text: str, piece: Piece) -> str:
        return self.place(text, piece.text, self._where)

    @staticmethod
    def _where(text: str) -> tuple[str, int]:
        text = add_imports(text, META_IMPORTS)
        body = _tree(text).body
        last = max((node.end_lineno for node in body if isinstance(node, ast.FunctionDef) and _impl_name(node)),
                   default=body[-1].end_lineno if body else 0)
        return text, _line_end(text, last)

    def remove(self, text: str, span) -> str:
        return remove_lines(text, *span)


class DocstrEditor(_Appender):
    def find(self, text: str, piece: Piece):
        if not _mentions(text, piece.key):
            return None
        for node in _tree(text).body:
            call = node.value if isinstance(node, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id == "_add_torch_npu_docstr" and call.args
                    and isinstance(call.args[0], ast.Constant) and call.args[0].value == piece.key):
                return _span(text, node)
        return None

    def insert(self, text: str, piece: Piece) -> str:
        return self.place(text, piece.text, self._where)

    @staticmethod
    def _where(text: str) -> tuple[str, int]:
        body = _tree(text).body
        if not any(isinstance(n, ast.FunctionDef) and n.name == "_add_torch_npu_docstr" for n in body):
            raise EditError("it does not define _add_torch_npu_docstr")
        return text, _line_end(text, body[-1].end_lineno)

    def remove(self, text: str, span) -> str:
        return remove_lines(text, *span)


class ClassEditor(_Appender):
    """A test class; `imports` are what its code needs (name -> import line)."""

    def __init__(self, imports: dict[str, str]) -> None:
        super().__init__()
        self.imports = imports

    def find(self, text: str, piece: Piece):
        if f"class {piece.key}" not in text:
            return None
        for node in _tree(text).body:
            if isinstance(node, ast.ClassDef) and node.name == piece.key:
                return _span(text, node)
        return None

    def insert(self, text: str, piece: Piece) -> str:
        return self.place(text, piece.text, self._where)

    def _where(self, text: str) -> tuple[str, int]:
        text = add_imports(text, self.imports)
        body = _tree(text).body
        classes = [node for node in body if isinstance(node, ast.ClassDef)]
        last = classes[-1].end_lineno if classes else (body[-1].end_lineno if body else 0)
        return text, _line_end(text, last)

    def remove(self, text: str, span) -> str:
        return remove_lines(text, *span)
