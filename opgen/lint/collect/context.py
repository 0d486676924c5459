"""What the readers of one file share while they read it: its record (what they find goes there), its
source and names, the functions and Library objects seen so far, and the state of a registration
wrapper's expansion. Each reader (libraries, definitions, registrations, wrappers, functions) is a module
of functions taking this context."""

from __future__ import annotations

import ast

from ..records import Definition, FileRecord, Function, LibraryDecl, Literal, Where
from .names import Names
from .source import Source


class FileContext:
    def __init__(self, record: FileRecord, text: str, tree: ast.Module) -> None:
        self.record = record
        self.path = record.path
        self.source = Source(record.path, text)
        self.names = Names(record.path)
        self.tree = tree
        self.functions: dict[str, list[ast.AST]] = {}  # name -> its defs, in the order seen
        self.libraries: dict[str, list[tuple[int, LibraryDecl]]] = {}  # dotted name -> (line, Library)
        self.custom_ops: dict[str, Definition] = {}  # names bound to a CustomOpDef
        self.decorator_ids: set[int] = set()
        self.module_level_ids: set[int] = set()
        self.function_facts: dict[int, Function] = {}
        self.unconditional: set[int] = set()  # ids of calls in plain module-level statements
        self.applied: dict[int, ast.AST] = {}  # `register_fake("ns::f")(fake)`: id of the inner call -> `fake`
        self.owners: dict[int, ast.AST | None] = {}  # id of a call or def -> the def it is written in
        self.wrappers: dict = {}  # local functions that forward to a registration API (wrappers.Wrapper)
        self.templates: set[int] = set()  # ids of the registration calls inside wrappers (read at each use)
        self.site: ast.AST | None = None  # while a wrapper's use is read: where it is used (reported there)
        self.host_helpers: dict[str, bool] = {}  # local functions -> whether each returns a host tensor

    @property
    def lines(self) -> list[str]:
        return self.source.lines

    def qualname(self, node: ast.AST) -> str | None:
        return self.names.qualname(node)

    def is_api(self, func: ast.AST, *names: str) -> str | None:
        return self.names.is_api(func, *names)

    def value(self, node: ast.AST | None):
        return self.names.value(node)

    def where(self, node: ast.AST) -> Where:
        return self.source.where(node)

    def literal(self, node: ast.AST) -> Literal | None:
        return self.source.literal(node)

    def add_imports(self, imports: list[ast.AST]) -> None:
        if self.names.add_imports(imports):
            self.record.npu_renamed = True
