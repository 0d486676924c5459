"""Checked expressions of the semantics language, and how each prints to Python and to C++.

Nodes are built only by `opgen.spec.semantics` after type checking, so printing never fails
on a type mistake; it only refuses what one target language cannot say (`dynamic` in C++).
Each printer returns `(text, precedence)` so that parentheses appear only where needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# One table for the dtype fact: spelling in a spec -> (torch attribute, ATen constant). Every dtype torch 2.13
# has (float8, packed low-bit and quantized ones included); aliases as torch spells them (`torch.half`).
_ATEN_NAMES = {
    "float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "float64": "Double",
    "float8_e4m3fn": "Float8_e4m3fn", "float8_e5m2": "Float8_e5m2", "float8_e4m3fnuz": "Float8_e4m3fnuz",
    "float8_e5m2fnuz": "Float8_e5m2fnuz", "float8_e8m0fnu": "Float8_e8m0fnu", "float4_e2m1fn_x2": "Float4_e2m1fn_x2",
    "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
    "uint8": "Byte", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
    "bool": "Bool", "complex32": "ComplexHalf", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
    "qint8": "QInt8", "quint8": "QUInt8", "qint32": "QInt32", "quint4x2": "QUInt4x2", "quint2x4": "QUInt2x4",
    "bits1x8": "Bits1x8", "bits2x4": "Bits2x4", "bits4x2": "Bits4x2", "bits8": "Bits8", "bits16": "Bits16",
    **{f"uint{n}": f"UInt{n}" for n in range(1, 8)}, **{f"int{n}": f"Int{n}" for n in range(1, 8)},
}
DTYPES: dict[str, tuple[str, str]] = {name: (name, f"at::k{aten}") for name, aten in _ATEN_NAMES.items()}
DTYPE_ALIASES: dict[str, str] = {
    "float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
    "short": "int16", "cfloat": "complex64", "cdouble": "complex128", "chalf": "complex32", "bit": "uint1",
}

# Binding strength, higher binds tighter (Python reference §6.17, C++ [expr] grammar).
PY_COND, PY_OR, PY_AND, PY_NOT, PY_CMP, PY_ADD, PY_MUL, PY_UNARY, PY_POSTFIX, PY_ATOM = 1, 2, 3, 4, 5, 9, 10, 11, 14, 15
CPP_COND, CPP_OR, CPP_AND, CPP_EQ, CPP_REL, CPP_ADD, CPP_MUL, CPP_UNARY, CPP_POSTFIX, CPP_ATOM = (
    1, 2, 3, 5, 6, 8, 9, 10, 11, 12)
SIZE_VECTOR = "c10::SmallVector<int64_t, 8>"


class NotInCpp(Exception):
    """A construct C++ printing cannot express; carries the node for the error column."""

    def __init__(self, node: Node, message: str, hint: str) -> None:
        super().__init__(message)
        self.node, self.message, self.hint = node, message, hint


@dataclass(frozen=True)
class Ty:
    """A value's type: int, bool, float, str, dtype, tensor, sizes (int list), tensors, none."""

    kind: str
    optional: bool = False
    elem_optional: bool = False  # Tensor?[]: each element may be None

    def required(self) -> Ty:
        return Ty(self.kind, False, self.elem_optional)

    def describe(self) -> str:
        text = {
            "int": "an int", "bool": "a bool", "float": "a float", "str": "a string", "dtype": "a dtype",
            "tensor": "a tensor", "sizes": "a list of sizes", "tensors": "a tensor list", "none": "None",
        }[self.kind]
        return "an optional " + text.split(" ", 1)[1] if self.optional else text


INT, BOOL, FLOAT, STR, DTYPE, TENSOR, SIZES, NONE = (
    Ty("int"), Ty("bool"), Ty("float"), Ty("str"), Ty("dtype"), Ty("tensor"), Ty("sizes"), Ty("none"))


class PyContext:
    """Shared state while printing the rules of one fake function.

    `names` renames arguments (argument -> parameter name in the generated function);
    fresh variables for `dynamic` sizes (`_n0`, `_n1`, …) never collide with `reserved` names.
    """

    def __init__(self, names: dict[str, str] | None = None, reserved: frozenset[str] | set[str] = frozenset()):
        self.names = dict(names or {})
        self.reserved = set(reserved) | set(self.names.values())
        self._next = 0
        self._table: str | None = None

    def name(self, argument: str) -> str:
        return self.names.get(argument, argument)

    def table(self, table: tuple[tuple[int, str], ...], printer: _Py) -> str:
        """The variable holding the spec's `dtype_codes`, assigned (by `printer`) the first time a rule reads it."""
        if self._table is None:
            self._table = "dtype_codes"
            while self._table in self.reserved:
                self._table += "_"
            self.reserved.add(self._table)
            items = [f"{number}: torch.{DTYPES[name][0]}" for number, name in table]
            line = f"{self._table} = {{{', '.join(items)}}}"
            if len(line) + 4 > 120:  # one entry per line; a statement's later lines carry their own indentation
                line = f"{self._table} = {{\n" + "".join(f"        {item},\n" for item in items) + "    }"
            printer.statements.append(line)
        return self._table

    def fresh(self) -> str:
        while True:
            candidate = f"_n{self._next}"
            self._next += 1
            if candidate not in self.reserved:
                self.reserved.add(candidate)
                return candidate


