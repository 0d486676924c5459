"""torch as the oracle for opgen's schema model: both sides reduced to one comparable structure.

`torch_view(torch._C.parse_schema(text))` and `opgen_view(opgen_schema)` give plain tuples that
must be equal. Each side is normalised the way torch stores a schema: enum words become ints,
a scalar default of a sized list expands to a list, and an alias annotation inside a list
(`Tensor(a!)[]`) keeps its write flag but loses its sets (torch's own quirk).
"""

from __future__ import annotations

import os
from functools import lru_cache

from opgen.schema.model import (
    ENUM_WORDS,
    Alias,
    BaseType,
    DictType,
    EnumWord,
    ListType,
    OptionalType,
    Schema,
    TupleType,
    Type,
    base_name,
)

# opgen base type name -> what torch calls it (SymInt and SymBool are told apart by kind()).
_TORCH_BASE = {"Scalar": "number", "DeviceIndex": "int"}
_SYM_IN_TUPLE = {"SymInt": "int", "SymBool": "bool", "ScalarType": "int", "Layout": "int", "MemoryFormat": "int"}
_TORCH_KIND = {"SymIntType": "SymInt", "SymBoolType": "SymBool"}


def native_functions_path() -> str:
    import torchgen

    return os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")


@lru_cache(maxsize=1)
def native_schemas() -> tuple[str, ...]:
    """Every `func:` of the installed torch's native_functions.yaml, in file order."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(native_functions_path(), encoding="utf-8") as f:
        entries = yaml.load(f, Loader=loader)
    return tuple(e["func"] for e in entries if isinstance(e, dict) and "func" in e)


# -- torch side ---------------------------------------------------------------------------------
def torch_type(t) -> str:
    kind = t.kind()
    if kind == "ListType":
        return f"List[{torch_type(t.getElementType())}]"
    if kind == "OptionalType":
        return f"Optional[{torch_type(t.getElementType())}]"
    if kind in ("TupleType", "DictType"):
        inner = ", ".join(torch_type(c) for c in t.containedTypes())
        return f"{kind[:-4]}[{inner}]"
    return _TORCH_KIND.get(kind, str(t))


def torch_alias(info) -> tuple | None:
    if info is None:
        return None
    return (bool(info.is_write), frozenset(info.before_set), frozenset(info.after_set))


def torch_default(value):
    import torch

    if isinstance(value, torch.device):
        return ("device", str(value))
    if isinstance(value, (list, tuple)):
        return [torch_default(v) for v in value]
    return value


def torch_view(schema) -> tuple:
    """The comparable structure of a `torch._C.FunctionSchema`."""
    args = tuple(
        (a.name, torch_type(a.real_type), a.kwarg_only, a.N, _tagged(torch_default(a.default_value)),
         torch_alias(a.alias_info))
        for a in schema.arguments
    )
    rets = tuple((r.name or None, torch_type(r.real_type), torch_alias(r.alias_info)) for r in schema.returns)
    return (schema.name, schema.overload_name, args, rets)


# -- opgen side ---------------------------------------------------------------------------------
def opgen_type(t: Type, in_tuple: bool = False) -> str:
    """torch's `real_type` text for `t`; inside tuple and dict types torch keeps
    only the fake types (SymInt, ScalarType, Layout, MemoryFormat become int; SymBool becomes bool)."""
    if isinstance(t, OptionalType):
        return f"Optional[{opgen_type(t.elem, in_tuple)}]"
    if isinstance(t, ListType):
        return f"List[{opgen_type(t.elem, in_tuple)}]"
    if isinstance(t, DictType):
        return f"Dict[{opgen_type(t.key, True)}, {opgen_type(t.value, True)}]"
    if isinstance(t, TupleType):
        return "Tuple[" + ", ".join(opgen_type(e, True) for e in t.elems) + "]"
    assert isinstance(t, BaseType)
    if in_tuple and t.name in _SYM_IN_TUPLE:
        return _SYM_IN_TUPLE[t.name]
    return _TORCH_BASE.get(t.name, t.name)


def _alias_tuple(alias: Alias, keep_sets: bool) -> tuple:
    if not keep_sets:
        return (alias.is_write, frozenset(), frozenset())
    anonymous = alias.before and alias.before[0].startswith("$")  # `Tensor!`: torch reports no after-set
    after = alias.after or (() if anonymous else alias.before)
    return (alias.is_write, frozenset(alias.before), frozenset(after))


def opgen_alias(t: Type, top: bool = True) -> tuple | None:
    """What torch reports as an argument's alias_info for opgen type `t`."""
    if isinstance(t, OptionalType):
        return opgen_alias(t.elem, top)
    if isinstance(t, ListType):
        if t.alias is not None:
            return _alias_tuple(t.alias, top)
        return opgen_alias(t.elem, False)
    if isinstance(t, BaseType) and t.alias is not None:
        return _alias_tuple(t.alias, top)
    return None


