"""A torch-free model of an operator schema.

One small frozen dataclass per concept, each printing itself in opgen's canonical form
(a form `torch._C.parse_schema` re-parses to the same structure; torch's own `str(schema)`
does not always do that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Enum words the schema grammar accepts as defaults, with the integer torch stores for them.
SCALAR_TYPE_WORDS = {
    "uint8": 0, "int8": 1, "int16": 2, "short": 2, "int": 3, "int32": 3, "long": 4, "int64": 4,
    "half": 5, "float16": 5, "float": 6, "float32": 6, "double": 7, "float64": 7,
    "complex32": 8, "complex64": 9, "cfloat": 9, "complex128": 10, "cdouble": 10,
    "bool": 11, "bfloat16": 15,
}
ENUM_WORDS = {
    "ScalarType": SCALAR_TYPE_WORDS,
    "Layout": {"strided": 0},
    "MemoryFormat": {"contiguous_format": 0},
    "int": {"Mean": 1},
}


@dataclass(frozen=True, slots=True)
class Alias:
    """An alias annotation: `(a)`, `(a!)`, `(a|b)`, `(a -> *)`, `(*)`."""

    before: tuple[str, ...]
    after: tuple[str, ...] = ()
    is_write: bool = False

    def __str__(self) -> str:
        if self.is_write and not self.after and len(self.before) == 1 and self.before[0].startswith("$"):
            return "!"  # `Tensor!`: an anonymous set (torch numbers it $0, $1, ...; only `!` parses back)
        text = "|".join(self.before)
        if self.is_write:
            text += "!"
        if self.after:
            text += " -> " + "|".join(self.after)
        return f"({text})"


@dataclass(frozen=True, slots=True)
class BaseType:
    """A named type such as `Tensor`, `int`, `SymInt`, `ScalarType`, with an optional alias."""

    name: str
    alias: Alias | None = None

    def __str__(self) -> str:
        return self.name + (str(self.alias) if self.alias else "")


@dataclass(frozen=True, slots=True)
class OptionalType:
    elem: Type

    def __str__(self) -> str:
        return f"{self.elem}?"


@dataclass(frozen=True, slots=True)
class ListType:
    """`T[]` or a fixed-size `T[N]`; `alias` is the c10d-style `Tensor[](a!)` annotation."""

    elem: Type
    size: int | None = None
    alias: Alias | None = None

    def __str__(self) -> str:
        size = "" if self.size is None else str(self.size)
        return f"{self.elem}[{size}]" + (str(self.alias) if self.alias else "")


@dataclass(frozen=True, slots=True)
class DictType:
    key: Type
    value: Type

    def __str__(self) -> str:
        return f"Dict({self.key}, {self.value})"


@dataclass(frozen=True, slots=True)
class TupleType:
    elems: tuple[Type, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(map(str, self.elems)) + ")"


Type = BaseType | OptionalType | ListType | DictType | TupleType


def type_alias(t: Type) -> Alias | None:
    """The alias annotation written anywhere on a type (outermost first)."""
    if isinstance(t, ListType) and t.alias:
        return t.alias
    if isinstance(t, (OptionalType, ListType)):
        return type_alias(t.elem)
    if isinstance(t, BaseType):
        return t.alias
    return None


def strip_alias(t: Type) -> Type:
    if isinstance(t, BaseType):
        return BaseType(t.name)
    if isinstance(t, OptionalType):
        return OptionalType(strip_alias(t.elem))
    if isinstance(t, ListType):
        return ListType(strip_alias(t.elem), t.size)
    if isinstance(t, TupleType):
        return TupleType(tuple(strip_alias(e) for e in t.elems))
    if isinstance(t, DictType):
        return DictType(strip_alias(t.key), strip_alias(t.value))
    return t


def base_name(t: Type) -> str:
    """The innermost named type: `Tensor` for `Tensor?[]`, `Dict` / `Tuple` for those."""
    if isinstance(t, (OptionalType, ListType)):
        return base_name(t.elem)
    if isinstance(t, DictType):
        return "Dict"
    if isinstance(t, TupleType):
        return "Tuple"
    return t.name


def is_tensor_like(t: Type) -> bool:
    """Tensor, Tensor?, Tensor[], Tensor?[] and Tensor[]?."""
    return base_name(t) == "Tensor" and not isinstance(t, (DictType, TupleType))


@dataclass(frozen=True, slots=True)
class EnumWord:
    """A bare word default such as `contiguous_format`, `long` or `Mean`."""

    word: str

    def __str__(self) -> str:
        return self.word


Default = None | bool | int | float | str | EnumWord | tuple


def format_default(value: Default) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if math.isfinite(value) and "e" not in text and "." not in text:
            text += ".0"
        return text
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, EnumWord):
        return value.word
    return "[" + ", ".join(format_default(v) for v in value) + "]"


# Escapes torch's string literals understand; other control characters go out as 3-digit octal.
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\a": "\\a", "\b": "\\b",
                   "\f": "\\f", "\v": "\\v"}


def _quote(value: str) -> str:
    if value.isprintable() and "\\" not in value and '"' not in value:
        return f'"{value}"'
    out = []
    for ch in value:
        escaped = _STRING_ESCAPES.get(ch)
        if escaped is None and (ch < " " or ch == "\x7f"):
            escaped = f"\\{ord(ch):03o}"
        out.append(escaped or ch)
    return '"' + "".join(out) + '"'


@dataclass(frozen=True, slots=True)
class Argument:
    type: Type
    name: str
    default: Default = None
    has_default: bool = False
    kwarg_only: bool = False

    @property
    def alias(self) -> Alias | None:
        return type_alias(self.type)

    @property
    def is_write(self) -> bool:
        alias = self.alias
        return bool(alias and alias.is_write)

    @property
    def is_tensor(self) -> bool:
        return is_tensor_like(self.type)

    def __str__(self) -> str:
        text = f"{self.type} {self.name}"
        if self.has_default:
            text += "=" + format_default(self.default)
        return text


@dataclass(frozen=True, slots=True)
class Return:
    type: Type
    name: str | None = None

    @property
    def alias(self) -> Alias | None:
        return type_alias(self.type)

    def __str__(self) -> str:
        return f"{self.type} {self.name}" if self.name else str(self.type)


@dataclass(frozen=True, slots=True)
class Schema:
    """`[ns::]name[.overload](arguments) -> returns`."""

    name: str
    arguments: tuple[Argument, ...]
    returns: tuple[Return, ...]
    overload: str = ""
    namespace: str | None = None
    # Derived, informational: the op returns one Python tuple (several returns, or one return of a
    # tuple type: `-> ((Tensor))` is one return of type `(Tensor)`, as torch reads it; `-> (Tensor)`
    # is `-> Tensor`). The printer goes by `returns` alone, so a `replace(returns=...)` stays right.
    returns_tuple: bool = field(default=False, compare=False)
    varargs: bool = False
    varret: bool = False
    spans: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}::{self.name}" if self.namespace else self.name

    @property
    def op_name(self) -> str:
        """`name.overload` as `Library.impl` and `register_fake` want it (no namespace)."""
        return f"{self.name}.{self.overload}" if self.overload else self.name

    @property
    def overload_or_default(self) -> str:
        return self.overload or "default"

    @property
    def return_names(self) -> tuple[str, ...]:
        """Each return's name; an unnamed one is `out<i>` (the name the spec and the generated code use)."""
        return tuple(ret.name or f"out{i}" for i, ret in enumerate(self.returns))

    @property
    def positional(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if not a.kwarg_only)

    @property
    def kwarg_only(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.kwarg_only)

    @property
    def mutated_args(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.is_write)

    @property
    def is_mutable(self) -> bool:
        return any(a.is_write for a in self.arguments)

    @property
    def out_args(self) -> tuple[Argument, ...]:
        """The written keyword-only arguments: the `out=` tensors of an out variant."""
        return tuple(a for a in self.arguments if a.kwarg_only and a.is_write)

    @property
    def kind(self) -> str:
        """What kind of op this is, as torchgen's `SchemaKind` decides: "inplace" (the name ends in one `_`),
        "scratch" or "out" (written keyword-only arguments; scratch when one is named `_scratch_*`),
        "mutable" (a written positional argument), else "functional"."""
        if self.name.endswith("_") and not self.name.endswith("__"):
            return "inplace"
        if any(a.name.startswith("_scratch_") for a in self.out_args):
            return "scratch"
        if self.out_args:
            return "out"
        return "mutable" if self.is_mutable else "functional"

    def argument(self, name: str) -> Argument | None:
        return next((a for a in self.arguments if a.name == name), None)

    def signature(self, with_namespace: bool = False) -> str:
        """The canonical schema text; `with_namespace=False` is what `Library.define` wants."""
        head = self.qualified_name if with_namespace else self.name
        if self.overload:
            head += "." + self.overload
        parts: list[str] = []
        star_written = False
        for arg in self.arguments:
            if arg.kwarg_only and not star_written:
                parts.append("*")
                star_written = True
            parts.append(str(arg))
        if self.varargs:
            parts.append("...")
        return f"{head}({', '.join(parts)}) -> {self.returns_text()}"

    def returns_text(self) -> str:
        if self.varret:
            return "..."
        if len(self.returns) != 1:
            return "(" + ", ".join(map(str, self.returns)) + ")"
        text = str(self.returns[0])
        # A return whose type starts with a tuple type (`(int, int)`, `(float)[]?`) needs the
        # return-list parentheses, or torch reads that tuple as the list of returns.
        return f"({text})" if text.startswith("(") else text

    def __str__(self) -> str:
        return self.signature(with_namespace=True)