class _Py:
    def __init__(self, ctx: PyContext) -> None:
        self.ctx = ctx
        self.statements: list[str] = []

    def at(self, node: Node, minimum: int) -> str:
        text, prec = node.py(self)
        return f"({text})" if prec < minimum else text

    def local(self, base: str) -> str:
        """A comprehension variable that no argument (or renamed parameter) shadows."""
        name = base
        while name in self.ctx.reserved:
            name += "_"
        return name


class _Cpp:
    def __init__(self, reserved: frozenset[str]) -> None:
        self.reserved = set(reserved)

    def at(self, node: Node, minimum: int) -> str:
        text, prec = node.cpp(self)
        return f"({text})" if prec < minimum else text

    def local(self, base: str) -> str:
        """A local name for generated lambdas that no argument shadows."""
        name = base
        while name in self.reserved:
            name += "_"
        return name


@dataclass(frozen=True)
class Node:
    ty: Ty
    col: int = field(compare=False)  # 0-based character offset of the construct in the expression

    def children(self) -> tuple[Node, ...]:
        return ()

    def walk(self):
        yield self
        for child in self.children():
            if child is not None:
                yield from child.walk()

    def py(self, p: _Py) -> tuple[str, int]:
        raise NotImplementedError

    def cpp(self, c: _Cpp) -> tuple[str, int]:
        raise NotImplementedError

    # How a C++ sizes expression is held: "ref" (IntArrayRef view), "vec" (SmallVector), "std" (std::vector).
    def cpp_kind(self) -> str:
        return "ref"

    # Whether the Python value is certainly a list (not a torch.Size tuple): matters for `==`.
    def py_is_list(self) -> bool:
        return False

    # Whether an int (or every int of a size list) is known to be >= 0: then C++'s `/`, `%`, `[i]` and
    # slice bounds mean what Python's do, and the C++ can say it plainly.
    def nonneg(self) -> bool:
        return False


def _member(c: _Cpp, obj: Node, member: str) -> str:
    if getattr(obj, "deref", False):  # a present c10::optional
        return f"{obj.cpp_optional(c)}->{member}"
    return f"{c.at(obj, CPP_POSTFIX)}.{member}"


def _cpp_len(c: _Cpp, seq: Node) -> str:
    if isinstance(seq, TensorAttr) and seq.attr == "shape":
        return _member(c, seq.obj, "dim()")
    return f"static_cast<int64_t>({_member(c, seq, 'size()')})"


@dataclass(frozen=True)
class Name(Node):
    name: str = ""
    deref: bool = False  # an optional argument known to be present here
    output: bool = False  # an earlier output of the op, not an argument

    def py(self, p):
        return p.ctx.name(self.name), PY_ATOM

    def cpp(self, c):
        if self.deref:
            return f"{self.name}.value()", CPP_POSTFIX
        return self.name, CPP_ATOM

    def cpp_optional(self, c):
        return self.name

    def py_is_list(self):
        return self.ty.kind == "sizes"


@dataclass(frozen=True)
class Const(Node):
    value: object = None

    def py(self, p):
        if isinstance(self.value, str):
            return json.dumps(self.value, ensure_ascii=False), PY_ATOM  # double quotes, as ruff formats them
        if isinstance(self.value, (int, float)) and not isinstance(self.value, bool) and self.value < 0:
            return repr(self.value), PY_UNARY
        return repr(self.value), PY_ATOM

    def cpp(self, c):
        if self.value is None:
            return "c10::nullopt", CPP_ATOM
        if isinstance(self.value, bool):
            return ("true" if self.value else "false"), CPP_ATOM
        if isinstance(self.value, str):
            return json.dumps(self.value, ensure_ascii=False), CPP_ATOM  # JSON escapes are valid C++ escapes
        return str(self.value), (CPP_UNARY if self.value < 0 else CPP_ATOM)

    def nonneg(self):
        return isinstance(self.value, int) and not isinstance(self.value, bool) and self.value >= 0


@dataclass(frozen=True)
class DtypeName(Node):
    name: str = ""  # canonical key of DTYPES

    def py(self, p):
        return f"torch.{DTYPES[self.name][0]}", PY_POSTFIX

    def cpp(self, c):
        return DTYPES[self.name][1], CPP_ATOM


_TENSOR_ATTRS = {"shape": ("shape", "sizes()"), "dtype": ("dtype", "scalar_type()"),
                 "dim": ("dim()", "dim()"), "numel": ("numel()", "numel()"),
                 "is_contiguous": ("is_contiguous()", "is_contiguous()")}


