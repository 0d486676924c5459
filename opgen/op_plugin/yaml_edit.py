"""Entries of a top-level list of op-plugin's YAML (`custom:` of op_plugin_functions.yaml, `backward:` of
derivatives.yaml) found in PyYAML's node tree (line numbers known; libyaml's composer reads the 7771 lines in
50 ms) and edited as text, so comments and everything else stay as they are: an entry is its lines from `- func:` to its last indented line; the file's own indentation and its
separation of entries (a blank line between them in op-plugin, none in some files) are kept."""

from __future__ import annotations

import functools
import itertools

import yaml

from .pieces import EditError, Piece, line_offsets, remove_lines

SCHEMA_KEYS = {"custom": "func", "backward": "name"}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _section(text: str, section: str):
    """(the `section:` key node, its value node) of the top-level mapping."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as error:
        raise EditError(f"cannot read it as YAML: {error}") from None
    for key, value in root.value if isinstance(root, yaml.MappingNode) else ():
        if getattr(key, "value", None) == section:
            return key, value
    raise EditError(f"no top-level `{section}:`")


@functools.lru_cache(maxsize=8)
def _entries(text: str, section: str) -> tuple[tuple[str, int, int], ...]:
    _, seq = _section(text, section)
    items = seq.value if isinstance(seq, yaml.SequenceNode) else []
    lines = text.split("\n")
    key = SCHEMA_KEYS[section]
    found = []
    for item in items:
        first = item.start_mark.line
        last, dash = first, _indent(lines[first].replace("- ", "  ", 1)) - 2
        for number in range(first + 1, len(lines)):
            stripped = lines[number].strip()
            if not stripped or stripped.startswith("#"):
                continue
            if _indent(lines[number]) <= dash:
                break
            last = number
        value = next((v.value for k, v in item.value if k.value == key), None) if isinstance(
            item, yaml.MappingNode) else None
        found.append((value.split("(", 1)[0].strip() if isinstance(value, str) else "", first, last))
    return tuple(found)


class SectionEditor:
    """One entry of the list `piece.section`, named by its schema's `name.overload`."""

    def entries(self, text: str, section: str) -> list[tuple[str, int, int]]:
        """(name, first line, last line) of each entry, 0-based lines."""
        return list(_entries(text, section))

    def blank_separated(self, text: str, section: str) -> bool:
        """Does the list put a blank line between entries (op-plugin: every one of them)?"""
        entries = self.entries(text, section)
        lines = text.split("\n")
        gaps = [any(not lines[n].strip() for n in range(a[2] + 1, b[1])) for a, b in itertools.pairwise(entries)]
        return sum(gaps) * 2 >= len(gaps) if gaps else True

    def dash_column(self, text: str, section: str) -> int:
        entries = self.entries(text, section)
        return _indent(text.split("\n")[entries[0][1]]) if entries else 2

    def find(self, text: str, piece: Piece):
        offsets = line_offsets(text)
        for name, first, last in self.entries(text, piece.section):
            if name == piece.key:
                end = offsets[last + 1] - 1 if last + 1 < len(offsets) else len(text)
                return offsets[first], end
        return None

    def fit(self, text: str, piece: Piece) -> str:
        """The piece's lines (written with the dash at column 2) at the file's own indentation."""
        shift = self.dash_column(text, piece.section) - 2
        lines = piece.text.split("\n")
        if shift >= 0:
            return "\n".join(" " * shift + line for line in lines)
        return "\n".join(line[-shift:] if line.startswith(" " * -shift) else line.lstrip(" ") for line in lines)

    def insert(self, text: str, piece: Piece) -> str:
        entries = self.entries(text, piece.section)
        lines = text.split("\n")
        ours = self.fit(text, piece)
        if entries:
            last = entries[-1][2]
            gap = "\n" if self.blank_separated(text, piece.section) else ""
            result = "\n".join(lines[:last + 1]) + "\n" + gap + ours + "\n" + "\n".join(lines[last + 1:])
        else:
            header = _section(text, piece.section)[0].start_mark.line
            head = lines[header].split("#", 1)[0].rstrip()
            if head.endswith("[]"):
                lines[header] = lines[header].replace("[]", "", 1).rstrip()
            result = "\n".join(lines[:header + 1]) + "\n" + ours + "\n" + "\n".join(lines[header + 1:])
        self._check(text, result, piece, +1)
        return result

    def remove(self, text: str, span) -> str:
        return remove_lines(text, *span)

    def _check(self, before: str, after: str, piece: Piece, change: int) -> None:
        """The list read back holds exactly the old entries and the new one (belt and braces before a write)."""
        key = SCHEMA_KEYS[piece.section]
        old = [str(item.get(key)) for item in (yaml.load(before, Loader=_LOADER) or {}).get(piece.section) or []]
        new = [str(item.get(key)) for item in (yaml.load(after, Loader=_LOADER) or {}).get(piece.section) or []]
        if len(new) != len(old) + change or new[:len(old)] != old:
            raise EditError(f"inserting {piece.key} would not give the expected `{piece.section}` list")
