"""What the names of one file stand for, read without running it: imports (`import torch.library as tl`,
`from torch.library import impl as i`), module-level constants (op names, schemas, keys), and, while a
registration wrapper's use is read, the wrapper's parameters bound to the arguments given there.
What cannot be resolved is UNKNOWN, never guessed."""

from __future__ import annotations

import ast
import os
import re

from ..records import UNKNOWN
from .syntax import dotted

LIB = "torch.library."


class Names:
    __slots__ = ("aliases", "bindings", "constants", "import_sources", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.aliases: dict[str, str] = {}  # local name -> the dotted name it stands for
        self.constants: dict[str, object] = {}
        self.import_sources: dict[str, tuple[str, str, int]] = {}  # local -> (module, name, level)
        self.bindings: dict[str, object] = {}  # while a wrapper's use is read: its parameters' arguments

    def add_imports(self, imports: list[ast.AST]) -> bool:
        """Record the aliases the import statements make; True when one imports torch_npu (which renames
        PrivateUse1 to npu)."""
        npu = False
        for node in sorted(imports, key=lambda n: n.lineno):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch_npu":
                        npu = True
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            else:
                if (node.module or "").split(".")[0] == "torch_npu" and node.level == 0:
                    npu = True
                for alias in node.names:
                    local = alias.asname or alias.name
                    self.import_sources[local] = (node.module or "", alias.name, node.level)
                    if node.module and node.level == 0:
                        self.aliases[local] = f"{node.module}.{alias.name}"
        return npu

    def add_constants(self, tree: ast.Module, counts: dict[str, int]) -> None:
        """Module-level names assigned once to a value opgen can read (op names, schemas, keys)."""
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name) and counts.get(statement.targets[0].id) == 1:
                value = self.value(statement.value)
                if value is not UNKNOWN:
                    self.constants[statement.targets[0].id] = value

    def add_api_aliases(self, tree: ast.Module) -> None:
        """Module-level names bound to a registration API or namespace (`_custom_op = torch.library.custom_op`,
        `register_fake = getattr(torch.library, "register_fake", None)`, `ops = torch.ops.ns`), also under
        a module-level `if`/`try` (a fallback for old torch): every registration behind them is read."""
        for statement in _module_statements(tree):
            if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)):
                continue
            target = self._api_target(statement.value)
            if target is not None:
                self.aliases.setdefault(statement.targets[0].id, target)

    def _api_target(self, value: ast.AST) -> str | None:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
                and len(value.args) >= 2 and isinstance(self.value(value.args[1]), str):
            head = self.qualname(value.args[0])
            qual = f"{head}.{self.value(value.args[1])}" if head else None
        else:
            qual = self.qualname(value) if isinstance(value, ast.Attribute) else None
        if qual is not None and qual.startswith(("torch.library.", "torch._library.", "torch.ops.")):
            return qual
        return None

    def registration_aliases(self) -> set[str]:
        """The local names that stand for a registration API (or torch.library itself)."""
        return {name for name, target in self.aliases.items()
                if target.startswith(("torch.library", "torch._library")) or target.endswith("custom_op")}

    def qualname(self, node: ast.AST) -> str | None:
        """`torch.library.impl` for `tl.impl` after `import torch.library as tl`; None if not a dotted name."""
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        head = self.aliases.get(head, head)
        return f"{head}.{rest}" if rest else head

    def is_api(self, func: ast.AST, *names: str) -> str | None:
        """Which of the torch.library `names` a callee is, if any."""
        qual = self.qualname(func)
        if qual is None:
            return None
        for name in names:
            if qual == LIB + name or qual == "torch._library.custom_ops." + name and name == "custom_op":
                return name
        return None

    def value(self, node: ast.AST | None):
        """A constant value (str, int, float, bool, None, tuples of those), or UNKNOWN."""
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.bindings:
                return self._bound_value(node.id)
            return self.constants.get(node.id, UNKNOWN)
        if isinstance(node, ast.Attribute) and node.attr == "ns" and isinstance(node.value, (ast.Name, ast.Attribute)):
            return self.constants.get(f"{dotted(node.value)}.ns", UNKNOWN)  # a Library's namespace
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return UNKNOWN
        if isinstance(node, ast.JoinedStr):
            return self._formatted(node)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [self.value(e) for e in node.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand)
            return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else UNKNOWN
        return UNKNOWN

    def template(self, node: ast.AST | None) -> list[str | None] | None:
        """A string expression as its readable parts and holes (None): `f"ns::{name}_out"` is
        ["ns::", None, "_out"]; None when it is no string expression (a call, a variable we cannot read)."""
        value = self.value(node)
        if isinstance(value, str):
            return [value]
        if isinstance(node, ast.JoinedStr):
            parts: list[str | None] = []
            for part in node.values:
                inner = self.value(part.value) if isinstance(part, ast.FormattedValue) else part.value
                simple = isinstance(part, ast.Constant) or part.conversion == -1 and part.format_spec is None
                parts.append(str(inner) if simple and isinstance(inner, (str, int)) and not isinstance(inner, bool)
                             else None)
            return parts
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.template(node.left), self.template(node.right)
            if left is None and right is None:
                return None
            return [*(left or [None]), *(right or [None])]
        return None

    def _formatted(self, node: ast.JoinedStr):
        """A simple f-string whose every placeholder is a readable str or int."""
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                inner = self.value(part.value)
                if not isinstance(inner, (str, int)) or isinstance(inner, bool):
                    return UNKNOWN
                parts.append(str(inner))
            else:
                return UNKNOWN
        return "".join(parts)

    def _bound_value(self, name: str):
        """A wrapper parameter's value: the argument given at the use, read where the use is."""
        bound = self.bindings[name]
        if not isinstance(bound, ast.expr):
            return UNKNOWN
        saved, self.bindings = self.bindings, {}
        try:
            return self.value(bound)
        finally:
            self.bindings = saved

    def imported_file(self, local: str) -> tuple[str, str] | None:
        """(the file, the name there) that `from <module> import <name> as <local>` reads, when the module is
        a source file on disk."""
        source = self.import_sources.get(local)
        if source is None:
            return None
        module, name, level = source
        target = module_file(self.path, module, level)
        return (target, name) if target is not None else None


def _module_statements(tree: ast.Module):
    """The module-level statements, and those one `if`/`try` block deep."""
    for statement in tree.body:
        yield statement
        if isinstance(statement, (ast.If, ast.Try)):
            for block in (statement.body, statement.orelse, getattr(statement, "finalbody", []),
                          *(handler.body for handler in getattr(statement, "handlers", []))):
                yield from block


def pattern_of(parts: list[str | None]) -> str:
    """A regular expression matching what a template (`Names.template`) can be: its holes match anything."""
    pattern = []
    for part in parts:
        if part is not None:
            pattern.append(re.escape(part.strip()))
        elif not pattern or pattern[-1] != ".*":
            pattern.append(".*")
    return "".join(pattern)


def module_file(path: str, module: str, level: int) -> str | None:
    """The file a `from <module> import ...` in `path` reads, when it is a source file on disk."""
    parts = [p for p in module.split(".") if p]
    if level > 0:
        base = os.path.dirname(os.path.abspath(path))
        for _ in range(level - 1):
            base = os.path.dirname(base)
        bases = [base]
    else:
        if not parts:
            return None
        bases, current = [], os.path.dirname(os.path.abspath(path))
        while True:  # the package root is an ancestor directory of this file
            bases.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    for base in bases:
        stem = os.path.join(base, *parts)
        for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate if os.path.isabs(path) else os.path.relpath(candidate)
    return None