@dataclass(frozen=True)
class TensorAttr(Node):
    obj: Node = None
    attr: str = ""  # shape | dtype | dim | numel | is_contiguous

    def children(self):
        return (self.obj,)

    def py(self, p):
        return f"{p.at(self.obj, PY_POSTFIX)}.{_TENSOR_ATTRS[self.attr][0]}", PY_POSTFIX

    def cpp(self, c):
        return _member(c, self.obj, _TENSOR_ATTRS[self.attr][1]), CPP_POSTFIX

    def nonneg(self):
        return self.attr in ("shape", "dim", "numel")


@dataclass(frozen=True)
class SizeAt(Node):
    """One size of a tensor: `x.shape[i]` / `x.size(i)` (negative `i` counts from the end)."""

    obj: Node = None
    index: Node = None

    def children(self):
        return (self.obj, self.index)

    def py(self, p):
        return f"{p.at(self.obj, PY_POSTFIX)}.shape[{p.at(self.index, 0)}]", PY_POSTFIX

    def cpp(self, c):
        # at::Tensor::size(dim) wraps a negative dim itself
        return _member(c, self.obj, f"size({c.at(self.index, 0)})"), CPP_POSTFIX

    def nonneg(self):
        return True


@dataclass(frozen=True)
class StrideAt(Node):
    """One stride of a tensor, `x.stride(i)` (negative `i` counts from the end): where a layout matters (a fusion's
    `when:`, say, refusing a channels-last input whose composite keeps that layout)."""

    obj: Node = None
    index: Node = None

    def children(self):
        return (self.obj, self.index)

    def py(self, p):
        return f"{p.at(self.obj, PY_POSTFIX)}.stride({p.at(self.index, 0)})", PY_POSTFIX

    def cpp(self, c):
        return _member(c, self.obj, f"stride({c.at(self.index, 0)})"), CPP_POSTFIX

    def nonneg(self):
        return True


def _negative_literal(node: Node) -> int | None:
    if isinstance(node, Const) and isinstance(node.value, int) and not isinstance(node.value, bool) and node.value < 0:
        return node.value
    return None


@dataclass(frozen=True)
class Index(Node):
    """`seq[i]` of a size list or a tensor list."""

    seq: Node = None
    index: Node = None
    deref: bool = False

    def children(self):
        return (self.seq, self.index)

    def py(self, p):
        return f"{p.at(self.seq, PY_POSTFIX)}[{p.at(self.index, 0)}]", PY_POSTFIX

    def cpp(self, c):
        if self.seq.ty.elem_optional:  # c10::List<c10::optional<at::Tensor>>
            text = self.cpp_optional(c)
            return (f"{text}.value()" if self.deref else text), CPP_POSTFIX
        if _negative_literal(self.index) is None and not self.index.nonneg():
            # Python counts a negative index from the end; C++ containers do not
            seq, i = c.local("seq"), c.local("i")
            return (f"[&] {{ const auto& {seq} = {c.at(self.seq, CPP_COND)}; const int64_t {i} = {c.at(self.index, CPP_COND)}; "
                    f"return {seq}[{i} < 0 ? {i} + static_cast<int64_t>({seq}.size()) : {i}]; }}()"), CPP_POSTFIX
        return f"{c.at(self.seq, CPP_POSTFIX)}[{self._cpp_index(c)}]", CPP_POSTFIX

    def cpp_optional(self, c):
        return _member(c, self.seq, f"get({self._cpp_index(c)})")

    def _cpp_index(self, c):
        # C++ containers do not count from the end: a literal negative index becomes `size - k`.
        negative = _negative_literal(self.index)
        if negative is not None:
            return f"{_cpp_len(c, self.seq)} - {-negative}"
        if not self.index.nonneg():  # (a c10::List's get() is only reached here for a Tensor?[] list)
            i = c.at(self.index, CPP_COND)
            return f"{i} < 0 ? {i} + {_cpp_len(c, self.seq)} : {i}"
        return c.at(self.index, 0)

    def nonneg(self):
        return self.ty.kind == "int" and self.seq.nonneg()


