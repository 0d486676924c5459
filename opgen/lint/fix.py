"""Safe fixes: exact edits inside one string literal, so comments and formatting stay as they were.

A fix is only offered for a literal whose characters map 1:1 onto its source line (no escapes, no
implicit concatenation), which the collector has already verified; the edit is then a plain
character replacement at a known line and column, which is what libcst would produce as well
without paying for a concrete syntax tree. Each rule's fix (the function that makes its `Edit`) lives
next to the rule, in `opgen.lint.rules`.
"""

from __future__ import annotations

import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ..files import CannotRead, exclusive_lock, read_digest, read_limited


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


def apply_edits(edits: list[Edit], failed: dict[str, str] | None = None, *,
                read: dict[str, str] | None = None, changed: set[str] | None = None) -> int:
    """Apply non-overlapping edits file by file; returns how many were applied. Each file is rewritten whole or
    not at all (atomically, its mode and encoding kept), under an exclusive lock that another opgen fixing it waits
    for; one that cannot be (unreadable, read-only, a line whose columns its encoding moves) is left as it was,
    and why goes to `failed` (path -> reason). `read` (path -> sha256 of the bytes the edits were computed from):
    a file that no longer holds those bytes (another process rewrote it since) is left as it was and goes to
    `changed`, for the caller to check it again; its edits would land on other text."""
    by_path: dict[str, list[Edit]] = {}
    for edit in edits:
        by_path.setdefault(edit.path, []).append(edit)
    applied = 0
    for path, file_edits in by_path.items():
        try:
            if read is not None and path not in read:
                raise _NotRewritten("opgen did not read it in this run, so it cannot tell whether the fix still fits")
            with exclusive_lock(os.path.realpath(path)):
                count = _rewrite(path, file_edits, None if read is None else read[path])
        except _Changed:
            if changed is not None:
                changed.add(path)
            continue
        except _NotRewritten as refusal:
            if failed is not None:
                failed[path] = str(refusal)
            continue
        applied += count
    return applied


class _NotRewritten(Exception):
    pass


class _Changed(_NotRewritten):
    """The file holds other bytes than those its edits were computed from."""


def _rewrite(path: str, file_edits: list[Edit], expected: str | None) -> int:
    try:
        data = read_limited(path)
    except CannotRead as refusal:
        raise _NotRewritten(f"cannot read it: it {refusal.reason}" if refusal.error is None else
                            f"cannot read it: {refusal.reason}") from None
    if expected is not None and read_digest(data) != expected:
        raise _Changed(path)
    encoding = _encoding(data)
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        raise _NotRewritten(f"it is not valid {encoding}") from None
    lines = text.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    raw = data.split(b"\n")
    original = list(lines)
    taken: dict[int, list[tuple[int, int]]] = {}
    applied = 0
    for edit in sorted(set(file_edits), key=lambda e: (e.line, e.start), reverse=True):
        spans = taken.setdefault(edit.line, [])
        if any(edit.start < end and start < edit.end or (edit.start == start == end == edit.end)
               for start, end in spans):
            continue
        if not 0 < edit.line <= len(lines):
            raise _NotRewritten(f"it changed since it was checked (no line {edit.line})")
        # the collector counts columns in the text as UTF-8 (bad bytes replaced): the line must read the same
        if raw[edit.line - 1].decode("utf-8", errors="replace") != original[edit.line - 1].removesuffix("\n"):
            raise _NotRewritten(f"line {edit.line} reads differently in its encoding ({encoding}) and in UTF-8, "
                                "which the columns were counted in")
        line = lines[edit.line - 1]
        lines[edit.line - 1] = line[:edit.start] + edit.text + line[edit.end:]
        spans.append((edit.start, edit.end))
        applied += 1
    from ..render.staging import atomic_write  # the writer's machinery, only when a fix is written

    target = Path(os.path.realpath(path))  # through a symlink, the file it names
    if not os.access(target, os.W_OK):
        raise _NotRewritten("it is read-only")
    try:
        atomic_write(target, "".join(lines).encode(encoding), keep_mode=True)
    except (OSError, UnicodeEncodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise _NotRewritten(f"cannot write it: {reason}") from None
    return applied


def _encoding(data: bytes) -> str:
    """The encoding Python reads the source in (a coding cookie, a BOM, else UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return "utf-8"
    return encoding
