"""The pieces of an op-plugin contribution and the editors that find, insert and remove them in a file.

A piece is one entry opgen owns inside someone else's file (a YAML entry, a JSON member, an allowlist
name, a Meta function, a docstring call, a fake-tensor test class, a menu line, an API-list row) or a
whole new file (a kernel, a test, a doc page). Editors work on the file's text with "\\n" line ends (add.py
restores CRLF) and never touch a byte outside the piece and its separator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    path: str  # the file, relative to the checkout
    kind: str  # the editor: yaml, json, allow, meta, docstr, fake, menu, row, file
    key: str  # what names it in the file: op name, JSON key, class name, ...
    text: str  # the text opgen writes for it (no trailing newline, except a whole file)
    op: str  # the spec op it belongs to (its name)
    section: str = ""  # yaml: `custom` / `backward`; allow: the version list

    @property
    def ident(self) -> str:
        return f"{self.path}::{self.kind}::{self.section}::{self.key}"


class EditError(Exception):
    """A file that cannot take the piece (not parseable, no place for it); nothing is written."""


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def line_offsets(text: str) -> list[int]:
    """The offset of each line's first character."""
    offsets = [0]
    for index, char in enumerate(text):
        if char == "\n":
            offsets.append(index + 1)
    return offsets


def remove_lines(text: str, start: int, end: int) -> str:
    """`text` without the lines [start, end) (whole lines), their newline and the blank lines above them."""
    head = text[:start].rstrip("\n")
    tail = text[end:]
    return (head + "\n" if head else "") + tail.removeprefix("\n")


class FileEditor:
    """A whole file: the piece is the file's text."""

    def find(self, text: str | None, piece: Piece):
        return None if text is None else (0, len(text))

    def insert(self, text: str | None, piece: Piece) -> str:
        return piece.text

    def remove(self, text: str, span) -> str | None:
        return None  # the file goes