@dataclass(frozen=True)
class Slice(Node):
    seq: Node = None
    lower: Node | None = None
    upper: Node | None = None

    def children(self):
        return (self.seq, self.lower, self.upper)

    def py(self, p):
        lower = "" if self.lower is None else p.at(self.lower, 0)
        upper = "" if self.upper is None else p.at(self.upper, 0)
        return f"{p.at(self.seq, PY_POSTFIX)}[{lower}:{upper}]", PY_POSTFIX

    def cpp(self, c):
        if any(b is not None and _negative_literal(b) is None and not b.nonneg() for b in (self.lower, self.upper)):
            return self._cpp_python_bounds(c), CPP_POSTFIX

        # ArrayRef::slice(start, length); a literal negative bound counts from the end.
        def bound(node: Node) -> str:
            negative = _negative_literal(node)
            if negative is not None:
                return f"{_cpp_len(c, self.seq)} - {-negative}"
            return c.at(node, CPP_ADD)

        seq = c.at(self.seq, CPP_POSTFIX)
        if self.seq.cpp_kind() != "ref":
            seq = f"c10::IntArrayRef({self.seq.cpp(c)[0]})"
        lower = "0" if self.lower is None else bound(self.lower)
        if self.upper is None:
            text = f"{seq}.slice({lower})"
        else:
            upper = bound(self.upper)
            length = upper if lower == "0" else f"{upper} - ({lower})" if " " in lower else f"{upper} - {lower}"
            text = f"{seq}.slice({lower}, {length})"
        if self.seq.cpp_kind() != "ref":  # a view of a temporary must not outlive it: copy
            return f"{SIZE_VECTOR}({text})", CPP_POSTFIX
        return text, CPP_POSTFIX

    def _cpp_python_bounds(self, c) -> str:
        """A bound that may be negative at run time: Python's rules (count from the end, clamp to the list)."""
        seq, n, clamp, lo, hi, b = (c.local(name) for name in ("seq", "n", "clamp", "lo", "hi", "b"))
        lower = "0" if self.lower is None else c.at(self.lower, CPP_COND)
        upper = n if self.upper is None else c.at(self.upper, CPP_COND)
        return (f"[&] {{ const auto& {seq} = {c.at(self.seq, CPP_COND)}; "
                f"const int64_t {n} = static_cast<int64_t>({seq}.size()); "
                f"auto {clamp} = [{n}](int64_t {b}) {{ return {b} < 0 ? std::max<int64_t>({b} + {n}, 0) : "
                f"std::min<int64_t>({b}, {n}); }}; const int64_t {lo} = {clamp}({lower}); "
                f"const int64_t {hi} = std::max<int64_t>({lo}, {clamp}({upper})); "
                f"return {SIZE_VECTOR}({seq}.begin() + {lo}, {seq}.begin() + {hi}); }}()")

    def cpp_kind(self):
        if any(b is not None and _negative_literal(b) is None and not b.nonneg() for b in (self.lower, self.upper)):
            return "vec"
        return "ref" if self.seq.cpp_kind() == "ref" else "vec"

    def nonneg(self):
        return self.seq.nonneg()


@dataclass(frozen=True)
class Len(Node):
    seq: Node = None

    def children(self):
        return (self.seq,)

    def py(self, p):
        return f"len({p.at(self.seq, 0)})", PY_POSTFIX

    def cpp(self, c):
        return _cpp_len(c, self.seq), CPP_POSTFIX

    def nonneg(self):
        return True


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Node, ...] = ()

    def children(self):
        return self.items

    def py(self, p):
        return "[" + ", ".join(p.at(i, PY_COND) for i in self.items) + "]", PY_ATOM

    def cpp(self, c):
        return SIZE_VECTOR + "{" + ", ".join(c.at(i, CPP_COND) for i in self.items) + "}", CPP_ATOM

    def cpp_kind(self):
        return "vec"

    def py_is_list(self):
        return True

    def nonneg(self):
        return all(item.nonneg() for item in self.items)


@dataclass(frozen=True)
class Concat(Node):
    """`a + b + …` of size lists, flattened."""

    parts: tuple[Node, ...] = ()

    def children(self):
        return self.parts

    def py(self, p):
        items: list[str] = []
        for part in self.parts:
            if isinstance(part, ListLit):
                items.extend(p.at(i, PY_COND) for i in part.items)
            else:
                items.append("*" + p.at(part, PY_POSTFIX if isinstance(part, Repeat) else PY_ADD + 1))
        return "[" + ", ".join(items) + "]", PY_ATOM

    def cpp(self, c):
        sizes, size = c.local("sizes"), c.local("size")
        body = [f"{SIZE_VECTOR} {sizes};"]
        for part in self.parts:
            if isinstance(part, ListLit):
                body.extend(f"{sizes}.push_back({c.at(i, CPP_COND)});" for i in part.items)
            else:
                body.append(f"for (int64_t {size} : {c.at(part, CPP_COND)}) {sizes}.push_back({size});")
        body.append(f"return {sizes};")
        return "[&] { " + " ".join(body) + " }()", CPP_POSTFIX

    def cpp_kind(self):
        return "vec"

    def py_is_list(self):
        return True

    def nonneg(self):
        return all(part.nonneg() for part in self.parts)


@dataclass(frozen=True)
class Repeat(Node):
    """`seq * n`: the size list repeated n times (`[1] * x.dim()`)."""

    seq: Node = None
    count: Node = None

    def children(self):
        return (self.seq, self.count)

    def py(self, p):
        return f"{p.at(self.seq, PY_MUL)} * {p.at(self.count, PY_MUL + 1)}", PY_MUL

    def cpp(self, c):
        count = c.at(self.count, CPP_COND)
        if isinstance(self.seq, ListLit) and len(self.seq.items) == 1:
            item = self.seq.items[0]
            return f"{SIZE_VECTOR}(static_cast<size_t>({count}), {c.at(item, CPP_COND)})", CPP_POSTFIX
        sizes, size, i = c.local("sizes"), c.local("size"), c.local("i")
        return (f"[&] {{ {SIZE_VECTOR} {sizes}; for (int64_t {i} = 0; {i} < {count}; ++{i}) "
                f"for (int64_t {size} : {c.at(self.seq, CPP_COND)}) {sizes}.push_back({size}); "
                f"return {sizes}; }}()"), CPP_POSTFIX

    def cpp_kind(self):
        return "vec"

    def py_is_list(self):
        return self.seq.py_is_list()

    def nonneg(self):
        return self.seq.nonneg()


