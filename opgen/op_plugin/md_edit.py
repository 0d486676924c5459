"""Lines of op-plugin's API docs found and placed by name: a page's line in docs/zh/custom_APIs/menu_Pytorch_API.md
(`-   [torch_npu.npu_x](./torch_npu/torch_npu-npu_x.md)`) and its row in torch_npu/torch_npu_list.md (an HTML
`<tr>` linking `torch_npu-npu_x.md`), each placed in the alphabetical run of the non-beta `torch_npu.*` entries."""

from __future__ import annotations

import re

from .pieces import EditError, Piece

_MENU = re.compile(r"^(?P<indent>[ \t]*)-[ \t]+\[torch_npu\.(?P<name>[\w.]+)\]\(\./torch_npu/torch_npu-(?P=name)\.md\)"
                   r"[ \t]*$", re.MULTILINE)
_ROW = re.compile(r"<tr\b[^>]*>.*?</tr>", re.DOTALL)
_HREF = re.compile(r'href="torch_npu-([\w.]+)\.md"')


def _position(names: list[str], key: str) -> int | None:
    """Where `key` goes among `names` (file order): before the first name greater than it that follows a smaller
    one (the alphabetical run); None: after the last."""
    for index, name in enumerate(names):
        if name > key and index and names[index - 1] < key:
            return index
    return None


class MenuEditor:
    def _lines(self, text: str):
        return list(_MENU.finditer(text))

    def find(self, text: str, piece: Piece):
        for match in self._lines(text):
            if match.group("name") == piece.key:
                return match.start(), match.end()
        return None

    def insert(self, text: str, piece: Piece) -> str:
        lines = self._lines(text)
        if not lines:
            raise EditError("no `-   [torch_npu.npu_x](./torch_npu/torch_npu-npu_x.md)` entries to join")
        index = _position([m.group("name") for m in lines], piece.key)
        anchor = lines[index if index is not None else -1]
        line = anchor.group("indent") + piece.text.lstrip()
        if index is None:
            return text[:anchor.end()] + "\n" + line + text[anchor.end():]
        return text[:anchor.start()] + line + "\n" + text[anchor.start():]

    def remove(self, text: str, span) -> str:
        start, end = span
        return text[:start] + text[end + 1:] if text[end:end + 1] == "\n" else text[:start].rstrip("\n") + text[end:]


class RowEditor:
    def _rows(self, text: str):
        rows = []
        for match in _ROW.finditer(text):
            href = _HREF.search(match.group(0))
            if href and "beta" not in match.group(0)[:href.start()]:
                rows.append((href.group(1), match))
        return rows

    def find(self, text: str, piece: Piece):
        for name, match in self._rows(text):
            if name == piece.key:
                return match.start(), match.end()
        return None

    def insert(self, text: str, piece: Piece) -> str:
        rows = self._rows(text)
        if not rows:
            raise EditError("no <tr> rows linking torch_npu-npu_x.md pages to join")
        index = _position([name for name, _ in rows], piece.key)
        if index is None:
            end = rows[-1][1].end()
            return text[:end] + "\n" + piece.text + text[end:]
        start = rows[index][1].start()
        return text[:start] + piece.text + "\n" + text[start:]

    def remove(self, text: str, span) -> str:
        start, end = span
        if text[end:end + 1] == "\n":
            end += 1
        return text[:start] + text[end:]
