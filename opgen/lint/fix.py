"""Safe fixes: exact edits inside one string literal, so comments and formatting stay as they were.

A fix is only offered for a literal whose characters map 1:1 onto its source line (no escapes, no
implicit concatenation), which the collector has already verified; the edit is then a plain
character replacement at a known line and column, which is what libcst would produce as well
without paying for a concrete syntax tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from .records import Literal


@dataclass(frozen=True)
class Edit:
    path: str
    line: int
    start: int  # 0-based character offsets on `line`
    end: int
    text: str
    message: str

    def as_dict(self) -> dict:
        return {"content": self.text, "location": {"row": self.line, "column": self.start + 1},
                "end_location": {"row": self.line, "column": self.end + 1}, "message": self.message}


def replace_literal(path: str, literal: Literal, new_value: str) -> Edit:
    return Edit(path, literal.line, literal.offset, literal.offset + len(literal.value), new_value,
                f"replace {literal.value!r} with {new_value!r}")


def remove_namespace(path: str, literal: Literal, namespace: str) -> Edit | None:
    prefix = namespace + "::"
    stripped = literal.value.lstrip()
    if not stripped.startswith(prefix):
        return None
    start = literal.offset + (len(literal.value) - len(stripped))
    return Edit(path, literal.line, start, start + len(prefix), "", f"remove '{prefix}'")


def add_mutation_annotation(path: str, definition, schema, argument) -> Edit | None:
    """`Tensor x` -> `Tensor(b!) x` inside the define() literal, with a letter no other argument uses."""
    from ..schema.parser import span_column

    literal = definition.schema_literal
    if literal is None or definition.style != "library":
        return None
    column = span_column(schema, ("arg", argument.name))
    if column is None:
        return None
    index = column - 1 - definition.name_offset
    if index < 0 or not literal.value.startswith("Tensor", index):
        return None
    after = index + len("Tensor")
    if after < len(literal.value) and literal.value[after] == "(":
        return None
    used = {letter for a in schema.arguments if a.alias for letter in (*a.alias.before, *a.alias.after)}
    used |= {letter for r in schema.returns if r.alias for letter in (*r.alias.before, *r.alias.after)}
    letter = next(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in used)
    at = literal.offset + after
    return Edit(path, literal.line, at, at, f"({letter}!)", f"declare {argument.name!r} as written: "
                f"'Tensor({letter}!) {argument.name}'")


def apply_edits(edits: list[Edit]) -> int:
    """Apply non-overlapping edits file by file; returns how many were applied."""
    by_path: dict[str, list[Edit]] = {}
    for edit in edits:
        by_path.setdefault(edit.path, []).append(edit)
    applied = 0
    for path, file_edits in by_path.items():
        with open(path, encoding="utf-8", newline="") as handle:
            lines = handle.read().split("\n")
            lines = [line + "\n" for line in lines[:-1]] + [lines[-1]]
        taken: dict[int, list[tuple[int, int]]] = {}
        for edit in sorted(set(file_edits), key=lambda e: (e.line, e.start), reverse=True):
            spans = taken.setdefault(edit.line, [])
            if any(edit.start < end and start < edit.end or (edit.start == start == end == edit.end)
                   for start, end in spans):
                continue
            line = lines[edit.line - 1]
            lines[edit.line - 1] = line[:edit.start] + edit.text + line[edit.end:]
            spans.append((edit.start, edit.end))
            applied += 1
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write("".join(lines))
    return applied
