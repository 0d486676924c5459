"""The non-tensor arguments an OpApi kernel converts before `EXEC_NPU_CMD`, as op-plugin's kernels do.

`EXEC_NPU_CMD` turns each argument into its aclnn form with an overload of `ConvertType`
(op_plugin/utils/op_api_common_base.h): tensors, optional tensors, Scalars, int lists (optional too),
bool arrays, tensor lists and ScalarType; anything else goes through `T ConvertType(T value)` unchanged,
so a `c10::string_view` or a `c10::optional<int64_t>` would reach the C API as a struct where it takes
a `char*` or an `int64_t`. op-plugin converts those first:

- `str` -> `char* act_ptr = const_cast<char*>(act.data());` (`str?`: nullptr when None, or its default)
- `int?` / `float?` / `bool?` / `ScalarType?` -> `x.value_or(default)`; a None default needs
  `op_plugin.none_values` (what None means to the aclnn function is not in the schema)
- `Tensor[]?` -> `x.value_or(at::TensorList())`
- an `int` carrying a dtype code (the rules read it with `from_code`) -> `c10_npu::GetAclDataType(x)`, as
  op-plugin's kernels pass torch_npu's dtype codes (aclnn takes an aclDataType, not torch_npu's number)

A type no overload converts (`float[]`, Generator, Layout, ...) is refused: its kernel is hand-written.
The same conversions are `new_params` of a `gen_opapi` entry (`auto act_ptr = ...;` in torchnpugen's code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..schema.model import ENUM_WORDS, SCALAR_TYPE_WORDS, BaseType, EnumWord, ListType, OptionalType, strip_alias

# optional scalar -> the C++ type of its value (`x.value_or(...)`)
_VALUE_TYPES = {"int": "int64_t", "SymInt": "int64_t", "float": "double", "bool": "bool",
                "ScalarType": "at::ScalarType"}
# types ConvertType turns into their aclnn form (or a plain C value), as they are
_PASSED = ("Tensor", "int", "SymInt", "float", "bool", "Scalar", "ScalarType")
_SCALAR_TYPE_CPP = {"uint8": "at::kByte", "int8": "at::kChar", "int16": "at::kShort", "short": "at::kShort",
                    "int": "at::kInt", "int32": "at::kInt", "long": "at::kLong", "int64": "at::kLong",
                    "half": "at::kHalf", "float16": "at::kHalf", "float": "at::kFloat", "float32": "at::kFloat",
                    "double": "at::kDouble", "float64": "at::kDouble", "bool": "at::kBool",
                    "bfloat16": "at::kBFloat16"}


@dataclass(frozen=True)
class Conversion:
    """`cpp_type local = value;` before the aclnn call, which then gets `local` instead of `argument`."""

    argument: str
    local: str
    cpp_type: str
    value: str

    def statement(self) -> str:
        return f"{self.cpp_type} {self.local} = {self.value};"


class ConversionError(Exception):
    """An argument the aclnn call cannot take as op-plugin converts it; `hint` says what to do."""

    def __init__(self, argument: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.argument, self.message, self.hint = argument, message, hint


def conversions(schema, exec_args, none_values, taken, dtype_codes=frozenset()) -> tuple[Conversion, ...]:
    """The conversions of the schema arguments among `exec_args`, with locals not in `taken`; an int argument in
    `dtype_codes` carries a dtype as torch_npu's code and reaches aclnn as the aclDataType torch_npu maps it to."""
    names = set(taken)
    found = []
    none = dict(none_values)
    for name in dict.fromkeys(exec_args):
        arg = schema.argument(name)
        if arg is None:
            continue  # an output or a new_params local
        if name in dtype_codes and strip_alias(arg.type) == BaseType("int"):
            conversion = Conversion(name, _local(f"{name}_acl", names), "aclDataType",
                                    f"c10_npu::GetAclDataType({name})")
            names.add(conversion.local)
            found.append(conversion)
            continue
        conversion = _conversion(arg, none.get(name), names)
        if conversion is not None:
            names.add(conversion.local)
            found.append(conversion)
    return tuple(found)


def _conversion(arg, none_value: str | None, taken) -> Conversion | None:
    t = strip_alias(arg.type)
    optional = isinstance(t, OptionalType)
    base = strip_alias(t.elem) if optional else t
    name = arg.name
    if base == BaseType("str"):
        return Conversion(name, _local(f"{name}_ptr", taken), "char*", _string_pointer(arg, optional, none_value))
    if optional and base == ListType(BaseType("Tensor")):
        return Conversion(name, _local(f"{name}_value", taken), "at::TensorList", f"{name}.value_or(at::TensorList())")
    if optional and isinstance(base, BaseType) and base.name in _VALUE_TYPES:
        value = none_value if none_value is not None else _cpp_default(arg, base.name)
        if value is None:
            raise ConversionError(name, f"argument {name!r} ('{arg.type}', default None) reaches the aclnn call, "
                                  "and what None means to it is not in the schema",
                                  f"say it: `op_plugin.none_values: {{{name}: <C++ value>}}` (the kernel passes "
                                  f"{name}.value_or(<C++ value>)), or leave {name} out of `op_plugin.exec`")
        return Conversion(name, _local(f"{name}_value", taken), _VALUE_TYPES[base.name], f"{name}.value_or({value})")
    if _passed(base):
        return None
    raise ConversionError(name, f"argument {name!r} of type '{arg.type}' has no ConvertType overload in "
                          "op-plugin's op_api_common_base.h, so EXEC_NPU_CMD would pass the C++ object itself",
                          f"write this kernel by hand with its conversion, or leave {name} out of `op_plugin.exec`")


def _passed(t) -> bool:
    if isinstance(t, BaseType):
        return t.name in _PASSED
    if isinstance(t, ListType):
        elem = strip_alias(t.elem)
        return elem in (BaseType("Tensor"), BaseType("int"), BaseType("SymInt"), BaseType("Scalar")) or (
            elem == BaseType("bool") and t.size is not None)
    return False


def _string_pointer(arg, optional: bool, none_value: str | None) -> str:
    name = arg.name
    if not optional:
        return f"const_cast<char*>({name}.data())"
    fallback = none_value if none_value is not None else (
        _cpp_string(arg.default) if isinstance(arg.default, str) else None)
    if fallback is not None:
        return f"const_cast<char*>({name}.value_or({fallback}).data())"
    return f"{name}.has_value() ? const_cast<char*>({name}.value().data()) : nullptr"


def _cpp_default(arg, kind: str) -> str | None:
    """The schema default of an optional scalar as C++ (None for a None default)."""
    value = arg.default
    if value is None or not arg.has_default:
        return None
    if isinstance(value, EnumWord):
        if kind == "ScalarType":
            return _SCALAR_TYPE_CPP.get(value.word) if value.word in SCALAR_TYPE_WORDS else None
        number = ENUM_WORDS.get(kind, {}).get(value.word)
        return None if number is None else str(number)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return ("-" if value < 0 else "") + "std::numeric_limits<double>::infinity()"
        if math.isnan(value):
            return "std::numeric_limits<double>::quiet_NaN()"
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    return None


def _cpp_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _local(name: str, taken) -> str:
    while name in taken:
        name += "_"
    return name
