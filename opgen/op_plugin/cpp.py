"""torchgen's C++ (native, non-SymInt) signature of an op, as op-plugin kernels are declared.

The generated OpApiInterface.h declares each kernel with torchgen's NativeSignature; a hand-written
kernel must match it exactly. tests/test_op_plugin_torchnpugen.py compares this printer with
torchnpugen's own on every example.
"""

from __future__ import annotations

from ..errors import OpgenError
from ..schema.model import BaseType, ListType, OptionalType, Schema, strip_alias

_BASE = {"Tensor": "const at::Tensor &", "int": "int64_t", "SymInt": "int64_t", "float": "double", "bool": "bool",
         "str": "c10::string_view", "ScalarType": "at::ScalarType", "Scalar": "const at::Scalar &",
         "Layout": "at::Layout", "Device": "at::Device", "MemoryFormat": "at::MemoryFormat",
         "Generator": "c10::optional<at::Generator>"}
_OPTIONAL_BY_REF = {"Tensor": "const c10::optional<at::Tensor> &", "Scalar": "const c10::optional<at::Scalar> &"}
_OPTIONAL = {"int": "int64_t", "SymInt": "int64_t", "float": "double", "bool": "bool", "str": "c10::string_view",
             "ScalarType": "at::ScalarType", "Layout": "at::Layout", "Device": "at::Device",
             "MemoryFormat": "at::MemoryFormat", "Generator": "at::Generator"}
_LISTS = {"Tensor": "at::TensorList", "int": "at::IntArrayRef", "SymInt": "at::IntArrayRef",
          "float": "at::ArrayRef<double>", "Scalar": "at::ArrayRef<at::Scalar>"}


def argument_type(arg) -> str:
    t = arg.type
    if arg.is_write:
        if strip_alias(t) == BaseType("Tensor"):
            return "at::Tensor &"
        raise OpgenError(f"argument {arg.name!r}: opgen writes op-plugin kernels for mutated Tensors only, "
                         f"not '{t}'", hint="mutate plain Tensor arguments (Tensor(a!) x)")
    return _type(strip_alias(t), arg.name)


def _type(t, name: str) -> str:
    if isinstance(t, BaseType) and t.name in _BASE:
        return _BASE[t.name]
    if isinstance(t, OptionalType):
        elem = strip_alias(t.elem)
        if isinstance(elem, BaseType):
            if elem.name in _OPTIONAL_BY_REF:
                return _OPTIONAL_BY_REF[elem.name]
            if elem.name in _OPTIONAL:
                return f"c10::optional<{_OPTIONAL[elem.name]}>"
        if isinstance(elem, ListType) and isinstance(elem.elem, BaseType) and elem.elem.name in ("int", "SymInt"):
            return "at::OptionalIntArrayRef"
    if isinstance(t, ListType):
        elem = strip_alias(t.elem)
        if isinstance(elem, BaseType) and elem.name == "bool" and t.size is not None:
            return f"::std::array<bool,{t.size}>"
        if isinstance(elem, BaseType) and elem.name in _LISTS:
            return _LISTS[elem.name]
        if isinstance(elem, OptionalType) and strip_alias(elem.elem) == BaseType("Tensor"):
            return "const c10::List<c10::optional<at::Tensor>> &"
    raise OpgenError(f"argument {name!r} of type '{t}' has no C++ kernel type opgen knows",
                     hint="write this op's kernel by hand, or use Tensor, Tensor?, Tensor[], int, int[], float, bool, "
                     "str, Scalar, ScalarType (optionals of these)")


def return_type(schema: Schema) -> str:
    parts = []
    for ret in schema.returns:
        base = strip_alias(ret.type)
        if base == BaseType("Tensor"):
            parts.append("at::Tensor &" if ret.alias is not None and ret.alias.is_write else "at::Tensor")
        elif isinstance(base, ListType) and strip_alias(base.elem) == BaseType("Tensor"):
            parts.append("::std::vector<at::Tensor>")
        elif isinstance(base, BaseType) and base.name in ("int", "SymInt", "float", "bool"):
            parts.append(_BASE[base.name])
        else:
            raise OpgenError(f"{schema.op_name}: return '{ret.type}' has no C++ kernel type opgen knows",
                             hint="return Tensors")
    if not parts:
        return "void"
    if len(parts) == 1:
        return parts[0]
    return "::std::tuple<" + ",".join(parts) + ">"


def cpp_name(schema: Schema) -> str:
    """torchgen's C++ function name: the base name (overloads are C++ overloads)."""
    return schema.name


def stem(schema: Schema) -> str:
    """A Python/file name unique per overload: `name_overload`."""
    return schema.name + (f"_{schema.overload}" if schema.overload else "")


def signature(schema: Schema) -> str:
    """`RET name(ARGS)` as torchgen's NativeSignature.defn() would write it."""
    args = ", ".join(f"{argument_type(a)} {a.name}" for a in schema.arguments)
    return f"{return_type(schema)} {cpp_name(schema)}({args})"
