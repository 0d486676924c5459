"""The text of one file before and around its syntax tree: the prefilter that skips files which cannot hold
a registration, the lines a statement walk looks at, `# noqa` comments, and positions (`Where`, exact
literals) as a user's editor counts them."""

from __future__ import annotations

import ast
import bisect
import re

from ..records import FileRecord, Literal, Where

# Files that contain none of these cannot hold a registration (checked on bytes, before decoding;
# `find` on bytes is several times faster than one regex alternation).
# (`direct_register_custom_op` contains `custom_op`: one pass over each file fewer)
PREFILTER_LITERALS = (b"custom_op", b"torch.library", b"register_fake", b"register_kernel", b"impl_abstract",
                      b"Library(", b"has_side_effect", b".impl(", b".define(")
# Most files hold none of them, and each literal costs one pass over such a file: the literals that share a
# substring are looked for only in files that hold it (`ibrary`: a fifth of a corpus' bytes; `register_`: a third).
_IN_IBRARY = (b"torch.library", b"Library(")
_IN_REGISTER = (b"register_fake", b"register_kernel")
# `.impl(` and `.define(` in one regex pass: its leading `.` (1.4% of a corpus' bytes) lets the engine skip to
# the few places worth trying, where the two `find`s it replaces cost a pass each (0.44 -> 0.33 s on the corpus)
_METHOD_CALL = re.compile(rb"\.impl\(|\.define\(")
_ALONE = tuple(literal for literal in PREFILTER_LITERALS
               if literal not in _IN_IBRARY + _IN_REGISTER + (b".impl(", b".define("))
LIBRARY_IMPORT = re.compile(rb"library\s+import|import\s+library")
# ... and, of those, the ones that call (or alias) one: mentions in comments and docs are common.
CALL_SITE = re.compile(
    rb"\b(?:custom_op|triton_op|register_fake|register_kernel|impl_abstract|Library|_scoped_library"
    rb"|direct_register_custom_op|has_side_effect|define|impl|fallback|register_autograd)\s*\("
    rb"|\.register_(?:fake|kernel|autograd)\b"
    rb"|library\s+import[^\n]*\bas\b"
    rb"|(?m:=[ \t]*torch\.(?:_library|library)\.[\w.]+[ \t]*(?:#[^\n]*)?$)"  # an alias of an API
    rb"|getattr\(\s*torch\.(?:_library|library)\b"
)
# Bare names that are registration APIs only when imported from torch.library (or the older torch._custom_ops)
BARE_NEEDS_IMPORT = re.compile(rb"(?:custom_op|triton_op|register_fake|register_kernel|impl_abstract|Library"
                               rb"|_scoped_library|define|impl|fallback|register_autograd)\s*\(")
LEGACY_IMPORT = re.compile(rb"custom_ops?(?:\.impl)?\s+import")
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
FILE_NOQA = re.compile(r"^\s*#\s*opgen:\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?\s*$",
                       re.IGNORECASE | re.MULTILINE)
# A statement is only walked when one of its lines matches this.
INTERESTING_WORDS = ("Library(", "_scoped_library", "define(", "impl(", "register_fake", "register_kernel",
                     "impl_abstract", "custom_op", "triton_op", "has_side_effect", "fallback(", "register_autograd")


