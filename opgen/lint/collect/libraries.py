"""`torch.library.Library` objects: where a file makes them (`lib = Library("ns", "FRAGMENT")`, `self.lib =
...`, `with _scoped_library(...) as lib`, a factory function returning one, a sibling module's
module-level Library imported by name), and which one a name means at a given line."""

from __future__ import annotations

import ast

from ..records import UNKNOWN, FileRecord, KeyLiteral, LibraryDecl
from .context import FileContext
from .names import LIB
from .syntax import arguments, assigned_names, dotted

LIBRARY_CALLS = (LIB + "Library", LIB + "_scoped_library", "torch._library.Library")


def library_at(ctx: FileContext, node: ast.AST, line: int, *, imported: bool = True) -> LibraryDecl | None:
    """The Library a receiver expression means at `line` (the latest one assigned before it)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        return _library_factory(ctx, node.func.id)
    key = dotted(node)
    if key is None:
        return None
    candidates = ctx.libraries.get(key)
    if not candidates:
        return _imported_library(ctx, key) if imported else None
    before = [decl for at, decl in candidates if at <= line]
    if before:
        return before[-1]
    namespaces = {decl.namespace for _, decl in candidates}
    return candidates[0][1] if len(namespaces) == 1 else None


def _library_factory(ctx: FileContext, name: str) -> LibraryDecl | None:
    """`get_meta_lib().impl(...)`: a local function whose body returns `Library(...)`."""
    for function in ctx.functions.get(name, ())[-1:]:
        returned = [n.value for n in function.body if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
        if len(returned) == 1:
            return library_call(ctx, returned[0], scoped=False, module_level=False, record=False)
    return None


def scoped_libraries(ctx: FileContext, node: ast.With) -> None:
    """`with _scoped_library("ns", "FRAGMENT") as lib:`."""
    for item in node.items:
        if isinstance(item.context_expr, ast.Call) and item.optional_vars is not None:
            decl = library_call(ctx, item.context_expr, scoped=True, module_level=False)
            key = dotted(item.optional_vars)
            if decl and key:
                ctx.libraries.setdefault(key, []).append((node.lineno, decl))


def library_assignment(ctx: FileContext, node: ast.AST, value: ast.Call) -> None:
    """`lib = Library(...)` / `self.lib = Library(...)`."""
    decl = library_call(ctx, value, scoped=False, module_level=id(node) in ctx.module_level_ids)
    if decl is None:
        return
    for target in assigned_names(node):
        key = dotted(target)
        if key:
            ctx.libraries.setdefault(key, []).append((node.lineno, decl))
            namespaces = {library.namespace for _, library in ctx.libraries[key]}
            if len(namespaces) == 1:  # `f"{lib.ns}::f"`: the Library's namespace, when the name has one
                ctx.names.constants[key + ".ns"] = decl.namespace
            else:
                ctx.names.constants.pop(key + ".ns", None)


def library_call(ctx: FileContext, call: ast.Call, *, scoped: bool, module_level: bool, record: bool = True
                 ) -> LibraryDecl | None:
    """The Library a `Library(ns, kind, dispatch_key)` call makes (recorded in the file's record unless
    `record` is False), or None when it is not one or its namespace or kind cannot be read."""
    qual = ctx.qualname(call.func)
    if qual not in LIBRARY_CALLS:
        return None
    args = arguments(call, ("ns", "kind", "dispatch_key"))
    namespace, kind = ctx.value(args.get("ns")), ctx.value(args.get("kind"))
    key_node = args.get("dispatch_key")
    key = ctx.value(key_node) if key_node is not None else ""
    if not isinstance(namespace, str) or not isinstance(kind, str):
        return None
    decl = LibraryDecl(namespace, kind, key if isinstance(key, str) else UNKNOWN, ctx.where(call),
                       module_level, scoped or qual.endswith("_scoped_library"))
    if not record:
        return decl
    ctx.record.libraries.append(decl)
    if key_node is not None:
        dispatch_key(ctx, key_node)
    return decl


def dispatch_key(ctx: FileContext, node: ast.AST) -> None:
    """Record a dispatch-key literal (a position that takes only keys) for the spelling rule."""
    value = ctx.value(node)
    if isinstance(value, str) and value:
        ctx.record.dispatch_keys.append(KeyLiteral(value, ctx.where(node), ctx.literal(node)))


def _imported_library(ctx: FileContext, local: str) -> LibraryDecl | None:
    """`from .ops import lib`: the module-level Library of a sibling module."""
    found = ctx.names.imported_file(local)
    if found is None:
        return None
    target, name = found
    return libraries_in_file(target).get(name)


_LIBRARIES_BY_FILE: dict[str, dict[str, LibraryDecl]] = {}


def libraries_in_file(path: str) -> dict[str, LibraryDecl]:
    """The module-level `name = Library(...)` objects of a file (cached: several files import them)."""
    cached = _LIBRARIES_BY_FILE.get(path)
    if cached is not None:
        return cached
    found: dict[str, LibraryDecl] = {}
    _LIBRARIES_BY_FILE[path] = found
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if b"Library(" not in data and b"_scoped_library(" not in data:
            return found
        text = data.decode("utf-8", errors="replace")
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return found
    ctx = FileContext(FileRecord(path), text, tree)
    ctx.add_imports([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))])
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            decl = library_call(ctx, node.value, scoped=False, module_level=False)
            for target in assigned_names(node):
                if decl is not None and isinstance(target, ast.Name):
                    found[target.id] = decl
    return found
