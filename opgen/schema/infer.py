"""The schema `torch.library.custom_op` infers from a function's type hints (torch/_library/infer_schema.py),
worked out from the annotations' source text, so an op registered without `schema=` is checked by the same
contract as any other op. The type table is `opgen.schema.types.TYPES` (its `python` -> `inferred` columns).
"""

from __future__ import annotations

import re

from .errors import SchemaError
from .model import Schema
from .types import TYPES

# annotation text -> schema type, as infer_schema reads it (`int` is SymInt, `Number` is Scalar, ...)
_SCALARS = {row.python: row.inferred for row in reversed(TYPES.values()) if row.python and row.inferred}
_SCALARS.update({"Tensor": "Tensor", "torch.types.Number": "Scalar", "numbers.Number": "Scalar",
                 "torch.SymInt": "SymInt", "torch.SymFloat": "float", "torch.SymBool": "bool", "Any": None})
_LIST_ELEMENTS = {"Tensor", "Tensor?", "SymInt", "float", "bool"}
_RETURNS = {"Tensor", "Tensor[]", "SymInt", "float", "bool", "Scalar"}
_OPTIONAL = re.compile(r"^(?:typing\.)?Optional\[(.*)\]$")
_UNION_NONE = re.compile(r"^(.*?)\s*\|\s*None$|^None\s*\|\s*(.*)$")
_LIST = re.compile(r"^(?:typing\.|collections\.abc\.)?(?:list|List|Sequence)\[(.*)\]$")
# c10's device type names (c10/core/DeviceType.cpp), and `npu`: torch_npu's renamed PrivateUse1, which every
# package writing it imports
_DEVICE = re.compile(r"^(?:cpu|cuda|hip|mps|xpu|mkldnn|opengl|opencl|ideep|vulkan|ve|fpga|maia|xla|lazy|meta|hpu|mtia"
                     r"|ipu|privateuseone|npu)(?::\d+)?$")
_TUPLE = re.compile(r"^(?:typing\.)?(?:tuple|Tuple)\[(.*)\]$")


def annotation_type(text: str) -> str | None:
    """The schema type infer_schema makes of an annotation's source text; None when it refuses it (or we
    cannot read it)."""
    text = text.strip().strip("'\"").strip()
    optional = _OPTIONAL.match(text) or _UNION_NONE.match(text)
    if optional:
        inner = annotation_type(next(g for g in optional.groups() if g))
        return inner + "?" if inner and not inner.endswith("?") else None
    listed = _LIST.match(text)
    if listed:
        inner = annotation_type(listed.group(1))
        return inner + "[]" if inner in _LIST_ELEMENTS else None
    return _SCALARS.get(text)


def _return_types(text: str | None) -> list[str] | None:
    if text is None:
        return None
    text = text.strip().strip("'\"").strip()
    if text == "None":
        return []
    tupled = _TUPLE.match(text)
    parts = [p for p in _split(tupled.group(1))] if tupled else [text]
    types = [annotation_type(p) for p in parts]
    return types if all(t in _RETURNS for t in types) else None


