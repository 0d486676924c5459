"""The semantics language: shape and dtype rules of an op's outputs, over its arguments.

A rule is a Python expression (`x.shape[:-1] + [1]`, `promote(x, y)`), parsed with `ast`,
type-checked against the op's schema and printed to Python (for fake functions) and C++ (for
op_plugin meta code). It is never evaluated by opgen. The language reference is in
docs/spec.md ("Semantics language"); errors carry the column inside the rule text.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import io
import math
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, replace

from opgen.errors import OpgenError
from opgen.schema.model import Argument, BaseType, ListType, OptionalType, Schema, base_name, strip_alias

from .bodies import deepest_node
from .rule_bounds import check_bounds
from .semantics_ir import (
    BOOL,
    DTYPE,
    DTYPE_ALIASES,
    DTYPES,
    FLOAT,
    INT,
    NONE,
    PY_COND,
    SIZES,
    STR,
    TENSOR,
    BinOp,
    BoolOp,
    Bound,
    Call,
    Compare,
    Concat,
    Const,
    DtypeFallback,
    DtypeName,
    Dynamic,
    FromCode,
    IfExp,
    Index,
    IsNone,
    Len,
    ListLit,
    Local,
    Name,
    Neg,
    Node,
    Not,
    NotInCpp,
    PyContext,
    Reduce,
    Repeat,
    SizeAt,
    SizeEdit,
    Slice,
    StrideAt,
    TensorAttr,
    Ty,
    WrapDim,
    _Cpp,
    _Py,
)

__all__ = ["Binding", "ConditionRule", "DtypeRule", "IntRule", "PyContext", "Scope", "SemanticsError", "ShapeRule",
           "TensorRule", "binding_statements", "parse_binding", "parse_condition", "parse_dtype", "parse_int",
           "parse_shape", "parse_tensor"]

FUNCTIONS = ("broadcast", "dynamic", "from_code", "insert_size", "len", "max", "min", "promote", "reduce",
             "remove_size", "replace_size", "wrap_dim")
TENSOR_MEMBERS = ("shape", "dtype", "ndim", "size()", "dim()", "numel()", "is_contiguous()", "stride(i)")
# what a `let:` name may hold (a float or a string has no use in a shape or dtype rule)
BINDING_KINDS = ("int", "bool", "sizes", "dtype", "tensor", "tensors")
_EXAMPLE_DYNAMIC = "[dynamic(max=x.shape[0]), x.shape[1]]"
# How deep a rule may nest (a real one: 5); deeper ones would exhaust the recursion of the checker and printers.
MAX_RULE_DEPTH = 64


class SemanticsError(OpgenError):
    """A shape or dtype rule that does not parse or does not type-check.

    `column` is 1-based inside the line `expr_line` (1-based) of the rule text; `source` is that line.
    """

    def __init__(self, message: str, *, expr_line: int = 1, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.expr_line = expr_line



# ---------------------------------------------------------------------------------------------
# Public rules


@dataclass(frozen=True)
class Scope:
    """What a rule may read besides the op's arguments (all checked before the rule).

    `outputs`: the outputs described before this one (tensors); `bindings`: the op's `let:` names, in order;
    `index`: the element index of a `Tensor[]` return's per-element rules (an int, None elsewhere);
    `dtype_codes`: the spec's `dtype_codes:` table, (code, dtype name) pairs for `from_code(...)`.
    """

    outputs: tuple[str, ...] = ()
    bindings: tuple[Binding, ...] = ()
    index: str | None = None
    dtype_codes: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class _Rule:
    """A checked rule: its text, its checked expression tree, and the op it belongs to."""

    text: str
    node: Node
    schema: Schema

    @property
    def uses(self) -> frozenset[str]:
        """The argument names the rule reads."""
        return _uses(self.node)

    @property
    def uses_outputs(self) -> frozenset[str]:
        """The earlier outputs the rule reads."""
        return _uses(self.node, outputs=True)

    @property
    def uses_bindings(self) -> frozenset[str]:
        """The `let:` names the rule reads, directly or through other `let:` names."""
        return frozenset(n.name for n in self.node.walk() if isinstance(n, Bound))

    def cpp(self) -> str:
        """C++ for op_plugin: an expression (`let:` names inlined)."""
        return _cpp(self.node, self.text, self.schema)

    def _py(self, ctx: PyContext | None) -> tuple[_Py, str]:
        printer = _Py(_context(ctx, self.schema, self.node))
        return printer, _top(self.node.py(printer))


@dataclass(frozen=True)
class ShapeRule(_Rule):
    """The sizes of one output tensor."""

    @property
    def is_dynamic(self) -> bool:
        return any(isinstance(n, Dynamic) for n in self.node.walk())

    def python(self, ctx: PyContext | None = None) -> tuple[list[str], str]:
        """(statements to run first, expression) for a fake function whose parameters are the arguments.

        The expression is a list or `torch.Size` fit for `x.new_empty(sizes, dtype=...)`; a top-level
        conditional comes parenthesised so it can be placed anywhere.
        """
        printer, text = self._py(ctx)
        return printer.statements, text

    def cpp(self) -> str:
        """A C++ expression (IntArrayRef, SmallVector or std::vector) for `at::empty(sizes, options)`."""
        return _cpp(self.node, self.text, self.schema)


@dataclass(frozen=True)
class _ExpressionRule(_Rule):
    """A rule printed as one Python expression, with the statements it needs first (a `dtype_codes` table)."""

    def python_with_statements(self, ctx: PyContext | None = None) -> tuple[list[str], str]:
        printer, text = self._py(ctx)
        return printer.statements, text

    def python(self, ctx: PyContext | None = None) -> str:
        """The expression alone: for a caller that shares `ctx` with a rule printed before it that needed the
        same statements (or for a rule that needs none)."""
        return self.python_with_statements(ctx)[1]


@dataclass(frozen=True)
class DtypeRule(_ExpressionRule):
    """The dtype of one output tensor."""


@dataclass(frozen=True)
class IntRule(_ExpressionRule):
    """One int: the number of tensors of a `Tensor[]` return (`length:`)."""


@dataclass(frozen=True)
class TensorRule(_ExpressionRule):
    """One tensor (`like:`): an output with its shape and layout."""


@dataclass(frozen=True)
class ConditionRule(_ExpressionRule):
    """A condition on the arguments, a bool (`fusion.when`: when a fused op may replace its composite)."""


@dataclass(frozen=True)
class Binding(_ExpressionRule):
    """`let: {name: rule}`: a name the op's rules share; the fake assigns it once, the C++ inlines it."""

    name: str = ""

    def statements(self, ctx: PyContext | None = None) -> list[str]:
        """`name = expression` (after what the expression needs), for the top of a function body."""
        printer = _Py(_context(ctx, self.schema, self.node))
        text, _ = self.node.py(printer)
        return [*printer.statements, f"{self.name} = {text}"]