def source_lines(text: str) -> list[str]:
    """Lines as Python's tokenizer counts them (`str.splitlines` also splits at form feeds and
    other characters that are not line ends in source code, which would shift every line after)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def may_register(data: bytes) -> bool:
    """`data`: bytes, or a memory map of a file too large to read (`find`, as `in` on an mmap compares single
    bytes)."""
    ibrary = data.find(b"ibrary") != -1
    if ibrary and any(data.find(literal) != -1 for literal in _IN_IBRARY):
        return True
    if data.find(b"register_") != -1 and any(data.find(literal) != -1 for literal in _IN_REGISTER):
        return True
    for literal in _ALONE:
        if data.find(literal) != -1:
            return True
    if _METHOD_CALL.search(data) is not None:
        return True
    return ibrary and data.find(b"library") != -1 and LIBRARY_IMPORT.search(data) is not None


def has_call_site(data: bytes) -> bool:
    """Whether a file that passes `may_register` calls (or aliases) a registration API at all: a match in code,
    not one that the text before it on its line puts in a comment, a string (an odd number of quotes: an error
    message naming `register_fake(...)`), a doctest (`>>>`), reST (` `` `) or a `def` of that name. Parsing
    is most of lint's time; most files that only mention an API (torch's own) are never parsed."""
    imports_api = None
    for match in _call_sites(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        before = data[start:match.start()]
        if not _in_code(before):
            continue
        if before.endswith(b".") or not BARE_NEEDS_IMPORT.match(match.group(0)):
            return True
        # a bare `impl(`, `define(`, `register_fake(`: torch.library's only when imported from it (a local
        # `fallback()`, the `register_fake` of torch._higher_order_ops are not)
        if imports_api is None:
            imports_api = LIBRARY_IMPORT.search(data) is not None or LEGACY_IMPORT.search(data) is not None
        if imports_api:
            return True
    return False


# Where a CALL_SITE match can start, relative to a literal it holds: the regex engine tries every byte of a file
# (no literal leads the pattern); `find` skips through to these few places.
_CALL_SITE_ANCHORS = ((b"custom_op", (0, -len(b"direct_register_"))), (b"triton_op", (0,)),
                      (b"register_", (0, -1, -len(b"direct_"))), (b"impl", (0,)), (b"Library", (0,)),
                      (b"has_side_effect", (0,)), (b"define", (0,)), (b"fallback", (0,)),
                      (b"library", (0, -len(b"_scoped_"))))
_SPACE = b" \t\n\r\f\v"  # what `\s` matches in a bytes pattern


def _call_sites(data: bytes):
    """CALL_SITE's matches in `data`, exactly those of `CALL_SITE.finditer(data)`: the regex is tried only where
    one of its alternatives can start (the `=` of an alias, `getattr(` found from the `library` after them)."""
    starts = set()
    for literal, offsets in _CALL_SITE_ANCHORS:
        found = data.find(literal)
        while found != -1:
            starts.update(found + offset for offset in offsets if found + offset >= 0)
            if literal == b"library":
                _alias_starts(data, found, starts)
            found = data.find(literal, found + 1)
    end = 0
    for start in sorted(starts):
        if start >= end:
            match = CALL_SITE.match(data, start)
            if match is not None:
                end = match.end()
                yield match


def _alias_starts(data: bytes, found: int, starts: set[int]) -> None:
    """Before a `torch.library` / `torch._library` at `found` (its `library`): the `=` of `= torch.library.x`
    (spaces and tabs between) and the `getattr(` of `getattr( torch.library` (any white space between)."""
    if data[max(found - 6, 0):found] == b"torch.":
        torch = found - 6
    elif data[max(found - 7, 0):found] == b"torch._":
        torch = found - 7
    else:
        return
    before = torch - 1
    while before >= 0 and data[before] in b" \t":
        before -= 1
    if before >= 0 and data[before] == ord("="):
        starts.add(before)
    while before >= 0 and data[before] in _SPACE:
        before -= 1
    if before >= 7 and data[before - 7:before + 1] == b"getattr(":
        starts.add(before - 7)


def _in_code(before: bytes) -> bool:
    """Whether a match preceded on its line by `before` is code."""
    if b"#" in before or b">>>" in before or b"``" in before:
        return False
    if (before.count(b'"') - before.count(b'\\"')) % 2 or (before.count(b"'") - before.count(b"\\'")) % 2:
        return False
    stripped = before.lstrip()
    return not (stripped.startswith((b"def ", b"async def ", b"class ")) and not stripped.rstrip().endswith(b"="))


def read_noqa(record: FileRecord, text: str) -> None:
    if "noqa" not in text and "NOQA" not in text:
        return
    for match in FILE_NOQA.finditer(text):
        codes = match.group("codes")
        new = frozenset(re.split(r"[\s,]+", codes.upper().strip())) if codes else frozenset()
        if record.file_noqa is None:
            record.file_noqa = new
        elif record.file_noqa and new:
            record.file_noqa |= new
        else:
            record.file_noqa = frozenset()
    for number, line in enumerate(source_lines(text), 1):
        if "#" not in line:
            continue
        match = NOQA.search(line)
        if match and not FILE_NOQA.match(line):
            codes = match.group("codes")
            record.noqa[number] = frozenset(re.split(r"[\s,]+", codes.upper().strip())) if codes else frozenset()


def interesting_lines(text: str, local_names) -> list[int]:
    """The lines that mention a registration API (or one of `local_names`: aliases of one, wrappers), sorted.
    Only statements covering one are walked: walking every node of a big module costs more than parsing it.
    Found with `str.find` per word (a regex alternation tries each word at each character: ten times slower)."""
    offsets = []
    for word in INTERESTING_WORDS:
        found = text.find(word)
        while found != -1:
            offsets.append(found)
            found = text.find(word, found + 1)
    for name in local_names:  # whole words only
        found = text.find(name)
        while found != -1:
            end = found + len(name)
            if (found == 0 or not _word_char(text[found - 1])) and (end == len(text) or not _word_char(text[end])):
                offsets.append(found)
            found = text.find(name, found + 1)
    if not offsets:
        return []
    newlines = []
    found = text.find("\n")
    while found != -1:
        newlines.append(found)
        found = text.find("\n", found + 1)
    return sorted({bisect.bisect_left(newlines, offset) + 1 for offset in offsets})


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def covers(interesting: list[int], first: int, last: int) -> bool:
    """Whether one of the sorted `interesting` lines is in first..last."""
    index = bisect.bisect_left(interesting, first)
    return index < len(interesting) and interesting[index] <= last


class Source:
    """A file's path and lines, for positions: ast gives UTF-8 byte offsets, users count characters."""

    __slots__ = ("lines", "path", "text")

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = source_lines(text)

    def where(self, node: ast.AST) -> Where:
        return Where(self.path, node.lineno, self.column(node.lineno, node.col_offset) + 1)

    def column(self, line: int, byte_offset: int) -> int:
        """The 0-based character column of a byte offset on a line."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_offset
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))

    def literal(self, node: ast.AST) -> Literal | None:
        """The literal when its characters map 1:1 onto the line (so columns and edits are exact)."""
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node.end_lineno != node.lineno:
            return None
        line = self.lines[node.lineno - 1]
        start = self.column(node.lineno, node.col_offset)
        end = self.column(node.lineno, node.end_col_offset)
        source = line[start:end]
        prefix = 0
        while prefix < len(source) and source[prefix] in "rRuU":
            prefix += 1
        body = source[prefix:]
        for quote in ('"""', "'''", '"', "'"):
            if body.startswith(quote) and body.endswith(quote) and len(body) >= 2 * len(quote):
                inner = body[len(quote):-len(quote)]
                if inner == node.value:
                    return Literal(node.lineno, start + prefix + len(quote), inner)
                return None
        return None