_PY_BINARY = {"+": PY_ADD, "-": PY_ADD, "*": PY_MUL, "//": PY_MUL, "%": PY_MUL}
_CPP_BINARY = {"+": ("+", CPP_ADD), "-": ("-", CPP_ADD), "*": ("*", CPP_MUL), "//": ("/", CPP_MUL),
               "%": ("%", CPP_MUL)}
# Python's floor division for operands of any sign (C++'s `/` and `%` truncate towards zero): c10's own helper
# (c10/util/generic_math.h, in every torch line opgen supports); the kernel includes it (FLOOR_DIV_HEADER).
FLOOR_DIV = "c10::div_floor_integer"
FLOOR_DIV_HEADER = "c10/util/generic_math.h"


@dataclass(frozen=True)
class BinOp(Node):
    op: str = "+"
    left: Node = None
    right: Node = None

    def children(self):
        return (self.left, self.right)

    def py(self, p):
        prec = _PY_BINARY[self.op]
        return f"{p.at(self.left, prec)} {self.op} {p.at(self.right, prec + 1)}", prec

    def cpp(self, c):
        if self.op == "%" and self.right.nonneg() and not self.left.nonneg():  # a positive divisor: no lambda
            right = c.at(self.right, CPP_MUL + 1)
            return f"({c.at(self.left, CPP_MUL)} % {right} + {right}) % {right}", CPP_MUL
        if self.op in ("//", "%") and not (self.left.nonneg() and self.right.nonneg()):
            # a bare literal is an int: name the template's type, or int64_t and int cannot both deduce it
            typed = "" if all(any(isinstance(n, Name) for n in side.walk()) for side in (self.left, self.right)) \
                else "<int64_t>"
            floor = f"{FLOOR_DIV}{typed}({c.at(self.left, CPP_COND)}, {c.at(self.right, CPP_COND)})"
            if self.op == "//":
                return floor, CPP_POSTFIX
            return f"{c.at(self.left, CPP_ADD)} - {floor} * {c.at(self.right, CPP_MUL + 1)}", CPP_ADD  # a - (a // b) * b
        op, prec = _CPP_BINARY[self.op]
        return f"{c.at(self.left, prec)} {op} {c.at(self.right, prec + 1)}", prec

    def nonneg(self):
        if self.op == "%":  # Python's `a % b` has the sign of b
            return self.right.nonneg()
        return self.op != "-" and self.left.nonneg() and self.right.nonneg()


@dataclass(frozen=True)
class Neg(Node):
    operand: Node = None

    def children(self):
        return (self.operand,)

    def py(self, p):
        return f"-{p.at(self.operand, PY_UNARY)}", PY_UNARY

    def cpp(self, c):
        operand = c.at(self.operand, CPP_UNARY)
        # `--x` would be C++'s decrement operator.
        return (f"-({operand})" if operand.startswith("-") else f"-{operand}"), CPP_UNARY


_CPP_COMPARE = {"==": CPP_EQ, "!=": CPP_EQ, "<": CPP_REL, "<=": CPP_REL, ">": CPP_REL, ">=": CPP_REL}


@dataclass(frozen=True)
class Compare(Node):
    op: str = "=="
    left: Node = None
    right: Node = None

    def children(self):
        return (self.left, self.right)

    def py(self, p):
        sides = [p.at(self.left, PY_CMP + 1), p.at(self.right, PY_CMP + 1)]
        if self.left.ty.kind == "sizes":  # torch.Size never equals a list: compare lists
            sides = [s if n.py_is_list() else f"list({s})" for s, n in zip(sides, (self.left, self.right))]
        return f"{sides[0]} {self.op} {sides[1]}", PY_CMP

    def cpp(self, c):
        prec = _CPP_COMPARE[self.op]
        if self.left.ty.kind == "sizes":
            sides = [f"c10::IntArrayRef({n.cpp(c)[0]})" for n in (self.left, self.right)]
        else:
            sides = [c.at(self.left, prec + 1), c.at(self.right, prec + 1)]
        return f"{sides[0]} {self.op} {sides[1]}", prec


@dataclass(frozen=True)
class IsNone(Node):
    operand: Node = None
    negated: bool = False

    def children(self):
        return (self.operand,)

    def py(self, p):
        return f"{p.at(self.operand, PY_CMP + 1)} is {'not ' if self.negated else ''}None", PY_CMP

    def cpp(self, c):
        operand = self.operand
        text = f"{operand.cpp_optional(c)}.has_value()" if getattr(operand, "deref", False) else _member(
            c, operand, "has_value()")
        return (text, CPP_POSTFIX) if self.negated else (f"!{text}", CPP_UNARY)


