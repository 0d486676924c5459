"""Reading the YAML node tree of a spec: every value is checked where it stands, and every error says
`file:line:col`, quotes the line and gives a hint. Shared by the spec loader and the op_plugin keys."""

from __future__ import annotations

import difflib
import keyword
import re

from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import OpgenError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# How deep lists and mappings may nest in a spec (a real one needs 6): a limit, so that a document nested
# thousands deep is refused at its line and column instead of exhausting Python's recursion.
MAX_YAML_DEPTH = 64
# How many values (numbers, strings, lists, mappings) a spec or an --inputs file may hold (the largest example spec:
# about 200): a limit, so that inline `values:` of a million numbers is refused in a second or two instead of
# taking minutes and gigabytes (PyYAML reads about 10,000 values a second).
MAX_YAML_NODES = 20_000


class SpecError(OpgenError):
    """A spec that opgen cannot generate from; always located in the spec file. An error inside a string
    value (a schema, a rule) also keeps the field, its own message and its 1-based offset in the value."""

    value_field: str | None = None
    value_message: str | None = None
    value_offset: int | None = None


class _Source:
    """The spec text and its name, for turning YAML marks into located errors."""

    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.path = path
        self.lines = text.splitlines()

    def error(self, node: Node | None, message: str, hint: str | None = None, *, column: int | None = None,
              line: int | None = None) -> SpecError:
        """An error at `node` (or at an explicit 0-based `line` / 1-based `column`)."""
        if node is not None:
            line = node.start_mark.line if line is None else line
            column = node.start_mark.column + 1 if column is None else column
        line = 0 if line is None else line
        source = self.lines[line] if 0 <= line < len(self.lines) else None
        if source is not None and not source.isprintable():
            source = None
        return SpecError(message, source=source, column=column, hint=hint, path=self.path, line=line + 1)

    def inner(self, node: ScalarNode, offset: int, error: OpgenError, field: str) -> SpecError:
        """`error` raised with a 1-based `offset` inside the string value of `node`, placed in the file."""
        line, column = _char_position(self, node, max(offset, 1))
        placed = self.error(None, f"{field}: {error.message}", error.hint, line=line, column=column)
        placed.value_field, placed.value_message, placed.value_offset = field, error.message, max(offset, 1)
        return placed


def _char_position(source: _Source, node: ScalarNode, offset: int) -> tuple[int, int]:
    """0-based line and 1-based column of the `offset`-th (1-based) character of a scalar's value."""
    mark = node.start_mark
    if node.style in (None, "", '"', "'") and node.end_mark.line == mark.line:
        raw = source.lines[mark.line][mark.column:] if mark.line < len(source.lines) else ""
        if node.style in ('"', "'"):
            index, produced = 1, 0
            while index < len(raw) and produced < offset - 1:
                step = 1
                if node.style == '"' and raw[index] == "\\" and index + 1 < len(raw):
                    step = 2 + {"x": 2, "u": 4, "U": 8}.get(raw[index + 1], 0)
                elif node.style == "'" and raw[index] == "'" and raw[index + 1:index + 2] == "'":
                    step = 2
                index += step
                produced += 1
            return mark.line, mark.column + 1 + index
        return mark.line, mark.column + offset
    if node.style in ("|", ">"):
        return mark.line + 1, 1
    return mark.line, mark.column + 1


def compose(source: _Source, what: str = "YAML") -> Node | None:
    """The YAML node tree of the source text (None when empty); a syntax error is placed in the file."""
    import yaml

    try:
        return yaml.compose(source.text, Loader=bounded_loader())
    except TooMany as error:
        mark = error.problem_mark
        raise source.error(None, f"{what} too large: {error.problem}", "opgen reads specs and inputs of up to "
                           f"{MAX_YAML_NODES:,} values: give a large example tensor as `shape: [...]` (random values) "
                           "rather than inline `values:`, and exact values in small tensors",
                           line=mark.line, column=mark.column + 1) from None
    except TooDeep as error:
        mark = error.problem_mark
        raise source.error(None, f"invalid {what}: {error.problem}", "a spec needs a few levels of lists and "
                           "mappings; this one is far deeper", line=mark.line, column=mark.column + 1) from None
    except yaml.reader.ReaderError as error:  # an unprintable character (NUL, ...): PyYAML gives its offset only
        text, position = source.text, error.position
        line = text.count("\n", 0, position)
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        character = f"U+{error.character:04X}" if isinstance(error.character, int) else repr(error.character)
        raise source.error(None, f"invalid {what}: the character {character} at offset {position} is not allowed in "
                           "YAML", "remove it (a NUL byte often means a binary file or a bad copy)", line=line,
                           column=column) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "malformed YAML"
        raise source.error(None, f"invalid {what}: {problem}", "check indentation and quoting; quote strings "
                           "that contain ': ' or start with '{', '[' or '*'", line=mark.line if mark else 0,
                           column=mark.column + 1 if mark else 1) from None
    except yaml.YAMLError as error:
        raise source.error(None, f"invalid {what}: {error}") from None


class TooMany(Exception):
    """A YAML document with more than MAX_YAML_NODES values; `problem_mark` is where the one too many starts."""

    def __init__(self, problem: str, problem_mark) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = problem_mark


