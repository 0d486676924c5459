"""Read one Python file into a `FileRecord`: libraries, definitions, registrations, function facts.

Uses the stdlib `ast` (libcst is an order of magnitude slower and only needed for edits that keep
formatting). One concern per module, as ruff and Fixit keep one rule per file:

- source.py: the text (prefilter, the lines worth walking, `# noqa`, positions);
- syntax.py: small questions about ast nodes;
- names.py: what a name stands for (imports, module constants, a wrapper's bound parameters);
- walk.py: which statements are read, and who owns each call and def;
- libraries.py: `Library` objects;
- definitions.py: `define`, `custom_op`, `direct_register_custom_op`;
- registrations.py: kernels, fakes and their forms (calls, decorators, applied decorators, wrappers' uses);
- wrappers.py: a project's own registration wrappers, one level deep;
- functions.py: which function a registration names; facts.py: what its body does.

`context.FileContext` is what they share while one file is read.
"""

from __future__ import annotations

import ast

from ..records import FileRecord, Unreadable
from . import registrations, walk
from .context import FileContext
from .functions import function_in_file
from .source import has_call_site, may_register, read_noqa, source_lines
from .wrappers import find_wrappers

__all__ = ["collect_source", "function_in_file", "may_register", "read_file", "read_noqa", "source_lines"]

_read_noqa = read_noqa  # the name the engine imports


def read_file(path: str, data: bytes | None = None) -> FileRecord | None:
    """The record of one file, or None when it cannot hold a registration."""
    if data is None:
        with open(path, "rb") as handle:
            data = handle.read()
    if not may_register(data) or not has_call_site(data):
        return None
    text = data.decode("utf-8", errors="replace")
    return collect_source(path, text)


def collect_source(path: str, text: str) -> FileRecord:
    record = FileRecord(path)
    read_noqa(record, text)
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None) or 1
        column = getattr(error, "offset", None) or 1
        message = getattr(error, "msg", None) or str(error)
        record.unreadable = Unreadable(message, line, max(column, 1))
        return record
    _read(FileContext(record, text, tree))
    return record


def _read(ctx: FileContext) -> None:
    counts, imports = walk.top_level(ctx)
    ctx.add_imports(imports)
    ctx.names.add_api_aliases(ctx.tree)
    gathered = walk.gather(ctx)
    ctx.add_imports(gathered.nested_imports)
    if find_wrappers(ctx, gathered.calls):  # their call sites name no registration API: walk those lines too
        ctx.functions.clear()
        walk.top_level(ctx)
        gathered = walk.gather(ctx)
    ctx.names.add_constants(ctx.tree, counts)
    registrations.read(ctx, gathered)