def _list_size(t: Type) -> int | None:
    if isinstance(t, OptionalType):
        t = t.elem
    return t.size if isinstance(t, ListType) else None


def opgen_default(t: Type, value, has_default: bool):
    if not has_default:
        return None
    if isinstance(value, EnumWord):
        return ENUM_WORDS.get(base_name(t), ENUM_WORDS["int"])[value.word]  # int, SymInt, DeviceIndex: Mean
    if isinstance(value, tuple):
        return [_scalar_default(t, v) if not isinstance(v, EnumWord) else opgen_default(t, v, True) for v in value]
    if isinstance(t, ListType) and t.size is not None:
        return [_scalar_default(t, value)] * t.size  # torch expands only a non-optional sized list
    return _scalar_default(t, value)


def _scalar_default(t: Type, value):
    base = base_name(t)
    if base == "Device" and isinstance(value, str) and not isinstance(t, OptionalType):
        return ("device", value)  # torch keeps the string as it is for `Device?`
    if base == "float" and type(value) is int and not isinstance(t, OptionalType):
        return float(value)  # torch keeps the int as written for `float?`
    return value


def _tagged(value):
    """Values with their Python type, so `True` never equals `1` and `1` never equals `1.0`."""
    if isinstance(value, list):
        return ("list", tuple(_tagged(v) for v in value))
    return (type(value).__name__, value)


def opgen_view(schema: Schema) -> tuple:
    args = tuple(
        (a.name, opgen_type(a.type), a.kwarg_only, _list_size(a.type),
         _tagged(opgen_default(a.type, a.default, a.has_default)), opgen_alias(a.type))
        for a in schema.arguments
    )
    rets = tuple((r.name, opgen_type(r.type), opgen_alias(r.type)) for r in schema.returns)
    return (schema.qualified_name, schema.overload, args, rets)


def assert_agrees(text: str, schema: Schema | None = None) -> Schema:
    """opgen and torch read `text` the same way, and opgen's canonical text means the same to both."""
    import torch

    from opgen.schema import parse_schema

    schema = schema or parse_schema(text)
    canonical = str(schema)
    expected = torch_view(torch._C.parse_schema(text))
    mine = opgen_view(schema)
    assert mine == expected, f"opgen and torch disagree on {text!r}: {_difference(mine, expected)}"
    reparsed = torch_view(torch._C.parse_schema(canonical))
    assert reparsed == expected, f"canonical {canonical!r} of {text!r} drifts: {_difference(reparsed, expected)}"
    again = parse_schema(canonical)
    assert again == schema, f"opgen round trip of {text!r} changed: {canonical!r}"
    assert str(again) == canonical, f"canonical text is not a fixed point: {canonical!r} -> {again}"
    return schema


def _difference(mine: tuple, torch_side: tuple) -> str:
    """The first differing part of two views, for a readable failure."""
    labels = ("name", "overload", "arguments", "returns")
    for label, a, b in zip(labels, mine, torch_side):
        if a == b:
            continue
        if label in ("arguments", "returns") and len(a) == len(b):
            for x, y in zip(a, b):
                if x != y:
                    return f"{label}: opgen {x!r} vs torch {y!r}"
        return f"{label}: opgen {a!r} vs torch {b!r}"
    return "no difference"
