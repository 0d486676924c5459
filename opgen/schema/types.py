"""How each schema type is spelled in Python and in C++: the one table for that fact.

`python_annotation` is what a `custom_op` function (and a fake function) is annotated with;
`inferred_schema_type` is what `torch.library.infer_schema` turns that annotation back into
(`int` becomes `SymInt`, fixed sizes are lost, some types are refused), so the generator can
tell when `custom_op` needs an explicit `schema=`. `cpp_type` follows torchgen's conventions.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Argument, BaseType, ListType, OptionalType, TupleType, Type, strip_alias


@dataclass(frozen=True)
class TypeRow:
    python: str | None        # annotation; None when Python code cannot name it
    inferred: str | None      # what infer_schema makes of `python`; None when it refuses it
    cpp: str | None           # C++ parameter type for a by-value / const-ref argument
    cpp_optional: str | None  # C++ type of `T?`
    cpp_list: str | None      # C++ type of `T[]`


TYPES: dict[str, TypeRow] = {
    "Tensor": TypeRow("torch.Tensor", "Tensor", "const at::Tensor &", "const c10::optional<at::Tensor> &", "at::TensorList"),
    "int": TypeRow("int", "SymInt", "int64_t", "c10::optional<int64_t>", "at::IntArrayRef"),
    "SymInt": TypeRow("int", "SymInt", "c10::SymInt", "c10::optional<c10::SymInt>", "c10::SymIntArrayRef"),
    "DeviceIndex": TypeRow("int", "SymInt", "c10::DeviceIndex", "c10::optional<c10::DeviceIndex>", None),
    "SymBool": TypeRow("bool", "bool", "c10::SymBool", "c10::optional<c10::SymBool>", None),
    "float": TypeRow("float", "float", "double", "c10::optional<double>", "at::ArrayRef<double>"),
    "bool": TypeRow("bool", "bool", "bool", "c10::optional<bool>", None),
    "str": TypeRow("str", "str", "c10::string_view", "c10::optional<c10::string_view>", None),
    "Scalar": TypeRow("Number", "Scalar", "const at::Scalar &", "const c10::optional<at::Scalar> &", "at::ArrayRef<at::Scalar>"),
    "ScalarType": TypeRow("torch.dtype", "ScalarType", "at::ScalarType", "c10::optional<at::ScalarType>", None),
    "Layout": TypeRow("torch.layout", None, "at::Layout", "c10::optional<at::Layout>", None),
    "Device": TypeRow("torch.device", "Device", "at::Device", "c10::optional<at::Device>", None),
    "MemoryFormat": TypeRow("torch.memory_format", None, "at::MemoryFormat", "c10::optional<at::MemoryFormat>", None),
    "Generator": TypeRow("torch.Generator", None, "at::Generator", "c10::optional<at::Generator>", None),
    "Storage": TypeRow("torch.UntypedStorage", None, "at::Storage", None, None),
    "Stream": TypeRow("torch.Stream", None, "at::Stream", None, None),
    "QScheme": TypeRow("torch.qscheme", None, "at::QScheme", None, None),
    "complex": TypeRow("complex", None, "c10::complex<double>", None, None),
    "Any": TypeRow("Any", None, None, None, None),
    "NoneType": TypeRow("None", None, None, None, None),
}
# Lists whose C++ spelling differs from the element table.
_CPP_LIST_SPECIAL = {
    ("Tensor", "optional-elem"): "const c10::List<c10::optional<at::Tensor>> &",
    ("int", "optional-list"): "at::OptionalIntArrayRef",
    ("SymInt", "optional-list"): "at::OptionalSymIntArrayRef",
    ("float", "optional-list"): "c10::optional<at::ArrayRef<double>>",
}
# Return types that infer_schema accepts (anything else needs an explicit schema=).
_INFERRABLE_RETURNS = {"Tensor", "Tensor[]", "SymInt", "float", "bool", "Scalar"}


def python_annotation(t: Type) -> str | None:
    """The Python annotation for a schema type, or None when Python cannot name it."""
    t = strip_alias(t)
    if isinstance(t, OptionalType):
        inner = python_annotation(t.elem)
        return None if inner is None else f"{inner} | None"
    if isinstance(t, ListType):
        inner = python_annotation(t.elem)
        if inner is None:
            return None
        return f"list[{inner}]"
    if isinstance(t, BaseType):
        row = TYPES.get(t.name)
        return row.python if row else None
    if isinstance(t, TupleType):
        inner = [python_annotation(e) for e in t.elems]
        return None if None in inner else f"tuple[{', '.join(inner)}]"
    return None


def inferred_schema_type(t: Type) -> str | None:
    """What `infer_schema` makes of `python_annotation(t)`; None if it refuses the annotation."""
    t = strip_alias(t)
    if isinstance(t, OptionalType):
        elem = t.elem
        if isinstance(elem, ListType) and isinstance(elem.elem, BaseType) and elem.elem.name == "Tensor":
            return None  # Optional[list[Tensor]] is refused
        inner = inferred_schema_type(elem)
        return None if inner is None else inner + "?"
    if isinstance(t, ListType):
        elem = t.elem
        if isinstance(elem, OptionalType):
            if isinstance(elem.elem, BaseType) and elem.elem.name == "Tensor":
                return "Tensor?[]"
            return None  # list[Optional[int]] is refused
        if not isinstance(elem, BaseType) or elem.name not in ("Tensor", "int", "SymInt", "float", "bool", "Scalar"):
            return None  # list[str], nested lists, …
        inner = inferred_schema_type(elem)
        return None if inner is None else inner + "[]"
    if isinstance(t, BaseType):
        row = TYPES.get(t.name)
        return row.inferred if row else None
    return None


def canonical_type_text(t: Type) -> str:
    return str(strip_alias(t))


def custom_op_can_infer(t: Type) -> bool:
    """True when annotating with `python_annotation(t)` gives back exactly `t` through infer_schema."""
    return inferred_schema_type(t) == canonical_type_text(t)


def inferred_return_ok(t: Type) -> bool:
    """infer_schema gives back `t` as one return (`tuple[Tensor]` becomes the 1-tuple `((Tensor))`)."""
    if isinstance(t, TupleType):
        return len(t.elems) == 1 and inferred_return_ok(t.elems[0])
    return canonical_type_text(t) in _INFERRABLE_RETURNS


def cpp_type(arg: Argument, symint: bool = True) -> str | None:
    """torchgen-style C++ parameter type; `at::Tensor &` for a mutated tensor. `symint=False` gives the
    native (non-SymInt) signature that op-plugin kernels are declared with: SymInt is spelled as int."""
    t = strip_alias(arg.type)
    if arg.is_write and isinstance(t, BaseType) and t.name == "Tensor":
        return "at::Tensor &"
    if arg.is_write and isinstance(t, OptionalType) and isinstance(t.elem, BaseType) and t.elem.name == "Tensor":
        return "const c10::optional<at::Tensor> &"
    return _cpp(t, symint)


def cpp_return_type(t: Type, mutable: bool = False) -> str | None:
    """torchgen's C++ type of one return (`at::Tensor &` for a mutable alias), native (non-SymInt) spelling."""
    t = strip_alias(t)
    if t == BaseType("Tensor"):
        return "at::Tensor &" if mutable else "at::Tensor"
    if t == ListType(BaseType("Tensor")):
        return "::std::vector<at::Tensor>"
    if isinstance(t, BaseType) and t.name in ("int", "SymInt", "float", "bool"):
        return _row(t.name, symint=False).cpp
    return None


