"""The one Python formatter of generated code: string literals, calls, `def` lines and data, wrapped one item per
line past the line length (ruff's 120 in generated projects). The templates reach it through `PythonFormat`, a
Jinja extension cookiecutter loads (`_extensions` in each cookiecutter.json), so a template only says what to
write, never where to break a line.

Text from the spec only reaches generated code through `literal` / `docstring` (inert whatever it holds).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import textwrap

from jinja2 import BytecodeCache
from jinja2.ext import Extension

LINE_LENGTH = 120
RULER_WIDTH = 100  # `# --- name -----` section rulers end at this column


def literal(text: str) -> str:
    """A Python string literal for any text (quotes, backslashes, newlines, braces stay inert)."""
    return json.dumps(text, ensure_ascii=True)


def docstring(text: str, indent: str = "") -> str:
    """A docstring literal: readable triple quotes when that is safe, an escaped literal otherwise."""
    text = text.strip()
    safe = (text and all(ch.isprintable() or ch == "\n" for ch in text) and "\\" not in text
            and '"""' not in text and not text.endswith('"') and text.isascii())
    if not safe:
        return literal(text or "(no description)")
    lines = text.split("\n")
    if len(lines) == 1:
        return f'"""{text}"""'
    body = "\n".join((indent + line) if line.strip() else "" for line in lines[1:])
    return f'"""{lines[0]}\n{body}\n{indent}"""'


def string_call(prefix: str, text: str, suffix: str, indent: str = "") -> str:
    """`prefix"text"suffix`, with the literal split over lines (implicit concatenation) when too long.
    `indent` is where the line starts in the generated file (the result's first line carries none)."""
    line = prefix + literal(text) + suffix
    if len(indent + line) <= LINE_LENGTH:
        return line
    pieces, current = [], ""
    separator = ", " if ", " in text else " "
    for part in text.split(separator):
        candidate = part if not current else current + separator + part
        if current and len(literal(candidate)) > LINE_LENGTH - 8 - len(indent):
            pieces.append(current + separator)
            current = part
        else:
            current = candidate
    pieces.append(current)
    return prefix + "\n" + "".join(f"{indent}    {literal(piece)}\n" for piece in pieces) + indent + suffix


def string_value(text: str, indent: str, lead: str = "", tail: str = ",") -> str:
    """A string literal after `lead` on a line starting at `indent`, followed by `tail`; parenthesised and split
    over lines (indented one level more) when too long."""
    line = literal(text)
    if len(f"{indent}{lead}{line}{tail}") <= LINE_LENGTH:
        return line
    return string_call(f"{lead}(", text, ")", indent)[len(lead):]


def call(head: str, args: list[str], indent: str = "", tail: str = "") -> str:
    """`head(a, b)tail`, or one argument per line (with a trailing comma) when that line would be too long."""
    line = f"{head}({', '.join(args)}){tail}"
    if len(indent + line) <= LINE_LENGTH:
        return line
    inner = "".join(f"{indent}    {arg},\n" for arg in args)
    return f"{head}(\n{inner}{indent}){tail}"


def define(name: str, params: list[str], returns: str) -> str:
    """A `def` line, wrapped one parameter per line when it would be too long."""
    line = f"def {name}({', '.join(params)}) -> {returns}:"
    if len(line) <= LINE_LENGTH:
        return line
    return f"def {name}(\n" + "".join(f"    {param},\n" for param in params) + f") -> {returns}:"


def wrapped_list(prefix: str, items: list[str], opening: str, closing: str) -> str:
    """`prefix[a, b]` (or `prefix a, b` for an import), one item per line when too long."""
    inline = ", ".join(items)
    if len(prefix) + len(inline) + 2 <= LINE_LENGTH:
        return f"{prefix}{inline}" if opening == "(" else f"{prefix}{opening}{inline}{closing}"
    return f"{prefix}{opening}\n" + "".join(f"    {item},\n" for item in items) + closing


def import_line(module: str, name: str) -> str:
    line = f"from {module} import {name}"
    return line if len(line) <= LINE_LENGTH else f"from {module} import (\n    {name},\n)"


def tuple_text(items: list[str]) -> str:
    if not items:
        return "()"
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def ruler(title: str) -> str:
    """`# --- title -------` up to RULER_WIDTH columns (at least three dashes after the title)."""
    head = f"# --- {title} "
    return head + "-" * max(3, RULER_WIDTH - len(head))


def comment_lines(text: str, width: int = LINE_LENGTH - 10) -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False)


# Where a too-long expression inside brackets may break, loosest binding first (one group at a time).
_BREAKS = ((" if ", " else "), (" or ",), (" and ",), (" + ", " - "), (" * ", " // ", " % "))


def wrap(text: str, indent: int, inside: bool = False) -> list[str]:
    """`text` (one line of Python) as lines of at most LINE_LENGTH columns at `indent`, broken inside its
    brackets: a comprehension's `for` on a line of its own, one item per line after a top-level comma (with a
    trailing comma), and (`inside` brackets) before the loosest operator. A line that cannot break stays whole."""
    if indent + len(text) <= LINE_LENGTH:
        return [" " * indent + text]
    if inside:
        for separators in _BREAKS:
            parts = split_top_level(text, separators, keep=True)
            if len(parts) > 1:
                return [line for part in parts for line in wrap(part, indent, inside=True)]
    group = _first_group(text)
    if group is None:
        return [" " * indent + text]
    opening, closing = group
    content = text[opening + 1:closing]
    if len(split_top_level(content, (" for ",))) > 1:  # a comprehension
        pieces = split_top_level(content, (" for ",), keep=True)
    else:
        items = split_top_level(content)
        pieces = [f"{item}," for item in items] if len(items) > 1 else [content]
    lines = [" " * indent + text[:opening + 1]]
    for piece in pieces:
        lines += wrap(piece, indent + 4, inside=True)
    return lines + wrap(text[closing:], indent, inside)


