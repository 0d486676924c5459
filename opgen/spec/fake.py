"""An op's semantics printed as the body of a Python function: the fake (Meta) function, and the generated
tests' `expected` function (the same rules on real inputs, giving each output's shape and dtype).

Shared by the package target (`ops.py`, `tests/test_graph_entry.py`) and the op_plugin target (its Meta
function). Lines are indented for a function body (4 spaces); a wrapped line carries its own indentation.
"""

from __future__ import annotations

from ..schema.model import BaseType, ListType, strip_alias
from .model import OpSpec, OutputSpec
from .semantics import binding_statements
from .semantics_ir import PyContext

LINE_LENGTH = 120
_INDENT = "    "


def fake_and_expected(op: OpSpec) -> tuple[list[str], list[str]]:
    """The fake function's body from the semantics, and the test's `expected` body: the same rules on
    real inputs, each output's (shape, dtype) (None where a size is data-dependent and so unknown); a
    Tensor[] output gives a list of them, one per tensor."""
    return _Body(op, fake=True).lines(), _Body(op, fake=False).lines()


def device_expr(op: OpSpec) -> str:
    """Where fake outputs live: the device of the first tensor input."""
    for arg in op.schema.arguments:
        t = strip_alias(arg.type)
        if t == BaseType("Tensor"):
            return f"{arg.name}.device"
        if isinstance(t, ListType) and t.elem == BaseType("Tensor"):
            return f"{arg.name}[0].device"
    return "'cpu'"


class _Body:
    """One function body; `fake`: allocate the outputs (else: the expected (shape, dtype) of each)."""

    def __init__(self, op: OpSpec, fake: bool) -> None:
        self.op, self.fake = op, fake
        reserved = {a.name for a in op.schema.arguments} | {"torch"} | {b.name for b in op.bindings}
        self.variables = {out.name: out.name if out.name not in reserved else f"{out.name}_" for out in op.outputs}
        self.ctx = PyContext(names=self.variables, reserved=reserved)
        self.body: list[str] = []
        self.unknown: set[str] = set()  # outputs whose size the test cannot know in advance
        self.expected: list[str] = []

    def lines(self) -> list[str]:
        shown = [out for out in self.op.outputs if self._shown(out)]
        read = [rule for out in self.op.outputs for rule in (out.rules if out in shown else (out.dtype_rule,))]
        self.body += binding_statements(self.op.bindings, read, self.ctx)
        for out in self.op.outputs:
            if out not in shown:
                dtype = "None" if out.dtype_rule.uses_outputs & self.unknown else self._expr(out.dtype_rule)
                self.expected.append(f"(None, {dtype})")
            elif out.is_list:
                self._list_output(out)
            else:
                self._tensor_output(out)
        return [_fit("", line) if "\n" not in line else line for line in self.body + self._end()]

    def _shown(self, out: OutputSpec) -> bool:
        """The expected function leaves out the shape of an output whose size is data-dependent (called once per
        output, in order: an output whose shape reads an unknown one is unknown too)."""
        if self.fake:
            return True
        unknown = out.shape_rule.is_dynamic or bool(out.shape_rule.uses_outputs & self.unknown)
        if unknown:
            self.unknown.add(out.name)
        return not unknown

    def _expr(self, rule) -> str:
        statements, text = rule.python_with_statements(self.ctx)
        self.body.extend(statements)
        return text

    def _shape(self, out: OutputSpec) -> str:
        statements, text = out.shape_rule.python(self.ctx)
        self.body.extend(statements)
        return text

    def _allocation(self, out: OutputSpec, device: str) -> str:
        """`torch.empty(shape, dtype=..., device=...)`, or `torch.empty_like(x)` for `like: x`."""
        if out.like is not None and self.fake:  # (the expected function only reads shapes and dtypes)
            extra = [f"dtype={self._expr(out.dtype_rule)}"] if out.like_dtype else []
            return _call("torch.empty_like", [self._expr(out.like), *extra])
        shape = self._shape(out)
        return _call("torch.empty", [shape, f"dtype={self._expr(out.dtype_rule)}", f"device={device}"])

    def _tensor_output(self, out: OutputSpec) -> None:
        var = self.variables[out.name]
        device = device_expr(self.op) if self.fake else '"meta"'
        self.body.append(f"{var} = {self._allocation(out, device)}")
        self.expected.append(f"({var}.shape, {var}.dtype)")

    def _list_output(self, out: OutputSpec) -> None:
        """A Tensor[] return: one allocation per element, `out.element_index` running over `length`."""
        var, index = self.variables[out.name], out.element_index
        device = device_expr(self.op) if self.fake else '"meta"'
        item = self._allocation(out, device)
        loop = f"for {index} in range({self._expr(out.length_rule)})"
        self.body.append(f"{var} = [{item} {loop}]")
        element = "t" if "t" not in self.ctx.reserved else "t_"
        self.expected.append(f"[({element}.shape, {element}.dtype) for {element} in {var}]")

    def _end(self) -> list[str]:
        if not self.fake:
            return ["return [" + ", ".join(self.expected) + "]"]
        names = list(self.variables.values())
        if not names:
            return ["return None"]
        if len(names) == 1 and not self.op.schema.returns_tuple:
            return [f"return {names[0]}"]
        return ["return " + ", ".join(names) + ("," if len(names) == 1 else "")]


def _call(head: str, args: list[str]) -> str:
    return f"{head}({', '.join(args)})"


def _fit(prefix: str, call: str) -> str:
    """One statement of a function body, wrapped when too long (its later lines carry their own indentation)."""
    return "\n".join(wrap(prefix + call, len(_INDENT)))[len(_INDENT):]


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
            parts = _split_top_level(text, separators, keep=True)
            if len(parts) > 1:
                return [line for part in parts for line in wrap(part, indent, inside=True)]
    group = _first_group(text)
    if group is None:
        return [" " * indent + text]
    opening, closing = group
    content = text[opening + 1:closing]
    if len(_split_top_level(content, (" for ",))) > 1:  # a comprehension
        pieces = _split_top_level(content, (" for ",), keep=True)
    else:
        items = _split_top_level(content)
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


def _split_top_level(text: str, separators: tuple[str, ...] = (",",), keep: bool = False) -> list[str]:
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