_set_arg_type, _set_arg_name, _set_arg_default, _set_arg_has_default, _set_arg_kwarg_only = (
    Argument.__dict__[name].__set__ for name in ("type", "name", "default", "has_default", "kwarg_only"))
_new_object = object.__new__


def new_argument(type: Type, name: str, default: Default, has_default: bool, kwarg_only: bool) -> Argument:
    """`Argument(...)` at half the cost, for the parser's hot path: the slots are set through their
    descriptors instead of the frozen `__setattr__` by name. The object is identical."""
    arg = _new_object(Argument)
    _set_arg_type(arg, type)
    _set_arg_name(arg, name)
    _set_arg_default(arg, default)
    _set_arg_has_default(arg, has_default)
    _set_arg_kwarg_only(arg, kwarg_only)
    return arg


_SCHEMA_SETTERS = tuple(Schema.__dict__[name].__set__ for name in (
    "name", "arguments", "returns", "overload", "namespace", "returns_tuple", "varargs", "varret", "spans"))


def new_schema(name: str, arguments: tuple, returns: tuple, overload: str, namespace: str | None,
               returns_tuple: bool, varargs: bool, varret: bool, spans: dict) -> Schema:
    """`Schema(...)` the fast way (see `new_argument`)."""
    schema = _new_object(Schema)
    s_name, s_arguments, s_returns, s_overload, s_namespace, s_tuple, s_varargs, s_varret, s_spans = _SCHEMA_SETTERS
    s_name(schema, name)
    s_arguments(schema, arguments)
    s_returns(schema, returns)
    s_overload(schema, overload)
    s_namespace(schema, namespace)
    s_tuple(schema, returns_tuple)
    s_varargs(schema, varargs)
    s_varret(schema, varret)
    s_spans(schema, spans)
    return schema
