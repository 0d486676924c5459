"""Members of op-plugin's JSON files found and edited where they stand (the rest of the file byte for byte):
torch_npu_OpApi_schema_all.json (one object of `"func: ...": {"version": [...]}` members) and
allowlist_for_publicAPI.json (`{"torch_npu": {"all_version": [names], "v2.6": [names], ...}}`)."""

from __future__ import annotations

import json
import re
from json.decoder import scanstring

from .pieces import EditError, Piece

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")


def _skip(text: str, index: int) -> int:
    return _SPACE.match(text, index).end()


def object_members(text: str, start: int) -> list[tuple[str, int, int, int]]:
    """(key, key start, value start, value end) of each member of the object at `start` (a "{")."""
    members = []
    index = _skip(text, start + 1)
    if text[index:index + 1] == "}":
        return members
    while True:
        if text[index:index + 1] != '"':
            raise EditError(f"line {text.count(chr(10), 0, index) + 1}: a JSON key was expected")
        key, after = scanstring(text, index + 1)
        colon = _skip(text, after)
        value = _skip(text, colon + 1)
        _, end = _DECODER.raw_decode(text, value)
        members.append((key, index, value, end))
        index = _skip(text, end)
        if text[index:index + 1] == ",":
            index = _skip(text, index + 1)
            continue
        return members


def array_elements(text: str, start: int) -> list[tuple[object, int, int]]:
    """(value, start, end) of each element of the array at `start` (a "[")."""
    elements = []
    index = _skip(text, start + 1)
    if text[index:index + 1] == "]":
        return elements
    while True:
        value, end = _DECODER.raw_decode(text, index)
        elements.append((value, index, end))
        index = _skip(text, end)
        if text[index:index + 1] == ",":
            index = _skip(text, index + 1)
            continue
        return elements


def _load(text: str):
    try:
        json.loads(text)
    except ValueError as error:
        raise EditError(f"not valid JSON: {error}") from None
    return _skip(text, 0)


def _line_start(text: str, index: int) -> int:
    start = text.rfind("\n", 0, index) + 1
    return start if not text[start:index].strip() else index


class MemberEditor:
    """A member of the top-level object; its text is the whole member with its indentation."""

    def find(self, text: str, piece: Piece):
        for key, key_start, _, end in object_members(text, _load(text)):
            if key == piece.key:
                return _line_start(text, key_start), end
        return None

    def insert(self, text: str, piece: Piece) -> str:
        members = object_members(text, _load(text))
        if not members:
            close = text.rindex("}")
            return text[:close].rstrip() + "\n" + piece.text + "\n" + text[close:]
        end = members[-1][3]
        return text[:end] + ",\n" + piece.text + text[end:]

    def remove(self, text: str, span) -> str:
        return remove_item(text, *span, whole_line=True)


class AllowlistEditor:
    """A name in one version list of the allowlist (`section`: all_version, v2.6, ...)."""

    def _array(self, text: str, section: str) -> int | None:
        for key, _, value, _ in object_members(text, _load(text)):
            if key == "torch_npu" and text[value] == "{":
                for name, _, start, _ in object_members(text, value):
                    if name == section and text[start] == "[":
                        return start
        return None

    def sections(self, text: str) -> list[str]:
        for key, _, value, _ in object_members(text, _load(text)):
            if key == "torch_npu" and text[value] == "{":
                return [name for name, _, start, _ in object_members(text, value) if text[start] == "["]
        return []

    def find(self, text: str, piece: Piece):
        start = self._array(text, piece.section)
        for value, begin, end in array_elements(text, start) if start is not None else ():
            if value == piece.key:
                return begin, end
        return None

    def insert(self, text: str, piece: Piece) -> str:
        start = self._array(text, piece.section)
        if start is None:
            raise EditError(f"no torch_npu.{piece.section} list to add {piece.key} to")
        elements = array_elements(text, start)
        if not elements:
            line = text[text.rfind("\n", 0, start) + 1:start]
            indent = line[:len(line) - len(line.lstrip())]
            close = text.index("]", start)
            return f"{text[:start]}[\n{indent}  {piece.text}\n{indent}]{text[close + 1:]}"
        last = elements[-1][2]
        line = text[text.rfind("\n", 0, elements[-1][1]) + 1:elements[-1][1]]
        return text[:last] + ",\n" + line + piece.text + text[last:]

    def remove(self, text: str, span) -> str:
        return remove_item(text, *span, whole_line=False)


def remove_item(text: str, start: int, end: int, whole_line: bool) -> str:
    """`text` without the member or element [start, end) and the comma that joins it to its neighbour; a
    `whole_line` item starts at its line's indentation, which the next item takes over otherwise."""
    before, after = text[:start], text[end:]
    if before.rstrip().endswith(","):  # a neighbour before it: drop the comma that led here
        return before.rstrip()[:-1] + after
    following = after.lstrip()
    if following.startswith(","):  # the first item: the next one moves up into its place
        rest = following[1:]
        return before + (rest.lstrip("\n") if whole_line else rest.lstrip())
    return before.rstrip() + after.lstrip() if not whole_line else before.rstrip() + "\n" + after.lstrip()