def _row(name: str, symint: bool) -> TypeRow | None:
    return TYPES.get("int" if name == "SymInt" and not symint else name)


def _cpp(t: Type, symint: bool) -> str | None:
    if isinstance(t, BaseType):
        row = _row(t.name, symint)
        return row.cpp if row else None
    if isinstance(t, OptionalType):
        elem = t.elem
        if isinstance(elem, BaseType):
            row = _row(elem.name, symint)
            return row.cpp_optional if row else None
        if isinstance(elem, ListType) and isinstance(elem.elem, BaseType):
            name = "int" if elem.elem.name == "SymInt" and not symint else elem.elem.name
            special = _CPP_LIST_SPECIAL.get((name, "optional-list"))
            if special:
                return special
            inner = _cpp(elem, symint)
            return None if inner is None else f"c10::optional<{inner}>"
        return None
    if isinstance(t, ListType):
        elem = t.elem
        if isinstance(elem, OptionalType) and isinstance(elem.elem, BaseType):
            return _CPP_LIST_SPECIAL.get((elem.elem.name, "optional-elem"))
        if isinstance(elem, BaseType):
            if elem.name == "bool" and t.size is not None:
                return f"::std::array<bool,{t.size}>"
            row = _row(elem.name, symint)
            return row.cpp_list if row else None
    return None