def parse_shape(text: str, schema: Schema, outputs: Sequence[str] = (), *, scope: Scope | None = None) -> ShapeRule:
    """Parse and check a shape rule; raises SemanticsError.

    `outputs` names the outputs computed before this one: the rule may use them as tensors
    (`counts: values.shape` gives two outputs one data-dependent size); `scope` gives the rest it may read.
    """
    return _parse(text, schema, ShapeRule, _scope(scope, outputs))


def parse_dtype(text: str, schema: Schema, outputs: Sequence[str] = (), *, scope: Scope | None = None) -> DtypeRule:
    """Parse and check a dtype rule; raises SemanticsError. `outputs` and `scope` as for `parse_shape`."""
    return _parse(text, schema, DtypeRule, _scope(scope, outputs))


def parse_int(text: str, schema: Schema, scope: Scope | None = None) -> IntRule:
    """Parse and check a rule giving one int (the `length:` of a `Tensor[]` return)."""
    return _parse(text, schema, IntRule, scope or Scope())


def parse_tensor(text: str, schema: Schema, scope: Scope | None = None) -> TensorRule:
    """Parse and check a rule giving one tensor (`like: x`, `like: xs[i]`)."""
    return _parse(text, schema, TensorRule, scope or Scope())


def parse_binding(name: str, text: str, schema: Schema, scope: Scope | None = None) -> Binding:
    """Parse and check the `let:` rule `name: text`; it may read the bindings of `scope` (the earlier ones)."""
    with _depth_guard(text):
        source = _Source(text)
        checker = _Checker(source, schema, scope or Scope())
        tree = source.parse()
        value = checker.present(checker.value(tree, frozenset()), tree)
        checker._no_dynamic(value, tree, "a `let:` name (give the data-dependent size in the shape rule)")
        if value.ty.kind not in BINDING_KINDS:
            checker.fail(tree, f"a `let:` name holds a size, a list of sizes, a bool, a dtype or a tensor, not "
                         f"{value.ty.describe()}: `{checker.code(tree)}`", "use the value in the rule directly")
        check_bounds(value, source.error, shape=False)
        binding = Binding(text, value, schema, name=name)
        binding.statements()
        binding.cpp()
    return binding


def parse_condition(text: str, schema: Schema, scope: Scope | None = None) -> ConditionRule:
    """Parse and check a condition (a comparison, `and`/`or`/`not` of them, a bool argument); printed as Python only."""
    with _depth_guard(text):
        source = _Source(text)
        checker = _Checker(source, schema, scope or Scope())
        tree = source.parse()
        node = checker.boolean(checker.value(tree, frozenset()), tree)
        checker._no_dynamic(node, tree, "a condition")
        check_bounds(node, source.error, shape=False)
        rule = ConditionRule(text, node, schema)
        rule.python()
    return rule


def binding_statements(bindings: Sequence[Binding], rules: Sequence[_Rule], ctx: PyContext | None = None) -> list[str]:
    """The assignments of the `let:` names that `rules` read (directly or through other names), in spec order."""
    used = frozenset().union(*(rule.uses_bindings for rule in rules))
    return [line for binding in bindings if binding.name in used for line in binding.statements(ctx)]


def _scope(scope: Scope | None, outputs: Sequence[str]) -> Scope:
    scope = scope or Scope()
    return replace(scope, outputs=tuple(outputs)) if outputs else scope


_KIND_CHECKS = {ShapeRule: ("sizes", "a shape rule"), DtypeRule: ("dtype", "a dtype rule"), IntRule: ("integer", "a length"),
                TensorRule: ("tensor", "`like`")}


def _parse(text: str, schema: Schema, kind: type[_Rule], scope: Scope):
    with _depth_guard(text):
        source = _Source(text)
        checker = _Checker(source, schema, scope)
        tree = source.parse()
        value = checker.value(tree, frozenset(), dynamic_ok=scope.index is None)
        coerce, what = _KIND_CHECKS[kind]
        if kind is TensorRule:
            node = checker.present(value, tree)
            if node.ty.kind != "tensor":
                checker.fail(tree, f"`like` must be a tensor, got {node.ty.describe()}: `{checker.code(tree)}`",
                             "name a Tensor argument, a tensor of a Tensor[] (`xs[0]`, `xs[i]`) or a `let:` tensor")
        else:
            node = getattr(checker, coerce)(value, tree, what)
        if kind is not ShapeRule:
            checker._no_dynamic(node, tree, what)
        check_bounds(node, source.error, shape=kind is ShapeRule)
        rule = kind(text, node, schema)
        # Printing recurses like checking: a rule too deep to print fails here, not in the generator.
        rule.python()
        if not (kind is ShapeRule and rule.is_dynamic):
            rule.cpp()
    return rule


@contextlib.contextmanager
def _depth_guard(text: str):
    try:
        yield
    except (RecursionError, MemoryError):
        raise SemanticsError("the rule is nested too deeply to check", source=text.splitlines()[0] if text else text,
                             column=1, hint="split it: a shape rule is one short expression") from None


def promoted_arguments(rule: _Rule) -> list[tuple[str, ...]]:
    """The arguments each `promote(...)` of a rule reads (a dtype rule mixing its inputs' dtypes), in order."""
    return [tuple(sorted(frozenset().union(*(_uses(arg) for arg in node.args))))
            for node in rule.node.walk() if isinstance(node, Call) and node.function == "promote"]


def _uses(node: Node, outputs: bool = False) -> frozenset[str]:
    return frozenset(n.name for n in node.walk() if isinstance(n, Name) and n.output == outputs)


def _argument_names(schema: Schema) -> frozenset[str]:
    return frozenset(a.name for a in schema.arguments)


def _context(ctx: PyContext | None, schema: Schema, node: Node | None = None) -> PyContext:
    """The caller's context (shared by the rules of one function), never handing out an argument's name, nor a
    `let:` name or the element index the rule reads."""
    taken = _argument_names(schema) | {n.name for n in (node.walk() if node else ()) if isinstance(n, (Bound, Local))}
    if ctx is None:
        return PyContext(reserved=taken)
    ctx.reserved |= taken
    return ctx


def _top(printed: tuple[str, int]) -> str:
    text, prec = printed
    return f"({text})" if prec <= PY_COND else text


def _cpp(node: Node, text: str, schema: Schema) -> str:
    try:
        out, prec = node.cpp(_Cpp(_argument_names(schema)))
    except NotInCpp as refusal:
        raise _Source(text).error(refusal.message, refusal.node.col, refusal.hint) from None
    return f"({out})" if prec <= 1 else out


# ---------------------------------------------------------------------------------------------
# Source text and positions


