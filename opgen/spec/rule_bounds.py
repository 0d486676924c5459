"""What a checked rule may compute, as far as its constants say: a generated fake runs the rule on every call, and
the generated tests build tensors of the shapes it gives, so a rule that divides by zero, repeats a list a billion
times or asks for a size beyond the example limit is refused where the spec gives it, not found by a test that
eats the machine (`x.shape * 100000000` grew one to 6 GiB).

The rule is never run: only its constant parts are computed (`4096 * 4096`, a `let:` name bound to a constant),
within int64. Sizes read from the arguments are bounded by the examples' limits (tensor_limits.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .semantics_ir import INT, BinOp, Bound, Compare, Concat, Const, IfExp, ListLit, Name, Neg, Node, Repeat, SizeEdit
from .tensor_limits import MAX_DIMS, MAX_ELEMENTS

INT64 = (-(2**63), 2**63 - 1)
Fail = Callable[[str, int, str], Exception]  # (message, column offset, hint) -> the error to raise


def check_bounds(node: Node, fail: Fail, *, shape: bool) -> None:
    """Refuse (`fail`) a division or modulo by a constant zero, constant arithmetic past int64, a list of sizes
    repeated a negative number of times or more than MAX_DIMS, and in a shape rule (`shape`) a constant size that
    is negative or above MAX_ELEMENTS."""
    compared = {id(inner) for outer in _walk(node) if isinstance(outer, Compare) for inner in _walk(outer)}
    for part in _walk(node):
        if isinstance(part, BinOp):
            _check_binop(part, fail, shape and id(part) not in compared)
        elif isinstance(part, Repeat):
            count = constant(part.count, fail)
            if count is not None and not 0 <= count <= MAX_DIMS:
                raise fail(f"a list of sizes repeated {count:,} times: a shape has at most {MAX_DIMS} dims",
                           part.count.col, f"repeat a list at most {MAX_DIMS} times (`[1] * 4`)")
    if shape:
        elements = 1
        for part in _shape_parts(node):
            for size in _sizes(part):
                elements *= max(1, _check_size(size, fail) or 1)
        if elements > MAX_ELEMENTS:
            raise fail(f"the constant sizes of this shape make {elements:,} elements, above {MAX_ELEMENTS:,}, the most "
                       "of a tensor opgen's tests build", node.col, "use small sizes: the tests show a bug as well "
                       "as large ones")


def argument_limits(shape_rules: list[Node]) -> dict[str, tuple[int, int, str]]:
    """The arguments whose example values become a shape's sizes or a repetition count in `shape_rules`:
    name -> (lowest, highest, what it is), for the examples to be checked against (an int argument `n` in
    `[1] * n` given 10**12 by an example would build a list of 10**12 sizes)."""
    limits: dict[str, tuple[int, int, str]] = {}
    for node in shape_rules:
        for part in _walk(node):
            if isinstance(part, Repeat) and isinstance(part.count, Name) and not part.count.output:
                limits[part.count.name] = (0, MAX_DIMS, "how many times a shape rule repeats a list of sizes")
        for part in _shape_parts(node):
            if isinstance(part, Name) and part.ty.kind == "sizes" and not part.output:
                limits.setdefault(part.name, (0, MAX_ELEMENTS, "the sizes of an output's shape"))
            for size in _sizes(part):
                if isinstance(size, Name) and not size.output:
                    limits.setdefault(size.name, (0, MAX_ELEMENTS, "a size of an output's shape"))
    return limits


def _check_binop(part: BinOp, fail: Fail, shape: bool) -> None:
    if part.op in ("//", "%") and constant(part.right, fail) == 0:
        word = "division" if part.op == "//" else "modulo"
        raise fail(f"{word} by zero: `{part.op}` by a constant 0 fails on every call", part.right.col,
                   "divide by a size or a nonzero constant")
    value = constant(part, fail)
    if shape and value is not None and value > MAX_ELEMENTS:
        raise fail(f"the size {value:,} is above {MAX_ELEMENTS:,}, the most elements of a tensor opgen's tests "
                   "build", part.col, "a shape rule gives small sizes from the arguments' (`x.shape[0] * 2`)")
    if shape and part.op in ("*", "+"):
        for operand in (part.left, part.right):
            factor = constant(operand, fail)
            if factor is not None and factor > MAX_ELEMENTS:
                raise fail(f"`{part.op} {factor:,}` makes a size above {MAX_ELEMENTS:,}, the most elements of a "
                           "tensor opgen's tests build", operand.col,
                           "a shape rule gives small sizes from the arguments' (`x.shape[0] * 2`)")


def _shape_parts(node: Node) -> Iterator[Node]:
    """The parts of a shape rule that give its sizes (not an index, a dim list or a compared value)."""
    yield node
    if isinstance(node, Concat):
        for part in node.parts:
            yield from _shape_parts(part)
    elif isinstance(node, Repeat):
        yield from _shape_parts(node.seq)
    elif isinstance(node, IfExp):
        yield from _shape_parts(node.then)
        yield from _shape_parts(node.orelse)
    elif isinstance(node, SizeEdit):
        yield from _shape_parts(node.shape)


def _sizes(part: Node) -> Iterator[Node]:
    """The nodes `part` puts into a shape as sizes."""
    if isinstance(part, ListLit):
        yield from part.items
    elif isinstance(part, SizeEdit) and part.size is not None:
        yield part.size


def _check_size(size: Node, fail: Fail) -> int | None:
    """The constant a size always is (None: read from the arguments), refused when negative or too large."""
    value = constant(size, fail)
    if value is None:
        return None
    if value < 0:
        raise fail(f"a size cannot be negative ({value})", size.col, "sizes are >= 0")
    if value > MAX_ELEMENTS:
        raise fail(f"the size {value:,} is above {MAX_ELEMENTS:,}, the most elements of a tensor opgen's tests "
                   "build", size.col, "use a small size: the tests show a bug as well as a large one")
    return value


def constant(node: Node | None, fail: Fail) -> int | None:
    """The int `node` always is (a literal, `-`, `+ - * // %` of those, a `let:` name bound to one), or None."""
    if isinstance(node, Bound):
        return constant(node.value, None) if fail is not None else None
    if isinstance(node, Const):
        return node.value if node.ty == INT and isinstance(node.value, int) and not isinstance(node.value, bool) \
            else None
    if isinstance(node, Neg):
        value = constant(node.operand, fail)
        return None if value is None else _in_int64(-value, node, fail)
    if isinstance(node, BinOp):
        left, right = constant(node.left, fail), constant(node.right, fail)
        if left is None or right is None or (node.op in ("//", "%") and right == 0):
            return None
        value = {"+": left + right, "-": left - right, "*": left * right}.get(node.op) if node.op not in ("//", "%") \
            else (left // right if node.op == "//" else left % right)
        return _in_int64(value, node, fail)
    return None


def _in_int64(value: int, node: Node, fail: Fail | None) -> int | None:
    if INT64[0] <= value <= INT64[1]:
        return value
    if fail is None:
        return None
    raise fail(f"this constant arithmetic gives {value:,}, beyond int64", node.col, "sizes are 64-bit integers")


def _walk(node: Node) -> Iterator[Node]:
    """The nodes of one rule's own text (a `let:` name's rule is checked where it is given)."""
    yield node
    if isinstance(node, Bound):
        return
    for child in node.children():
        if child is not None:
            yield from _walk(child)