@dataclass(frozen=True)
class BoolOp(Node):
    op: str = "and"
    values: tuple[Node, ...] = ()

    def children(self):
        return self.values

    def py(self, p):
        prec = PY_AND if self.op == "and" else PY_OR
        return f" {self.op} ".join(p.at(v, prec + 1) for v in self.values), prec

    def cpp(self, c):
        op, prec = ("&&", CPP_AND) if self.op == "and" else ("||", CPP_OR)
        return f" {op} ".join(c.at(v, prec + 1) for v in self.values), prec


@dataclass(frozen=True)
class Not(Node):
    operand: Node = None

    def children(self):
        return (self.operand,)

    def py(self, p):
        return f"not {p.at(self.operand, PY_NOT)}", PY_NOT

    def cpp(self, c):
        return f"!{c.at(self.operand, CPP_UNARY)}", CPP_UNARY


@dataclass(frozen=True)
class IfExp(Node):
    cond: Node = None
    then: Node = None
    orelse: Node = None

    def children(self):
        return (self.cond, self.then, self.orelse)

    def py(self, p):
        return (f"{p.at(self.then, PY_COND + 1)} if {p.at(self.cond, PY_COND + 1)} "
                f"else {p.at(self.orelse, PY_COND)}"), PY_COND

    def cpp(self, c):
        branches = [self.then, self.orelse]
        texts = [c.at(b, CPP_COND) for b in branches]
        if self.ty.kind == "sizes" and len({b.cpp_kind() for b in branches}) > 1:
            # The two arms of `?:` must have one type.
            texts = [t if b.cpp_kind() == "vec" else f"{SIZE_VECTOR}({t})" for t, b in zip(texts, branches)]
        return f"{c.at(self.cond, CPP_COND + 1)} ? {texts[0]} : {texts[1]}", CPP_COND

    def cpp_kind(self):
        kinds = {self.then.cpp_kind(), self.orelse.cpp_kind()}
        return kinds.pop() if len(kinds) == 1 else "vec"

    def py_is_list(self):
        return self.then.py_is_list() and self.orelse.py_is_list()

    def nonneg(self):
        return self.then.nonneg() and self.orelse.nonneg()


def _fold(function: str, args: list[str]) -> str:
    text = args[0]
    for arg in args[1:]:
        text = f"{function}({text}, {arg})"
    return text


_PY_FUNCTIONS = {"broadcast": "torch.broadcast_shapes", "promote": "torch.promote_types",
                 "max": "torch.sym_max", "min": "torch.sym_min"}
_CPP_FUNCTIONS = {"broadcast": "at::infer_size", "promote": "at::promote_types",
                  "max": "std::max<int64_t>", "min": "std::min<int64_t>"}


@dataclass(frozen=True)
class Call(Node):
    """A builtin over several arguments: broadcast, promote, max, min."""

    function: str = ""
    args: tuple[Node, ...] = ()

    def children(self):
        return self.args

    def py(self, p):
        args = [p.at(a, PY_COND) for a in self.args]
        if self.function == "broadcast":
            return f"torch.broadcast_shapes({', '.join(args)})", PY_POSTFIX
        return _fold(_PY_FUNCTIONS[self.function], args), PY_POSTFIX

    def cpp(self, c):
        args = [c.at(a, CPP_COND) for a in self.args]
        if self.function == "broadcast" and len(args) == 1:
            return self.args[0].cpp(c)
        return _fold(_CPP_FUNCTIONS[self.function], args), CPP_POSTFIX

    def cpp_kind(self):
        if self.function == "broadcast" and len(self.args) == 1:
            return self.args[0].cpp_kind()
        return "std"

    def nonneg(self):
        if self.function == "max":
            return any(a.nonneg() for a in self.args)
        return self.function in ("broadcast", "min") and all(a.nonneg() for a in self.args)