def _first_group(text: str) -> tuple[int, int] | None:
    """(opening, closing) index of the first top-level bracket pair with something inside."""
    depth, opening, quote = 0, None, None
    for index, char in enumerate(text):
        if quote:
            quote = None if char == quote and text[index - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            if depth == 0:
                opening = index
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0 and opening is not None and index > opening + 1:
                return opening, index
    return None


def split_top_level(text: str, separators: tuple[str, ...] = (",",), keep: bool = False) -> list[str]:
    """Split `a, b(c, d), [e, f]` at the separators outside brackets and strings; `keep`: each later part
    starts with its separator (stripped of the space before it)."""
    items, depth, start, quote, index = [], 0, 0, None, 0
    while index < len(text):
        char = text[index]
        separator = next((sep for sep in separators if text.startswith(sep, index)), None)
        if quote:
            quote = None if char == quote and text[index - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and separator is not None:
            items.append(text[start:index].strip())
            start = index + (1 if keep else len(separator))
            index += len(separator)
            continue
        index += 1
    if text[start:].strip():
        items.append(text[start:].strip())
    return items


def fit(line: str, indent: int) -> list[str]:
    """`line` (an item ending in ","), with a long list or `torch.tensor([...])` broken one element per line."""
    if len(line) + indent <= LINE_LENGTH:
        return [line]
    stripped = line.strip()
    lead = line[: len(line) - len(line.lstrip())]
    head = stripped.split(": ", 1)[0] + ": " if stripped.startswith('"') and '": ' in stripped else ""
    value = stripped[len(head):]
    if value.startswith("[") and value.endswith("],"):
        items = split_top_level(value[1:-2])
        return [f"{lead}{head}["] + [part for item in items for part in fit(f"{lead}    {item},", indent)] + [f"{lead}],"]
    if value.startswith("torch.tensor([") and value.endswith("),"):  # exact values: one row per line
        values, *rest = split_top_level(value[len("torch.tensor("):-2])
        return ([f"{lead}{head}torch.tensor(", f"{lead}    ["]
                + [part for item in split_top_level(values[1:-1]) for part in fit(f"{lead}        {item},", indent)]
                + [f"{lead}    ],"] + [f"{lead}    {item}," for item in rest] + [f"{lead}),"])
    return [line]


def wrap_value(text: str, indent: int) -> list[str]:
    """`text` (a value ending in ","), its top-level list or dict broken one item per line, recursively."""
    if len(text) + indent <= LINE_LENGTH or text[0] not in "[{":
        return [text]
    closing = text[-2]
    items = split_top_level(text[1:-2])
    out = [text[0]]
    for item in items:
        if text[0] == "{" and ": " in item and len(item) + indent + 5 > LINE_LENGTH:
            key, value = item.split(": ", 1)
            inner = wrap_value(value + ",", indent + 4)
            out += [f"    {key}: {inner[0]}"] + [f"    {line}" for line in inner[1:]]
        else:
            out += [f"    {line}" for line in wrap_value(item + ",", indent + 4)]
    return out + [closing + ","]


class PythonFormat(Extension):
    """`call`, `define`, `ruler` and `literal` for the templates (cookiecutter.json: `_extensions`)."""

    def __init__(self, environment) -> None:
        super().__init__(environment)
        environment.globals.update(call=call, define=define, ruler=ruler, literal=literal)
        # cookiecutter builds a new environment for every render (one per op): compile each template once
        environment.bytecode_cache = _COMPILED


class _CompiledTemplates(BytecodeCache):
    """Compiled templates kept for the life of the process and in `<opgen cache>/templates/` (compiling them was a
    third of an `opgen new`'s CPU). jinja keys them by template name and checks the source's checksum and its own and
    Python's versions on load; the folder names jinja2's and cookiecutter's versions (cookiecutter's extensions add
    tags, which change what a template compiles to). A cache that cannot be read or written is left alone: the
    template compiles, as without one."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self._folder = None

    def folder(self):
        if self._folder is None:
            from importlib.metadata import version

            from ..files import cache_root

            self._folder = cache_root() / "templates" / f"jinja2-{version('jinja2')}-cookiecutter-{version('cookiecutter')}"
        return self._folder

    def load_bytecode(self, bucket) -> None:
        if bucket.key not in self._code:
            try:
                self._code[bucket.key] = (self.folder() / bucket.key).read_bytes()
            except (OSError, RuntimeError, ValueError):
                return
        try:  # a stale one (another source, jinja or Python) resets the bucket itself: the template compiles
            bucket.bytecode_from_string(self._code[bucket.key])
        except Exception:  # noqa: BLE001  (a torn file, written when the machine went down: compile)
            del self._code[bucket.key]
            bucket.reset()

    def dump_bytecode(self, bucket) -> None:
        self._code[bucket.key] = code = bucket.bytecode_to_string()
        partial = None
        try:  # whole or not at all for a concurrent reader: written aside, then renamed over
            self.folder().mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=self.folder(), prefix=bucket.key, suffix=".tmp",
                                             delete=False) as part:
                partial = part.name
                part.write(code)
            os.replace(partial, self.folder() / bucket.key)
        except (OSError, RuntimeError, ValueError):
            if partial is not None:
                with contextlib.suppress(OSError):
                    os.unlink(partial)


_COMPILED = _CompiledTemplates()
