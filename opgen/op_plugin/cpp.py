"""torchgen's C++ (native, non-SymInt) signature of an op, as op-plugin kernels are declared (the types
are schema/types.py's table, spelled without SymInt).

The generated OpApiInterface.h declares each kernel with torchgen's NativeSignature; a hand-written
kernel must match it exactly. tests/test_op_plugin_torchnpugen.py compares this printer with
torchnpugen's own on every example.
"""

from __future__ import annotations

from ..errors import OpgenError
from ..schema.model import BaseType, Schema, strip_alias
from ..schema.types import cpp_return_type, cpp_type


def argument_type(arg) -> str:
    if arg.is_write and strip_alias(arg.type) != BaseType("Tensor"):
        raise OpgenError(f"argument {arg.name!r}: opgen writes op-plugin kernels for mutated Tensors only, "
                         f"not '{arg.type}'", hint="mutate plain Tensor arguments (Tensor(a!) x)")
    text = cpp_type(arg, symint=False)
    if text is None:
        raise OpgenError(f"argument {arg.name!r} of type '{arg.type}' has no C++ kernel type opgen knows",
                         hint="write this op's kernel by hand, or use Tensor, Tensor?, Tensor[], int, int[], float, "
                         "bool, str, Scalar, ScalarType (optionals of these)")
    return text


def return_type(schema: Schema) -> str:
    parts = []
    for ret in schema.returns:
        text = cpp_return_type(ret.type, mutable=ret.alias is not None and ret.alias.is_write)
        if text is None:
            raise OpgenError(f"{schema.op_name}: return '{ret.type}' has no C++ kernel type opgen knows",
                             hint="return Tensors")
        parts.append(text)
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