@dataclass(frozen=True)
class Reduce(Node):
    """`reduce(shape, dims, keepdim)`: the sizes left by a reduction over `dims`, as torch's sum/mean/amax give.

    Negative dims count from the end; an empty (or None) `dims` reduces every dimension (torch >= 2.x:
    `x.sum(dim=[])` is a full reduction); a reduced dimension is dropped, or kept as 1 with `keepdim`.
    """

    shape: Node = None
    dims: Node = None
    keepdim: Node = None  # a bool expression

    def children(self):
        return (self.shape, self.dims, self.keepdim)

    def py(self, p):
        # Only the rank and the dims (concrete ints while tracing) decide which sizes stay: no guard on a size.
        i, s, d = p.local("i"), p.local("s"), p.local("d")
        shape = p.at(self.shape, PY_COND)
        rank = (f"{p.at(self.shape.obj, PY_POSTFIX)}.dim()" if isinstance(self.shape, TensorAttr)
                else f"len({shape})")
        dims = p.at(self.dims, PY_OR) + (" or ()" if self.dims.ty.optional else "")
        reduced = f"([{d} % {rank} for {d} in {dims}] or range({rank}))"
        keep = self.keepdim.value if isinstance(self.keepdim, Const) else None
        if keep is False:
            return f"[{s} for {i}, {s} in enumerate({shape}) if {i} not in {reduced}]", PY_ATOM
        if keep is True:
            return f"[1 if {i} in {reduced} else {s} for {i}, {s} in enumerate({shape})]", PY_ATOM
        # `for r in [...]` names the reduced dims for the two tests; after `enumerate` it runs only for a
        # dimension that exists (a 0-dim shape has none, and `d % 0` would fail)
        r = p.local("r")
        return (f"[1 if {i} in {r} else {s} for {i}, {s} in enumerate({shape}) for {r} in [{reduced[1:-1]}] "
                f"if {p.at(self.keepdim, PY_OR + 1)} or {i} not in {r}]"), PY_ATOM

    def cpp(self, c):
        shape, dims, ndim, reduced, sizes, i, dim = (
            c.local(n) for n in ("shape", "dims", "ndim", "reduced", "sizes", "i", "dim"))
        if self.dims.ty.optional:  # an at::OptionalIntArrayRef argument: None reduces every dimension too
            name = self.dims.cpp(c)[0]
            dims_init = f"const at::IntArrayRef {dims} = {name}.has_value() ? {name}.value() : at::IntArrayRef();"
        else:
            dims_init = f"const auto& {dims} = {self.dims.cpp(c)[0]};"
        keep = self.keepdim.value if isinstance(self.keepdim, Const) else None
        if keep is False:
            push = f"if (!{reduced}[{i}]) {sizes}.push_back({shape}[{i}]);"
        else:
            push = f"{sizes}.push_back({reduced}[{i}] ? 1 : {shape}[{i}]);"
            if keep is None:
                push = f"if (!{reduced}[{i}] || {c.at(self.keepdim, CPP_OR + 1)}) {push}"
        body = [
            f"const auto& {shape} = {self.shape.cpp(c)[0]};", dims_init,
            f"const int64_t {ndim} = static_cast<int64_t>({shape}.size());",
            # one flag more than the rank: c10::maybe_wrap_dim lets a 0-dim shape be reduced over dim 0 or -1
            f"{SIZE_VECTOR} {reduced}(static_cast<size_t>({ndim} + 1), {dims}.empty() ? 1 : 0);",
            f"for (int64_t {dim} : {dims}) {reduced}[c10::maybe_wrap_dim({dim}, {ndim})] = 1;",
            f"{SIZE_VECTOR} {sizes};",
            f"for (int64_t {i} = 0; {i} < {ndim}; ++{i}) {push}",
            f"return {sizes};",
        ]
        return "[&] { " + " ".join(body) + " }()", CPP_POSTFIX

    def cpp_kind(self):
        return "vec"

    def py_is_list(self):
        return True

    def nonneg(self):
        return self.shape.nonneg()


@dataclass(frozen=True)
class Dynamic(Node):
    """A data-dependent size: an unbacked SymInt from the fake-impl context, with its bounds."""

    lower: Node | None = None
    upper: Node | None = None

    def children(self):
        return (self.lower, self.upper)

    def py(self, p):
        name = p.ctx.fresh()
        # new_dynamic_size only takes plain ints; symbolic bounds become torch._check relations.
        static = {key: b.value for key, b in (("min", self.lower), ("max", self.upper))
                  if isinstance(b, Const) and not isinstance(b.value, bool)}
        args = ", ".join(f"{key}={value}" for key, value in static.items())
        p.statements.append(f"{name} = torch.library.get_ctx().new_dynamic_size({args})")
        for op, bound, key in ((">=", self.lower, "min"), ("<=", self.upper, "max")):
            if bound is not None and key not in static:
                p.statements.append(f"torch._check({name} {op} {p.at(bound, PY_CMP + 1)})")
        return name, PY_ATOM

    def cpp(self, c):
        raise NotInCpp(self, "`dynamic` is not expressible in C++",
                       "write the data-dependent size by hand in the C++ meta function "
                       "(c10::SymInt from the output of the kernel)")


@dataclass(frozen=True)
class DtypeFallback(Node):
    """`dtype or x.dtype`: an optional ScalarType argument, else another dtype."""

    optional: Node = None
    fallback: Node = None

    def children(self):
        return (self.optional, self.fallback)

    def py(self, p):
        name = p.at(self.optional, PY_CMP + 1)
        return f"{name} if {name} is not None else {p.at(self.fallback, PY_COND)}", PY_COND

    def cpp(self, c):
        return _member(c, self.optional, f"value_or({c.at(self.fallback, CPP_COND)})"), CPP_POSTFIX


# ---------------------------------------------------------------------------------------------
# Names a rule reads besides the arguments: `let:` bindings and the element index of a Tensor[] return


@dataclass(frozen=True)
class Bound(Node):
    """A `let:` name: Python reads the variable the fake assigned first; C++ inlines the expression."""

    name: str = ""
    value: Node = None

    def children(self):
        return (self.value,)

    def py(self, p):
        return self.name, PY_ATOM

    def cpp(self, c):
        return self.value.cpp(c)

    def cpp_kind(self):
        return self.value.cpp_kind()

    def py_is_list(self):
        return self.value.py_is_list()

    def nonneg(self):
        return self.value.nonneg()