class _Source:
    """The rule text; maps `ast` offsets (UTF-8 bytes of one flattened line) to line and column."""

    def __init__(self, text: str) -> None:
        self.text = text
        # Newlines become spaces so that a multi-line YAML string parses as one expression
        # with the same character offsets.
        flat = text.replace("\r", " ").replace("\n", " ")
        self.lead = len(flat) - len(flat.lstrip())
        self.flat = flat.lstrip()
        self.encoded = self.flat.encode("utf-8")

    def parse(self) -> ast.expr:
        if not self.flat.strip():
            raise self.error("empty rule", 0, "write an expression over the op's arguments, e.g. `x.shape`")
        self._refuse_comments()
        try:
            tree = ast.parse(self.flat, mode="eval").body
        except (RecursionError, MemoryError):
            raise self.error(f"the expression nests more than {MAX_RULE_DEPTH} levels deep", 0,
                             "rules are short expressions: split it with `let:` bindings") from None
        except SyntaxError as e:
            message = e.msg[0].lower() + e.msg[1:] if e.msg else "invalid syntax"
            if not e.offset:  # Python reports an unfinished expression at offset 0
                offset, message = self.lead + len(self.flat.rstrip()), "the expression ends too early"
            else:
                offset = self.lead + min(e.offset - 1, len(self.flat))
            raise self.error(f"not a valid expression: {message}", offset,
                             "rules use Python expression syntax, e.g. `x.shape[:-1] + [1]`") from None
        deepest = deepest_node(tree, MAX_RULE_DEPTH)
        if deepest is not None:
            raise self.error(f"the expression nests more than {MAX_RULE_DEPTH} levels deep", self.offset(deepest),
                             "rules are short expressions: split it with `let:` bindings")
        return tree

    def _refuse_comments(self) -> None:
        if "#" not in self.flat:
            return
        try:
            for tok in tokenize.generate_tokens(io.StringIO(self.flat).readline):
                if tok.type == tokenize.COMMENT:
                    raise self.error("comments are not allowed in a rule", self.lead + tok.start[1],
                                     "put the explanation in the op's `doc:` field")
        except (tokenize.TokenError, IndentationError, SyntaxError):
            pass  # ast.parse reports these with a better message

    def offset(self, node: ast.AST, end: bool = False) -> int:
        byte = node.end_col_offset if end else node.col_offset
        return self.lead + len(self.encoded[:byte].decode("utf-8", errors="ignore"))

    def error(self, message: str, offset: int, hint: str | None = None) -> SemanticsError:
        before = self.text[:offset]
        line = before.count("\n") + 1
        start = before.rfind("\n") + 1
        source = self.text.splitlines()[line - 1] if self.text.strip() else self.text
        return SemanticsError(message, source=source, column=offset - start + 1, hint=hint, expr_line=line)


# ---------------------------------------------------------------------------------------------
# Argument types


_SCALAR_KINDS = {
    "Tensor": "tensor", "int": "int", "SymInt": "int", "DeviceIndex": "int", "bool": "bool", "SymBool": "bool",
    "float": "float", "SymFloat": "float", "Scalar": "float", "str": "str", "ScalarType": "dtype",
}


def argument_type(arg: Argument) -> Ty | None:
    """What an argument is inside the language; None for types it cannot use (Generator, Device…)."""
    t = strip_alias(arg.type)
    optional = isinstance(t, OptionalType)
    if optional:
        t = t.elem
    if isinstance(t, ListType):
        elem_optional = isinstance(t.elem, OptionalType)
        kind = _SCALAR_KINDS.get(base_name(t.elem))
        if kind == "tensor":
            return Ty("tensors", optional, elem_optional)
        if kind == "int" and not elem_optional:
            return Ty("sizes", optional)
        return None
    if isinstance(t, BaseType) and t.name in _SCALAR_KINDS:
        return Ty(_SCALAR_KINDS[t.name], optional)
    return None


# ---------------------------------------------------------------------------------------------
# The checker: ast -> typed nodes


_UNSUPPORTED = {
    "Lambda": "a lambda", "ListComp": "a list comprehension", "GeneratorExp": "a generator expression",
    "SetComp": "a set comprehension", "DictComp": "a dict comprehension", "Dict": "a dict", "Set": "a set",
    "JoinedStr": "an f-string", "NamedExpr": "an assignment expression (:=)", "Await": "await",
    "Yield": "yield", "YieldFrom": "yield", "Starred": "a starred expression outside a list",
    "Slice": "a slice outside brackets", "FormattedValue": "an f-string",
}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_LANGUAGE_HINT = ("rules may use the op's arguments, `.shape`, `.size(i)`, `.dim()`, `.dtype`, indexing, "
                  "slicing, list `+`/`*`, integer `+ - * // %`, `a if c else b`, " + ", ".join(FUNCTIONS))