class TooDeep(Exception):
    """A YAML document nested past MAX_YAML_DEPTH; `problem_mark` is where (PyYAML's or ruamel's mark)."""

    def __init__(self, problem: str, problem_mark) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = problem_mark


def bounded_composer(base: type) -> type:
    """`base` (PyYAML's SafeLoader, or ruamel.yaml's Composer or Scanner) refusing to nest past MAX_YAML_DEPTH,
    with the mark of the collection that goes too deep. The scanner stops at the first bracket too many (its work
    per token grows with the depth: a file of 100000 `[` would take minutes), the composer at the first block
    collection too many (it recurses)."""

    class Bounded(base):
        _depth = 0

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_YAML_DEPTH:
                    peek = getattr(self, "peek_event", None) or self.parser.peek_event  # PyYAML's, ruamel's
                    raise TooDeep(_TOO_DEEP, peek().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def fetch_flow_collection_start(self, *args, **kwargs):
            if self.flow_level >= MAX_YAML_DEPTH:
                get_mark = getattr(self, "get_mark", None) or self.reader.get_mark
                raise TooDeep(_TOO_DEEP, get_mark())
            return super().fetch_flow_collection_start(*args, **kwargs)

    for method in ("compose_node", "fetch_flow_collection_start"):
        if not hasattr(base, method):
            delattr(Bounded, method)
    Bounded.__name__ = Bounded.__qualname__ = f"Bounded{base.__name__}"
    return Bounded


_TOO_DEEP = f"lists and mappings nested more than {MAX_YAML_DEPTH} deep"
_TOO_MANY = f"more than {MAX_YAML_NODES:,} values (numbers, strings, lists and mappings)"


_BOUNDED_LOADER = None


def bounded_loader() -> type:
    """PyYAML's SafeLoader with the depth limit and the limit on values (MAX_YAML_NODES)."""
    global _BOUNDED_LOADER
    if _BOUNDED_LOADER is None:
        import yaml

        class Counted(bounded_composer(yaml.SafeLoader)):
            _nodes = 0

            def compose_node(self, parent, index):
                self._nodes += 1
                if self._nodes > MAX_YAML_NODES:
                    raise TooMany(_TOO_MANY, self.peek_event().start_mark)
                return super().compose_node(parent, index)

        _BOUNDED_LOADER = Counted
    return _BOUNDED_LOADER


def _mapping(source: _Source, node: Node, what: str, allowed: tuple[str, ...],
             required: tuple[str, ...] = ()) -> dict[str, tuple[ScalarNode, Node]]:
    if not isinstance(node, MappingNode):
        raise source.error(node, f"{what} must be a mapping (`key: value` lines), not {_kind(node)}",
                           f"allowed keys: {', '.join(allowed)}")
    found: dict[str, tuple[ScalarNode, Node]] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or not isinstance(key_node.value, str):
            raise source.error(key_node, f"keys of {what} must be plain words")
        key = key_node.value
        if key in found:
            raise source.error(key_node, f"duplicate key {key!r} in {what}",
                               f"the first {key!r} is on line {found[key][0].start_mark.line + 1}; keep one")
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
            raise source.error(key_node, f"unknown key {key!r} in {what}", hint)
        found[key] = (key_node, value_node)
    for key in required:
        if key not in found:
            raise source.error(node, f"{what} has no {key!r}", f"add `{key}:` (see docs/spec.md)")
    return found


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    value = _scalar(node)
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _scalar(node: Node):
    """The Python value of a scalar node (YAML 1.1 rules, as `yaml.safe_load` reads it)."""
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except (ConstructorError, ValueError):  # ValueError: an int past Python's 4300 digits, left as its text
        return node.value


def _data(source: _Source, node: Node, what: str):
    """The Python value of any node (lists and mappings built as `yaml.safe_load` would); a tag SafeLoader does
    not know (`!!python/object`) is an error at the node."""
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except ConstructorError as error:
        raise source.error(node, f"{what}: {error.problem}",
                           "write plain YAML values (numbers, strings, lists, mappings)") from None
    except ValueError:  # an int past Python's 4300 digits
        raise source.error(node, f"{what}: a number too long to be one (over 4300 digits)",
                           "write numbers that fit the op's dtype") from None


def _string(source: _Source, node: Node, what: str, *, allow_empty: bool = False) -> str:
    value = _scalar(node) if isinstance(node, ScalarNode) else None
    if not isinstance(node, ScalarNode) or not isinstance(value, str):
        raise source.error(node, f"{what} must be a string, not {_kind(node)}", "quote it: \"...\"")
    if not allow_empty and not value.strip():
        raise source.error(node, f"{what} is empty")
    return value


def _identifier(source: _Source, node: Node, what: str) -> str:
    value = _string(source, node, what)
    if not _IDENTIFIER.match(value) or keyword.iskeyword(value):
        raise source.error(node, f"{what} {value!r} is not a valid identifier",
                           "use letters, digits and '_', not starting with a digit (e.g. my_ops)")
    return value


def _choice(source: _Source, node: Node, what: str, choices: tuple[str, ...]) -> str:
    value = _string(source, node, what)
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
        hint = (f"did you mean {close[0]!r}? " if close else "") + f"choose one of: {', '.join(choices)}"
        raise source.error(node, f"unknown {what} {value!r}", hint)
    return value


# --- one operator ---------------------------------------------------------------------------------