@dataclass(frozen=True)
class Local(Node):
    """The element index of a `Tensor[]` return's rules (`i` in `xs[i].shape`): a loop variable in both languages."""

    name: str = ""

    def py(self, p):
        return self.name, PY_ATOM

    def cpp(self, c):
        return self.name, CPP_ATOM

    def nonneg(self):
        return True


# ---------------------------------------------------------------------------------------------
# Dimension helpers: wrap a dim, replace / insert / remove the size at a dim


def _rank_py(p: _Py, shape: Node, extra: str = "") -> str:
    rank = f"{p.at(shape.obj, PY_POSTFIX)}.dim()" if isinstance(shape, TensorAttr) else f"len({p.at(shape, PY_COND)})"
    return f"({rank}{extra})" if extra else rank


@dataclass(frozen=True)
class WrapDim(Node):
    """`wrap_dim(dim, rank)`: a dim in [-rank, rank) counted from 0 (Python `%`, C++ `c10::maybe_wrap_dim`)."""

    dim: Node = None
    rank: Node = None

    def children(self):
        return (self.dim, self.rank)

    def py(self, p):
        return f"{p.at(self.dim, PY_MUL)} % {p.at(self.rank, PY_MUL + 1)}", PY_MUL

    def cpp(self, c):
        return f"c10::maybe_wrap_dim({c.at(self.dim, CPP_COND)}, {c.at(self.rank, CPP_COND)}, false)", CPP_POSTFIX

    def nonneg(self):
        return True


@dataclass(frozen=True)
class SizeEdit(Node):
    """`replace_size(shape, dim, size)`, `insert_size(shape, dim, size)`, `remove_size(shape, dim)`.

    A negative dim counts from the end, as in torch (`insert` as `unsqueeze`: over rank + 1 places).
    """

    edit: str = "replace"  # replace | insert | remove
    shape: Node = None
    dim: Node = None
    size: Node | None = None

    def children(self):
        return (self.shape, self.dim, self.size)

    def py(self, p):
        shape = p.at(self.shape, PY_COND)
        i, s = p.local("i"), p.local("s")
        if self.edit == "insert":
            where = f"{p.at(self.dim, PY_MUL)} % {_rank_py(p, self.shape, ' + 1')}"
            shape = p.at(self.shape, PY_POSTFIX)
            return f"[*{shape}[:{where}], {p.at(self.size, PY_COND)}, *{shape}[{where}:]]", PY_ATOM
        where = f"{p.at(self.dim, PY_MUL)} % {_rank_py(p, self.shape)}"
        if self.edit == "remove":
            return f"[{s} for {i}, {s} in enumerate({shape}) if {i} != {where}]", PY_ATOM
        return f"[{p.at(self.size, PY_COND + 1)} if {i} == {where} else {s} for {i}, {s} in enumerate({shape})]", PY_ATOM

    def cpp(self, c):
        shape, sizes = c.local("shape"), c.local("sizes")
        rank = f"static_cast<int64_t>({sizes}.size())"
        dim = c.at(self.dim, CPP_COND)
        edit = {
            "replace": f"{sizes}[c10::maybe_wrap_dim({dim}, {rank}, false)] = {c.at(self.size, CPP_COND) if self.size else ''};",
            "insert": f"{sizes}.insert({sizes}.begin() + c10::maybe_wrap_dim({dim}, {rank} + 1, false), "
                      f"{c.at(self.size, CPP_COND) if self.size else ''});",
            "remove": f"{sizes}.erase({sizes}.begin() + c10::maybe_wrap_dim({dim}, {rank}, false));",
        }[self.edit]
        return (f"[&] {{ const auto& {shape} = {c.at(self.shape, CPP_COND)}; "
                f"{SIZE_VECTOR} {sizes}({shape}.begin(), {shape}.end()); {edit} return {sizes}; }}()"), CPP_POSTFIX

    def cpp_kind(self):
        return "vec"

    def py_is_list(self):
        return True

    def nonneg(self):
        return self.shape.nonneg() and (self.size is None or self.size.nonneg())


# ---------------------------------------------------------------------------------------------
# A dtype given as an int code (`from_code(dst_type)`), by the spec's `dtype_codes:` table


@dataclass(frozen=True)
class FromCode(Node):
    code: Node = None
    table: tuple[tuple[int, str], ...] = ()  # (code, canonical dtype name), as the spec lists them

    def children(self):
        return (self.code,)

    def py(self, p):
        return f"{p.ctx.table(self.table, p)}[{p.at(self.code, 0)}]", PY_POSTFIX

    def cpp(self, c):
        code = c.local("code")
        cases = " ".join(f"case {number}: return {DTYPES[name][1]};" for number, name in self.table)
        return (f"[&]() -> at::ScalarType {{ const int64_t {code} = {c.at(self.code, CPP_COND)}; "
                f"switch ({code}) {{ {cases} }} "
                f'TORCH_CHECK(false, "dtype code ", {code}, " is not in the dtype_codes of the spec"); '
                "return at::ScalarType::Undefined; }()"), CPP_POSTFIX
