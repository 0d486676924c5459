"""Safe fixes: exact edits inside one string literal, so comments and formatting stay as they were.

A fix is only offered for a literal whose characters map 1:1 onto its source line (no escapes, no
implicit concatenation), which the collector has already verified; the edit is then a plain
character replacement at a known line and column, which is what libcst would produce as well
without paying for a concrete syntax tree. Each rule's fix (the function that makes its `Edit`) lives
next to the rule, in `opgen.lint.rules`.
"""

from __future__ import annotations

from dataclasses import dataclass


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