def _split(text: str) -> list[str]:
    """Top-level comma-separated parts of a subscript."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _default(value, schema_type: str) -> str | None:
    """The schema text torch writes for a Python default (`str(value)` for None, ints, floats and bools, a
    quoted string or device, a dtype's name), or "" where opgen's parser reads it otherwise than torch's
    (`bool b=2`, `Tensor? t=0`: torch takes them) or the value is unknown (a call, a name lint cannot
    read): the argument is then kept without its default. None: torch refuses the op (a tuple or list
    default, any default but None for a Tensor, anything for a list, a number for a device, a dtype for
    anything but a dtype). `Tensor bias=None` is torch's own spelling (an undefined Tensor), kept."""
    optional = schema_type.endswith("?")
    base = schema_type.rstrip("?")
    dtype = isinstance(value, str) and value.startswith("torch.") and value[len("torch."):].isidentifier()
    if isinstance(value, (tuple, list, dict, set)) or (base.endswith("]") and not optional):
        return None
    if base == "Tensor" and not optional:
        return "None" if value is None else None
    if dtype:
        return value[len("torch."):] if base == "ScalarType" else None
    if base == "Device" and not (optional and value is None) and not _device_text(value):
        return None
    if value is None or isinstance(value, (bool, int, float)):
        text = str(value)
    elif isinstance(value, str) and '"' not in value and "\\" not in value:
        text = '"' + value + '"'
    else:
        return ""
    return text if _opgen_reads(schema_type, text) else ""


def _device_text(value) -> bool:
    """A string torch's parser takes as a Device default: a device type with an optional index."""
    return isinstance(value, str) and bool(_DEVICE.match(value))


def _opgen_reads(schema_type: str, default: str) -> bool:
    from .parser import parse_schema

    try:
        parse_schema(f"f({schema_type} a={default}) -> ()")
    except SchemaError:
        return False
    return True


def infer_schema(name: str, params, returns: str | None, mutates_args, tags=()) -> Schema | None:
    """The schema `custom_op(name, mutates_args=..., tags=...)` infers for a function with `params` (objects
    with `name`, `kind` ("positional", "kwonly", "varargs", "varkw"), `annotation` (source text),
    `has_default`, `default`) and return annotation `returns`; None when torch would refuse it or the hints
    are unreadable. `mutates_args`: the names it writes, or "unknown" (every tensor argument is written).
    With `torch.Tag.inplace` torch returns the first argument (`-> Tensor(a!)`), with `torch.Tag.out` the
    written keyword-only arguments; where the function breaks the tag's contract the returns stay as the
    hints say, so the contract check reports what torch refuses."""
    if not (mutates_args == "unknown" or isinstance(mutates_args, (tuple, list))):
        return None
    if mutates_args != "unknown" and not set(mutates_args) <= {p.name for p in params}:
        return None  # torch refuses a name that is not a parameter
    returned = _return_types(returns)
    if returned is None:
        return None
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    parts, star = [], False
    writes: list[tuple[object, str]] = []  # (param, its schema type) of each written tensor
    for param in params:
        if param.kind not in ("positional", "kwonly") or not param.annotation:
            return None
        schema_type = plain_type = annotation_type(param.annotation)
        if schema_type is None:
            return None
        written = mutates_args == "unknown" or param.name in mutates_args
        if written and schema_type.startswith("Tensor"):
            letter = next(letters, None)
            if letter is None:
                return None
            schema_type = f"Tensor({letter}!)" + schema_type[len("Tensor"):]
            writes.append((param, schema_type))
        if param.kind == "kwonly" and not star:
            parts.append("*")
            star = True
        text = f"{schema_type} {param.name}"
        if param.has_default:
            default = _default(param.default, plain_type)
            if default is None:
                return None
            if default:
                text += f"={default}"
        parts.append(text)
    returned = _tagged_returns(returned, params, writes, mutates_args, tags or ())
    returns_text = returned[0] if len(returned) == 1 else f"({', '.join(returned)})"
    from .parser import parse_schema

    try:
        return parse_schema(f"{name}({', '.join(parts)}) -> {returns_text}")
    except SchemaError:
        return None


def _tagged_returns(returned: list[str], params, written, mutates_args, tags) -> list[str]:
    """The returns torch infers under `torch.Tag.inplace` / `torch.Tag.out` (torch/_library/infer_schema.py):
    the first positional argument's alias, or each written keyword-only tensor's, in order."""
    if ("inplace" in tags) == ("out" in tags):  # neither, or both (torch refuses the pair)
        return returned
    if "inplace" in tags:
        first = next((p for p in params if p.kind == "positional"), None)
        only_first = first is not None and mutates_args != "unknown" and set(mutates_args) == {first.name}
        if only_first and returned == ["Tensor"] and written and written[0][1] == "Tensor(a!)":
            return ["Tensor(a!)"]
        return returned
    outs = [schema_type for param, schema_type in written if param.kind == "kwonly" and "[" not in schema_type
            and not schema_type.endswith("?")]
    if outs and len(outs) == len(written) and returned == ["Tensor"] * len(outs):
        return outs
    return returned