class _Checker:
    def __init__(self, source: _Source, schema: Schema, scope: Scope) -> None:
        self.src = source
        self.schema = schema
        self.scope = scope
        self.args = {a.name: a for a in schema.arguments}
        self.outputs = tuple(o for o in scope.outputs if o not in self.args)  # an argument wins a name clash
        self.bindings = {b.name: b for b in scope.bindings}

    # -- errors --------------------------------------------------------------------------------

    def fail(self, node: ast.AST, message: str, hint: str | None = None, *, at_end: int = 0):
        offset = self.src.offset(node, end=True) - at_end if at_end else self.src.offset(node)
        raise self.src.error(message, offset, hint)

    def code(self, node: ast.AST) -> str:
        """The text the user wrote for `node` (for messages)."""
        return ast.get_source_segment(self.src.flat, node) or ast.unparse(node)

    @staticmethod
    def key(node: ast.AST) -> str:
        """A spelling-independent name for an expression narrowed by `is not None`."""
        return ast.unparse(node)

    # -- coercions to what a context needs -----------------------------------------------------

    def present(self, value: Node, node: ast.AST) -> Node:
        if value.ty.optional:
            text = self.code(node)
            kind = value.ty.required().describe()
            fallback = "x.dtype" if value.ty.kind == "dtype" else "[...]" if value.ty.kind in ("tensor", "sizes") else "..."
            example = (f"`{text} or {fallback}`" if value.ty.kind == "dtype" else
                       f"`{text}.shape if {text} is not None else {fallback}`" if value.ty.kind == "tensor" else
                       f"`... if {text} is not None else {fallback}`")
            self.fail(node, f"`{text}` is optional ({kind} or None) and may be None here",
                      f"guard it: {example}")
        return value

    def integer(self, value: Node, node: ast.AST, what: str = "a size") -> Node:
        value = self.present(value, node)
        kind = value.ty.kind
        if kind == "int":
            return value
        text = self.code(node)
        if kind == "float":
            self.fail(node, f"float arithmetic on sizes: `{text}` is a float, {what} must be an int",
                      "sizes are integers; use `//` for division and int arguments")
        hints = {
            "dtype": "a dtype cannot be a size; did you mean the `dtype:` field?",
            "sizes": f"pick one size with an index, e.g. `{_operand(text)}[0]`, or count them with `len({text})`",
            "tensor": f"use `{_operand(text)}.shape[i]` for one size, `{_operand(text)}.dim()` or "
                      f"`{_operand(text)}.numel()`",
            "tensors": f"use `len({text})` for the number of tensors",
            "bool": f"write the choice explicitly: `1 if {text} else 0`",
        }
        self.fail(node, f"expected {what} (an int), got {value.ty.describe()}: `{text}`",
                  hints.get(kind, "sizes are ints: int arguments, `x.shape[i]`, `len(xs)`, `x.dim()`, literals"))

    def sizes(self, value: Node, node: ast.AST, what: str = "a list of sizes") -> Node:
        value = self.present(value, node)
        if value.ty.kind == "sizes":
            return value
        text = self.code(node)
        hints = {
            "tensor": f"use `{_operand(text)}.shape`",
            "int": f"a shape is a list: write `[{text}]`",
            "dtype": "a dtype goes in the `dtype:` field, not in the shape",
            "tensors": f"use the shape of one tensor, e.g. `{_operand(text)}[0].shape`",
        }
        self.fail(node, f"{what} must be a list of sizes, got {value.ty.describe()}: `{text}`",
                  hints.get(value.ty.kind, "a shape is a list such as `x.shape` or `[n, x.shape[1]]`"))

    def dtype(self, value: Node, node: ast.AST, what: str = "a dtype") -> Node:
        value = self.present(value, node)
        if value.ty.kind == "dtype":
            return value
        if value.ty.kind == "tensor":
            return TensorAttr(DTYPE, value.col, obj=value, attr="dtype")
        text = self.code(node)
        self.fail(node, f"{what} must be a dtype, got {value.ty.describe()}: `{text}`",
                  "write a tensor argument (`x` or `x.dtype`), a dtype name such as `float32`, "
                  "`promote(x, y)`, or `dtype or x.dtype` for an optional ScalarType argument")

    def boolean(self, value: Node, node: ast.AST) -> Node:
        if value.ty.kind == "bool" and not value.ty.optional:
            return value
        text = self.code(node)
        if value.ty.optional or value.ty.kind == "none":
            self.fail(node, f"a condition must be a bool, got {value.ty.describe()}: `{text}`",
                      f"test for None explicitly: `{text} is not None`")
        hint = (f"compare explicitly, e.g. `{text} != 0`" if value.ty.kind == "int" else
                "a condition is a comparison (`x.dim() == 2`), a bool argument or an `is None` test")
        self.fail(node, f"a condition must be a bool, got {value.ty.describe()}: `{text}`", hint)

    def tensor(self, value: Node, node: ast.AST, member: str) -> Node:
        value = self.present(value, node)
        if value.ty.kind == "tensor":
            return value
        text = self.code(node)
        tensors = ", ".join(f"`{a}`" for a in self.args if argument_type(self.args[a]) == Ty("tensor")) or "none"
        hint = f"only tensors have `.{member}`; the op's tensor arguments are: {tensors}"
        if value.ty.kind == "tensors":
            hint = f"pick one tensor: `{_operand(text)}[0].{member}`; `len({text})` counts them"
        elif value.ty.kind == "sizes" and member in ("shape", "size()"):
            hint = f"`{text}` already is a list of sizes: use it directly, or `{text}[i]`"
        self.fail(node, f"`.{member}` needs a tensor, but `{text}` is {value.ty.describe()}", hint)

    # -- expressions ---------------------------------------------------------------------------

    def value(self, node: ast.AST, env: frozenset[str], dynamic_ok: bool = False) -> Node:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            what = _UNSUPPORTED.get(type(node).__name__, type(node).__name__)
            self.fail(node, f"unsupported syntax: {what}", _LANGUAGE_HINT)
        return method(node, env, dynamic_ok)

    def _Constant(self, node: ast.Constant, env, dynamic_ok) -> Node:
        value = node.value
        col = self.src.offset(node)
        if isinstance(value, bool):
            return Const(BOOL, col, value=value)
        if isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                self.fail(node, f"`{value}` does not fit in int64", "sizes are 64-bit integers")
            return Const(INT, col, value=value)
        if value is None:
            return Const(NONE, col, value=None)
        if isinstance(value, str):
            return Const(STR, col, value=value)
        if isinstance(value, float):
            if not math.isfinite(value):
                self.fail(node, f"`{self.code(node)}` is not a finite number", "use a finite float literal")
            return Const(FLOAT, col, value=value)
        self.fail(node, f"unsupported literal `{self.code(node)}`", "use ints, bools, strings or None")

    def _Name(self, node: ast.Name, env, dynamic_ok) -> Node:
        name, col = node.id, self.src.offset(node)
        if name in self.args:
            arg = self.args[name]
            ty = argument_type(arg)
            if ty is None:
                self.fail(node, f"argument `{name}` has type `{arg.type}`, which rules cannot use",
                          "rules can use tensors, tensor lists, int/SymInt (lists), bool, float, str and "
                          "ScalarType arguments")
            if ty.optional and name in env:
                return Name(ty.required(), col, name=name, deref=True)
            return Name(ty, col, name=name)
        if name in self.outputs:
            return Name(TENSOR, col, name=name, output=True)
        if name in self.bindings:
            binding = self.bindings[name]
            return Bound(binding.node.ty, col, name=name, value=binding.node)
        if name == self.scope.index:
            return Local(INT, col, name=name)
        if name == "dynamic":
            return self._dynamic(node, [], [], dynamic_ok)
        if name in DTYPES or name in DTYPE_ALIASES:
            return DtypeName(DTYPE, col, name=DTYPE_ALIASES.get(name, name))
        if name in FUNCTIONS:
            self.fail(node, f"`{name}` is a function: call it", f"e.g. `{_function_example(name)}`")
        if name == "torch":
            self.fail(node, "rules are not Python run with torch: `torch` is unknown",
                      "write dtypes bare (`float32`) and use the builtins " + ", ".join(FUNCTIONS))
        returns = list(self.schema.return_names)
        if name in returns:
            earlier = ", ".join(self.outputs) or "none"
            self.fail(node, f"`{name}` is an output that is not computed before this rule",
                      f"a rule may use the outputs listed before its own in `outputs:` (here: {earlier})")
        candidates = [*self.args, *self.outputs, *self.bindings, *([self.scope.index] if self.scope.index else []),
                      *FUNCTIONS, *DTYPES, *DTYPE_ALIASES, "None", "True", "False"]
        close = difflib.get_close_matches(name, candidates, n=1)
        arguments = ", ".join(self.args) or "none"
        hint = (f"did you mean `{close[0]}`? " if close else "") + f"the op's arguments are: {arguments}"
        if self.outputs:
            hint += "; earlier outputs: " + ", ".join(self.outputs)
        if self.bindings:
            hint += "; `let:` names: " + ", ".join(self.bindings)
        if self.scope.index:
            hint += f"; the element index: {self.scope.index}"
        self.fail(node, f"unknown name `{name}`", hint)

    def _Attribute(self, node: ast.Attribute, env, dynamic_ok) -> Node:
        attr = node.attr
        self._no_torch(node)
        if attr in ("size", "dim", "numel", "is_contiguous", "stride"):
            self.fail(node, f"`.{attr}` is a method: call it", f"write `{self.code(node)}()`", at_end=len(attr))
        if attr not in ("shape", "dtype", "ndim"):
            self._unknown_member(node, attr)
        obj = self.tensor(self.value(node.value, env), node.value, attr)
        col = self.src.offset(node)
        if attr == "shape":
            return TensorAttr(SIZES, col, obj=obj, attr="shape")
        if attr == "dtype":
            return TensorAttr(DTYPE, col, obj=obj, attr="dtype")
        return TensorAttr(INT, col, obj=obj, attr="dim")

    def _no_torch(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and "torch" not in self.args:
            builtin = {"broadcast_shapes": "broadcast", "promote_types": "promote"}.get(node.attr)
            if node.attr in DTYPES or node.attr in DTYPE_ALIASES:
                hint = f"write `{node.attr}`"
            elif builtin:
                hint = f"use the builtin `{builtin}(...)`"
            else:
                hint = "rules use the op's arguments and the builtins " + ", ".join(FUNCTIONS)
            self.fail(node, f"`{self.code(node)}`: rules are not Python run with torch", hint)

    def _unknown_member(self, node: ast.Attribute, attr: str):
        close = difflib.get_close_matches(attr, ["shape", "dtype", "ndim", "size", "dim", "numel", "is_contiguous",
                                                 "stride"], n=1)
        hint = (f"did you mean `.{close[0]}`? " if close else "") + "tensors offer " + ", ".join(
            f"`.{m}`" for m in TENSOR_MEMBERS)
        self.fail(node, f"unsupported attribute `.{attr}`", hint, at_end=len(attr))

    def _Subscript(self, node: ast.Subscript, env, dynamic_ok) -> Node:
        seq = self.present(self.value(node.value, env), node.value)
        col = self.src.offset(node)
        kind = seq.ty.kind
        if kind == "tensor":
            text = _operand(self.code(node.value))
            self.fail(node, f"indexing the tensor `{text}` would read its data",
                      f"sizes come from `{text}.shape[i]`")
        if kind not in ("sizes", "tensors"):
            self.fail(node, f"`{self.code(node.value)}` is {seq.ty.describe()} and cannot be indexed",
                      "index a shape (`x.shape[0]`), an int[] argument or a Tensor[] argument")
        if isinstance(node.slice, ast.Slice):
            if kind == "tensors":
                text = _operand(self.code(node.value))
                self.fail(node.slice, f"slicing the tensor list `{text}` is not supported",
                          f"index one tensor, e.g. `{text}[0]`")
            if node.slice.step is not None:
                self.fail(node.slice.step, "slices with a step are not supported", "use `[start:stop]`")
            lower = None if node.slice.lower is None else self.integer(
                self.value(node.slice.lower, env), node.slice.lower, "a slice bound")
            upper = None if node.slice.upper is None else self.integer(
                self.value(node.slice.upper, env), node.slice.upper, "a slice bound")
            return Slice(SIZES, col, seq=seq, lower=lower, upper=upper)
        index = self.integer(self.value(node.slice, env), node.slice, "an index")
        if kind == "sizes":
            if isinstance(seq, TensorAttr) and seq.attr == "shape":
                return SizeAt(INT, col, obj=seq.obj, index=index)
            return Index(INT, col, seq=seq, index=index)
        if seq.ty.elem_optional:
            if self.key(node) in env:
                return Index(Ty("tensor"), col, seq=seq, index=index, deref=True)
            return Index(Ty("tensor", optional=True), col, seq=seq, index=index)
        return Index(Ty("tensor"), col, seq=seq, index=index)

    def _List(self, node: ast.List | ast.Tuple, env, dynamic_ok) -> Node:
        col = self.src.offset(node)
        parts: list[Node] = []
        items: list[Node] = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                if items:
                    parts.append(ListLit(SIZES, self.src.offset(element), items=tuple(items)))
                    items = []
                parts.append(self.sizes(self.value(element.value, env, dynamic_ok), element.value,
                                        "a starred list element"))
            else:
                items.append(self.integer(self.value(element, env, dynamic_ok), element, "a list element"))
        if not parts:
            return ListLit(SIZES, col, items=tuple(items))
        if items:
            parts.append(ListLit(SIZES, col, items=tuple(items)))
        return parts[0] if len(parts) == 1 else Concat(SIZES, col, parts=tuple(parts))

    _Tuple = _List

    def _BinOp(self, node: ast.BinOp, env, dynamic_ok) -> Node:
        if isinstance(node.op, ast.Div):
            self.fail(node, "`/` is true division and gives a float; sizes are ints",
                      "use `//` for integer (floor) division")
        op = _BINARY.get(type(node.op))
        if op is None:
            self.fail(node, f"unsupported operator in `{self.code(node)}`",
                      "sizes support `+ - * // %`; lists support `+` (concatenate) and `* n` (repeat)")
        left = self.present(self.value(node.left, env, dynamic_ok), node.left)
        right = self.present(self.value(node.right, env, dynamic_ok), node.right)
        col = self.src.offset(node)
        kinds = (left.ty.kind, right.ty.kind)
        if op == "+" and kinds == ("sizes", "sizes"):
            parts = [*(left.parts if isinstance(left, Concat) else (left,)),
                     *(right.parts if isinstance(right, Concat) else (right,))]
            return Concat(SIZES, col, parts=tuple(parts))
        if op == "*" and "sizes" in kinds:
            seq, count, count_node = (left, right, node.right) if kinds[0] == "sizes" else (right, left, node.left)
            self._no_dynamic(count, count_node, "a repetition count")
            return Repeat(SIZES, col, seq=seq, count=self.integer(count, count_node, "a repetition count"))
        if "sizes" in kinds:
            other, other_node = (right, node.right) if kinds[0] == "sizes" else (left, node.left)
            hint = ("to append a size write `shape + [n]`" if op == "+" and other.ty.kind == "int"
                    else "lists support `+` (concatenate two lists) and `* n` (repeat)")
            self.fail(node, f"cannot apply `{op}` to a list of sizes and {other.ty.describe()} "
                      f"(`{self.code(other_node)}`)", hint)
        return BinOp(INT, col, op=op, left=self.integer(left, node.left), right=self.integer(right, node.right))

    def _UnaryOp(self, node: ast.UnaryOp, env, dynamic_ok) -> Node:
        col = self.src.offset(node)
        if isinstance(node.op, ast.Not):
            return Not(BOOL, col, operand=self.boolean(self.value(node.operand, env), node.operand))
        if isinstance(node.op, ast.Invert):
            self.fail(node, "unsupported operator `~`", "sizes support `+ - * // %`")
        operand = self.integer(self.value(node.operand, env, dynamic_ok), node.operand)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(operand, Const):
            return Const(INT, col, value=-operand.value)
        return Neg(INT, col, operand=operand)

    def _Compare(self, node: ast.Compare, env, dynamic_ok) -> Node:
        col = self.src.offset(node)
        if len(node.ops) > 1:
            self.fail(node, "chained comparisons are not supported", "combine two comparisons with `and`")
        op, right_node = node.ops[0], node.comparators[0]
        if isinstance(op, (ast.Is, ast.IsNot)):
            if not (isinstance(right_node, ast.Constant) and right_node.value is None):
                self.fail(right_node, "`is` / `is not` only compare with None", "use `==` to compare values")
            operand = self.value(node.left, env)
            if not (operand.ty.optional or getattr(operand, "deref", False)):  # deref: known present here
                self.fail(node.left, f"`{self.code(node.left)}` is {operand.ty.describe()} and is never None",
                          "only optional arguments (`Tensor?`, `int?`, `ScalarType?`…) can be None")
            return IsNone(BOOL, col, operand=operand, negated=isinstance(op, ast.IsNot))
        if type(op) not in _COMPARE:
            self.fail(node, "unsupported comparison", "use `== != < <= > >=`, or `is None` / `is not None`")
        symbol = _COMPARE[type(op)]
        left = self.present(self.value(node.left, env), node.left)
        right = self.present(self.value(right_node, env), right_node)
        kinds = {left.ty.kind, right.ty.kind}
        if kinds <= {"int", "float"}:
            return Compare(BOOL, col, op=symbol, left=left, right=right)
        if kinds == {"bool"} and symbol in ("==", "!=") and isinstance(right, Const) != isinstance(left, Const):
            # `flag == True` is `flag` (and ruff's E712 refuses the long form in generated code).
            variable, literal = (left, right) if isinstance(right, Const) else (right, left)
            return variable if (symbol == "==") == literal.value else Not(BOOL, col, operand=variable)
        if len(kinds) == 1 and kinds & {"sizes", "dtype", "str", "bool"}:
            if symbol not in ("==", "!=") and kinds != {"bool"}:
                plural = {"sizes": "lists of sizes", "dtype": "dtypes", "str": "strings"}[left.ty.kind]
                self.fail(node, f"`{symbol}` does not order {plural}", "use `==` or `!=`")
            return Compare(BOOL, col, op=symbol, left=left, right=right)
        if kinds == {"tensor", "dtype"}:
            return Compare(BOOL, col, op=symbol, left=self.dtype(left, node.left), right=self.dtype(right, right_node))
        if kinds == {"tensor"}:
            left_text, right_text = _operand(self.code(node.left)), _operand(self.code(right_node))
            self.fail(node, "cannot compare two tensors (that would compare their values)",
                      f"compare their metadata: `{left_text}.dtype == {right_text}.dtype` or "
                      f"`{left_text}.shape == {right_text}.shape`")
        self.fail(node, f"cannot compare {left.ty.describe()} (`{self.code(node.left)}`) with "
                  f"{right.ty.describe()} (`{self.code(right_node)}`)",
                  "compare sizes with sizes, dtypes with dtypes (`x.dtype == float16`), strings with strings")

    def _BoolOp(self, node: ast.BoolOp, env, dynamic_ok) -> Node:
        col = self.src.offset(node)
        is_and = isinstance(node.op, ast.And)
        first = self.value(node.values[0], env)
        if not is_and and first.ty.kind == "dtype" and first.ty.optional:
            return self._dtype_or(node, env)
        values, scope = [], env
        for value_node in node.values:
            values.append(self.boolean(self.value(value_node, scope), value_node))
            when_true, when_false = self.facts(value_node)
            scope = scope | (when_true if is_and else when_false)
        return BoolOp(BOOL, col, op="and" if is_and else "or", values=tuple(values))

    def _dtype_or(self, node: ast.BoolOp, env) -> Node:
        """`dtype or x.dtype`: an optional ScalarType argument with a fallback."""
        *optionals, last = node.values
        result = self.dtype(self.value(last, env), last, "the fallback of `or`")
        for optional_node in reversed(optionals):
            optional = self.value(optional_node, env)
            if not (optional.ty.kind == "dtype" and optional.ty.optional):
                self.fail(optional_node, f"`{self.code(optional_node)}` is {optional.ty.describe()}; "
                          "`a or b` on dtypes needs an optional ScalarType argument on the left",
                          "write `dtype or x.dtype`")
            result = DtypeFallback(DTYPE, self.src.offset(node), optional=optional, fallback=result)
        return result

    def _IfExp(self, node: ast.IfExp, env, dynamic_ok) -> Node:
        col = self.src.offset(node)
        cond = self.boolean(self.value(node.test, env), node.test)
        when_true, when_false = self.facts(node.test)
        then = self.present(self.value(node.body, env | when_true), node.body)
        orelse = self.present(self.value(node.orelse, env | when_false), node.orelse)
        kinds = {then.ty.kind, orelse.ty.kind}
        if kinds == {"tensor", "dtype"}:
            then, orelse = self.dtype(then, node.body), self.dtype(orelse, node.orelse)
        elif len(kinds) != 1 or kinds & {"none", "float"}:
            self.fail(node, f"the branches of `if ... else` differ: {then.ty.describe()} "
                      f"(`{self.code(node.body)}`) and {orelse.ty.describe()} (`{self.code(node.orelse)}`)",
                      "both branches must be sizes, lists of sizes, dtypes or bools")
        # `dtype if dtype is not None else x.dtype` is the fallback spelled out: print it one way.
        if isinstance(cond, IsNone) and isinstance(cond.operand, Name) and then.ty.kind == "dtype":
            present, absent = (then, orelse) if cond.negated else (orelse, then)
            if isinstance(present, Name) and present.name == cond.operand.name:
                return DtypeFallback(DTYPE, col, optional=cond.operand, fallback=absent)
        return IfExp(then.ty, col, cond=cond, then=then, orelse=orelse)

    def facts(self, node: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
        """Expressions known not to be None when `node` is true, and when it is false."""
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            right = node.comparators[0]
            if isinstance(right, ast.Constant) and right.value is None:
                key = frozenset({self.key(node.left)})
                return (key, frozenset()) if isinstance(node.ops[0], ast.IsNot) else (frozenset(), key)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            when_true, when_false = self.facts(node.operand)
            return when_false, when_true
        if isinstance(node, ast.BoolOp):
            parts = [self.facts(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return frozenset().union(*(t for t, _ in parts)), frozenset()
            return frozenset(), frozenset().union(*(f for _, f in parts))
        return frozenset(), frozenset()

    # -- calls ---------------------------------------------------------------------------------

    def _Call(self, node: ast.Call, env, dynamic_ok) -> Node:
        func = node.func
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.fail(arg, "`*` unpacking in a call is not supported", "pass the arguments one by one")
        if isinstance(func, ast.Attribute):
            return self._method(node, func, env)
        if not isinstance(func, ast.Name):
            self.fail(node, f"cannot call `{self.code(func)}`", _LANGUAGE_HINT)
        name = func.id
        if name == "dynamic":
            return self._dynamic(node, node.args, node.keywords, dynamic_ok)
        if name == "reduce":
            return self._reduce(node, env)
        if name not in FUNCTIONS:
            close = difflib.get_close_matches(name, FUNCTIONS, n=1)
            hint = (f"did you mean `{close[0]}`? " if close else "") + "the functions are " + ", ".join(FUNCTIONS)
            self.fail(func, f"unknown function `{name}`", hint)
        if node.keywords:
            self.fail(node.keywords[0].value, f"`{name}` takes no keyword arguments",
                      f"e.g. `{_function_example(name)}`")
        return getattr(self, "_call_" + name)(node, node.args, env)

    def _call_len(self, node: ast.Call, args: list, env) -> Node:
        self._arity(node, "len", args, 1, 1)
        seq = self.present(self.value(args[0], env), args[0])
        if seq.ty.kind == "tensor":
            self.fail(args[0], f"`len()` needs a list, but `{self.code(args[0])}` is a tensor",
                      f"use `{self.code(args[0])}.dim()` for its number of dimensions")
        if seq.ty.kind not in ("sizes", "tensors"):
            self.fail(args[0], f"`len()` needs a list, but `{self.code(args[0])}` is {seq.ty.describe()}",
                      "`len()` takes a Tensor[] or int[] argument, or a list of sizes")
        col = self.src.offset(node)
        if isinstance(seq, TensorAttr):
            return TensorAttr(INT, col, obj=seq.obj, attr="dim")
        return Len(INT, col, seq=seq)

    def _call_broadcast(self, node: ast.Call, args: list, env) -> Node:
        self._arity(node, "broadcast", args, 1, None)
        values = [self._shape_of(a, env, "an argument of `broadcast`") for a in args]
        return Call(SIZES, self.src.offset(node), function="broadcast", args=tuple(values))

    def _call_promote(self, node: ast.Call, args: list, env) -> Node:
        self._arity(node, "promote", args, 2, None)
        values = [self.dtype(self.value(a, env), a, "an argument of `promote`") for a in args]
        return Call(DTYPE, self.src.offset(node), function="promote", args=tuple(values))

    def _call_max(self, node: ast.Call, args: list, env, name: str = "max") -> Node:
        self._arity(node, name, args, 2, None)
        values = [self.integer(self.value(a, env), a, f"an argument of `{name}`") for a in args]
        return Call(INT, self.src.offset(node), function=name, args=tuple(values))

    def _call_min(self, node: ast.Call, args: list, env) -> Node:
        return self._call_max(node, args, env, "min")

    def _call_wrap_dim(self, node: ast.Call, args: list, env) -> Node:
        """`wrap_dim(dim, rank)`: rank an int, or a tensor / list of sizes whose rank it is."""
        self._arity(node, "wrap_dim", args, 2, 2)
        dim = self.integer(self.value(args[0], env), args[0], "the dim of `wrap_dim`")
        return WrapDim(INT, self.src.offset(node), dim=dim, rank=self._rank(args[1], env))

    def _rank(self, node: ast.AST, env) -> Node:
        value = self.present(self.value(node, env), node)
        col = self.src.offset(node)
        if value.ty.kind == "tensor":
            return TensorAttr(INT, col, obj=value, attr="dim")
        if value.ty.kind == "sizes":
            return TensorAttr(INT, col, obj=value.obj, attr="dim") if isinstance(value, TensorAttr) else \
                Len(INT, col, seq=value)
        return self.integer(value, node, "a rank")

    def _call_replace_size(self, node: ast.Call, args: list, env) -> Node:
        return self._size_edit(node, args, env, "replace")

    def _call_insert_size(self, node: ast.Call, args: list, env) -> Node:
        return self._size_edit(node, args, env, "insert")

    def _call_remove_size(self, node: ast.Call, args: list, env) -> Node:
        return self._size_edit(node, args, env, "remove")

    def _size_edit(self, node: ast.Call, args: list, env, edit: str) -> Node:
        name = f"{edit}_size"
        count = 2 if edit == "remove" else 3
        self._arity(node, name, args, count, count)
        shape = self._shape_of(args[0], env, f"the shape of `{name}`")
        dim = self.integer(self.value(args[1], env), args[1], f"the dim of `{name}`")
        size = None if edit == "remove" else self.integer(self.value(args[2], env), args[2], f"the size of `{name}`")
        return SizeEdit(SIZES, self.src.offset(node), edit=edit, shape=shape, dim=dim, size=size)

    def _shape_of(self, node: ast.AST, env, what: str) -> Node:
        """A list of sizes, or a tensor standing for its shape."""
        value = self.present(self.value(node, env), node)
        if value.ty.kind == "tensor":
            value = TensorAttr(SIZES, value.col, obj=value, attr="shape")
        return self.sizes(value, node, what)

    def _call_from_code(self, node: ast.Call, args: list, env) -> Node:
        """`from_code(dst_type)`: the dtype an int code stands for, by the spec's `dtype_codes:` table."""
        self._arity(node, "from_code", args, 1, 1)
        if not self.scope.dtype_codes:
            self.fail(node, "`from_code` needs the spec's `dtype_codes:` table, and the spec has none",
                      "add `dtype_codes: {1: int8, 5: float16, ...}` at the top of the spec (docs/spec.md)")
        code = self.integer(self.value(args[0], env), args[0], "a dtype code")
        if isinstance(code, Const) and code.value not in dict(self.scope.dtype_codes):
            self.fail(args[0], f"dtype code {code.value} is not in the spec's `dtype_codes:`",
                      "codes: " + ", ".join(str(number) for number, _ in self.scope.dtype_codes))
        return FromCode(DTYPE, self.src.offset(node), code=code, table=self.scope.dtype_codes)

    def _reduce(self, node: ast.Call, env) -> Node:
        """`reduce(shape, dims, keepdim=False)`: the sizes a torch reduction over `dims` leaves."""
        args = list(node.args)
        for keyword in node.keywords:
            if keyword.arg != "keepdim":
                where = keyword.value if keyword.arg is None else keyword
                close = difflib.get_close_matches(keyword.arg or "", ["keepdim"], n=1)
                self.fail(where, f"`reduce` has no argument `{keyword.arg}`",
                          (f"did you mean `{close[0]}=`? " if close else "")
                          + "it takes a shape, dims and `keepdim`, e.g. `reduce(x.shape, dims, keepdim=True)`")
            if len(node.args) == 3:
                self.fail(keyword, "`keepdim` is given twice", "drop `keepdim=` or the third argument")
            args.append(keyword.value)
        self._arity(node, "reduce", args, 2, 3)
        shape = self.present(self.value(args[0], env), args[0])
        if shape.ty.kind == "tensor":
            shape = TensorAttr(SIZES, shape.col, obj=shape, attr="shape")
        shape = self.sizes(shape, args[0], "the shape reduced by `reduce`")
        dims = self.value(args[1], env)
        if dims.ty.kind != "sizes":
            text = self.code(args[1])
            hint = f"one dimension is a list too: `[{text}]`" if dims.ty.kind == "int" else \
                "pass an int[] argument (`dims`) or a list of dimensions (`[0, -1]`)"
            self.fail(args[1], f"the dims of `reduce` must be a list of ints, got {dims.ty.describe()}: `{text}`", hint)
        if isinstance(dims, ListLit):
            self._distinct_dims(dims, args[1])
        if len(args) == 2:
            keepdim = Const(BOOL, self.src.offset(node), value=False)
        else:
            keepdim = self.present(self.value(args[2], env), args[2])
            if keepdim.ty.kind != "bool":
                self.fail(args[2], f"`keepdim` of `reduce` must be a bool, got {keepdim.ty.describe()}: "
                          f"`{self.code(args[2])}`", "pass a bool argument, `True`/`False` or a comparison")
        return Reduce(SIZES, self.src.offset(node), shape=shape, dims=dims, keepdim=keepdim)

    def _distinct_dims(self, dims: ListLit, node: ast.List | ast.Tuple) -> None:
        seen: set[int] = set()
        for item, element in zip(dims.items, node.elts):
            if isinstance(item, Const):
                if item.value in seen:
                    self.fail(element, f"dim {item.value} appears twice in the dims of `reduce`",
                              "torch refuses a repeated dim; list each reduced dimension once")
                seen.add(item.value)

    def _method(self, node: ast.Call, func: ast.Attribute, env) -> Node:
        method = func.attr
        self._no_torch(func)
        if method not in ("size", "dim", "numel", "is_contiguous", "stride"):
            if method in ("shape", "dtype", "ndim"):
                self.fail(node, f"`.{method}` is not a method: drop the parentheses", f"write `{self.code(func)}`")
            self._unknown_member(func, method)
        if node.keywords:
            self.fail(node.keywords[0].value, f"`.{method}()` takes no keyword arguments",
                      f"e.g. `{_function_example(method)}`")
        obj = self.tensor(self.value(func.value, env), func.value, method + "()")
        col = self.src.offset(node)
        if method == "size":
            self._arity(node, ".size", node.args, 0, 1)
            if not node.args:
                return TensorAttr(SIZES, col, obj=obj, attr="shape")
            index = self.integer(self.value(node.args[0], env), node.args[0], "a dimension")
            return SizeAt(INT, col, obj=obj, index=index)
        if method == "stride":
            self._arity(node, ".stride", node.args, 1, 1)
            index = self.integer(self.value(node.args[0], env), node.args[0], "a dimension")
            return StrideAt(INT, col, obj=obj, index=index)
        self._arity(node, "." + method, node.args, 0, 0)
        return TensorAttr(BOOL if method == "is_contiguous" else INT, col, obj=obj, attr=method)

    def _arity(self, node: ast.Call, name: str, args: list, least: int, most: int | None) -> None:
        count = len(args)
        if least <= count and (most is None or count <= most):
            return
        if most is None:
            expected = f"at least {least} argument{'s' if least != 1 else ''}"
        elif least == most:
            expected = f"{least} argument{'s' if least != 1 else ''}" if least else "no arguments"
        else:
            expected = f"{least} or {most} arguments" if most == least + 1 else f"{least} to {most} arguments"
        example = _function_example(name.lstrip(".")) if not name.startswith(".") else {
            ".size": "x.size(0)", ".dim": "x.dim()", ".numel": "x.numel()", ".is_contiguous": "x.is_contiguous()",
            ".stride": "x.stride(1)"}[name]
        self.fail(node, f"`{name}()` takes {expected}, got {count}", f"e.g. `{example}`")

    def _dynamic(self, node: ast.AST, args: list, keywords: list, dynamic_ok: bool) -> Node:
        col = self.src.offset(node)
        if not dynamic_ok:
            self.fail(node, "`dynamic` cannot be used here",
                      "a data-dependent size can only be an element of the shape list (possibly in "
                      f"arithmetic), e.g. `{_EXAMPLE_DYNAMIC}`")
        if args:
            self.fail(args[0], "`dynamic` takes only keyword arguments `min=` and `max=`",
                      f"e.g. `{_EXAMPLE_DYNAMIC}`")
        bounds: dict[str, Node] = {}
        for keyword in keywords:
            if keyword.arg not in ("min", "max"):
                close = difflib.get_close_matches(keyword.arg or "", ["min", "max"], n=1)
                where = keyword.value if keyword.arg is None else keyword
                self.fail(where, f"`dynamic` has no argument `{keyword.arg}`",
                          (f"did you mean `{close[0]}=`? " if close else "") + "it takes `min=` and `max=`")
            value = self.value(keyword.value, frozenset())
            bounds[keyword.arg] = self.integer(value, keyword.value, f"the `{keyword.arg}=` bound")
        lower, upper = bounds.get("min"), bounds.get("max")
        for key, bound in bounds.items():
            if isinstance(bound, Const) and bound.value < 0:
                self.fail(_keyword(keywords, key).value, f"`{key}={bound.value}`: a size is never negative",
                          "bounds are >= 0")
        if isinstance(lower, Const) and isinstance(upper, Const) and upper.value < lower.value:
            self.fail(_keyword(keywords, "max").value, f"`max={upper.value}` is below `min={lower.value}`",
                      "`min=` is the smallest possible size, `max=` the largest")
        return Dynamic(INT, col, lower=lower, upper=upper)

    def _no_dynamic(self, value: Node, node: ast.AST, where: str) -> None:
        for inner in value.walk():
            if isinstance(inner, Dynamic):
                self.fail(node, f"`dynamic` cannot be used in {where}",
                          "a data-dependent size can only be an element of the shape list (possibly in "
                          f"arithmetic), e.g. `{_EXAMPLE_DYNAMIC}`")


def _operand(text: str) -> str:
    """`text` ready to take `.shape`, `[0]`… in a hint: parenthesised unless it is a simple chain."""
    return text if re.fullmatch(r"[\w.]+(\[[^\]]*\]|\([^()]*\))*(\.\w+)*", text) else f"({text})"


def _keyword(keywords: list[ast.keyword], name: str) -> ast.keyword:
    return next(k for k in keywords if k.arg == name)


def _function_example(name: str) -> str:
    return {
        "broadcast": "broadcast(a.shape, b.shape)", "dynamic": _EXAMPLE_DYNAMIC, "len": "len(xs)",
        "max": "max(a.shape[0], b.shape[0])", "min": "min(a.shape[0], b.shape[0])", "promote": "promote(x, y)",
        "reduce": "reduce(x.shape, dims, keepdim)", "size": "x.size(0)", "dim": "x.dim()", "numel": "x.numel()",
        "wrap_dim": "wrap_dim(dim, x)", "replace_size": "replace_size(x.shape, dim, x.shape[dim] // 2)",
        "insert_size": "insert_size(x.shape, 1, n)", "remove_size": "remove_size(x.shape, dim)",
        "from_code": "from_code(dst_type)", "is_contiguous": "x.is_contiguous()",
    }[name]
