"""Output sizes and dtypes as op-plugin writes them: an input's name, a brace list, op_infer's helpers.

op_plugin_functions.yaml's `gen_opapi` blocks say `size: self`, `size: '{query.size(0), query.size(1)}'`,
`size: broadcast_ops_npu_output_size(self, other)` or `reduce_ops_npu_output_size(self, dim, keepdim)`
(op_plugin/utils/KernelNpuOutputSize.h), never a C++ lambda. `repo_size` gives that form of a shape rule,
or None when only the semantics printer's general C++ (a lambda) can say it; an OpApi kernel uses the
same forms and falls back to the printer's C++.
"""

from __future__ import annotations

from ..spec.semantics_ir import FLOOR_DIV, Call, Const, FromCode, ListLit, Name, Reduce, SizeEdit, TensorAttr

SIZE_VECTOR = "c10::SmallVector<int64_t, op_infer::SIZE>"  # op-plugin's spelling of the printer's SmallVector
_PRINTER_VECTOR = "c10::SmallVector<int64_t, 8>"


def repo_size(rule, tensors: list[str]) -> str | None:
    """The op-plugin form of a shape rule over the op's Tensor arguments `tensors`, or None."""
    node = rule.node
    if isinstance(node, TensorAttr) and node.attr == "shape" and _tensor_name(node.obj, tensors):
        return node.obj.name
    if isinstance(node, ListLit):
        text = rule.cpp()
        # a lambda, or c10's floor division (torchnpugen's StructKernelNpuOpApi.cpp does not include its header)
        if not text.startswith(_PRINTER_VECTOR + "{") or "[&]" in text or "[](" in text or FLOOR_DIV in text:
            return None
        items = text[len(_PRINTER_VECTOR) + 1:-1]
        if not node.items:
            return SIZE_VECTOR + "{}"
        # `auto size = {a, b};` deduces one element type: a bare literal (an int) among int64_t sizes breaks it
        if any(not any(isinstance(n, Name) for n in item.walk()) for item in node.items):
            return SIZE_VECTOR + "{" + items + "}"
        return "{" + items + "}"
    if isinstance(node, Call) and node.function == "broadcast" and len(node.args) == 2:
        names = [_shape_of(arg, tensors) for arg in node.args]
        if all(names):
            return f"broadcast_ops_npu_output_size({names[0]}, {names[1]})"
    if isinstance(node, Reduce):
        tensor = _shape_of(node.shape, tensors)
        dims = node.dims.name if isinstance(node.dims, Name) and not node.dims.ty.optional else None
        keep = _bool(node.keepdim)
        if tensor and dims and keep:
            return f"reduce_ops_npu_output_size({tensor}, {dims}, {keep})"
    return None


def kernel_size(rule, tensors: list[str]) -> str:
    """The C++ of a shape rule in an OpApi kernel: the op-plugin form where there is one."""
    found = repo_size(rule, tensors)
    if found is None:
        return rule.cpp().replace(_PRINTER_VECTOR, SIZE_VECTOR)
    if found in tensors:
        return f"{found}.sizes()"
    if found.startswith("{"):
        return SIZE_VECTOR + found
    return found if found.startswith(SIZE_VECTOR) else "op_infer::" + found


def yaml_size(rule, tensors: list[str]) -> str:
    """`size:` of a gen_opapi output: the op-plugin form, else the printer's C++ (an explicit gen_opapi)."""
    found = repo_size(rule, tensors)
    return found if found is not None else rule.cpp().replace(_PRINTER_VECTOR, SIZE_VECTOR)


# torch_npu's dtype codes that are at::ScalarType's own numbers (the first entries of op-plugin's Meta module's
# TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP): c10_npu::GetAclDataType(code) gives their aclDataType and
# npu_preparation::convert_to_scalar_type gives the dtype back, as op-plugin's kernels allocate a coded output
TORCH_NPU_CODES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                   7: "float64", 11: "bool", 15: "bfloat16", 23: "float8_e5m2", 24: "float8_e4m3fn"}
# the whole of that map (op-plugin 517f2e7d): torch_npu's own dtypes (285 int4, 290 hifloat8, 296/297 float4) are
# stored as uint8
TORCH_NPU_MAP = {**TORCH_NPU_CODES, 8: "complex32", 9: "complex64", 10: "complex128", 12: "qint8", 13: "quint8",
                 14: "qint32", 16: "quint4x2", 21: "bits8", 285: "uint8", 290: "uint8", 291: "float8_e5m2",
                 292: "float8_e4m3fn", 296: "uint8", 297: "uint8"}


def coded_dtype(rule) -> str | None:
    """The argument a dtype rule reads as torch_npu's dtype code (`from_code(dst_type)`), where the spec's
    `dtype_codes` are torch_npu's own for every code it lists; None otherwise."""
    node = rule.node
    if (isinstance(node, FromCode) and isinstance(node.code, Name) and not node.code.output and not node.code.deref
            and not node.code.ty.optional and all(TORCH_NPU_CODES.get(code) == name for code, name in node.table)):
        return node.code.name
    return None


def kernel_dtype(rule, acl_types: dict[str, str]) -> str:
    """The C++ ScalarType of a dtype rule in an OpApi kernel: a code torch_npu knows converted as op-plugin does
    (`npu_preparation::convert_to_scalar_type` of the aclDataType in `acl_types`, argument -> local, or of
    `c10_npu::GetAclDataType(code)`), else the printer's C++ (a switch over the spec's table)."""
    code = coded_dtype(rule)
    if code is None:
        return rule.cpp()
    return f"npu_preparation::convert_to_scalar_type({acl_types.get(code) or f'c10_npu::GetAclDataType({code})'})"


def yaml_dtype(rule, tensors: list[str]) -> str:
    """`dtype:` of a gen_opapi output: an input's name for its dtype, else the C++ ScalarType expression."""
    text = kernel_dtype(rule, {})
    for name in tensors:
        if text == f"{name}.scalar_type()":
            return name
    return text


def _tensor_name(node, tensors: list[str]) -> bool:
    return isinstance(node, Name) and not node.output and node.name in tensors


def _shape_of(node, tensors: list[str]) -> str | None:
    if isinstance(node, TensorAttr) and node.attr == "shape" and _tensor_name(node.obj, tensors):
        return node.obj.name
    return None


def _bool(node) -> str | None:
    if isinstance(node, Const) and isinstance(node.value, bool):
        return "true" if node.value else "false"
    if isinstance(node, Name) and not node.ty.optional and not node.output:
        return node.name
    return None


def edited_size_lines(rule, tensors: list[str], var: str) -> list[str] | None:
    """`replace_size(x.shape, dim, k)` / `remove_size(x.shape, dim)` as op-plugin's kernels write them, statements
    declaring `var` from `op_infer::array_to_small_vector(x.sizes())` (the rank is checked before: param_checks);
    None for any other rule."""
    node = rule.node
    if not (isinstance(node, SizeEdit) and node.edit in ("replace", "remove") and isinstance(node.shape, TensorAttr)
            and node.shape.attr == "shape" and _tensor_name(node.shape.obj, tensors)):
        return None
    tensor = node.shape.obj.name
    index = _dim_index(node.dim, tensor, rule)
    lines = [f"auto {var} = op_infer::array_to_small_vector({tensor}.sizes());"]
    if node.edit == "replace":
        return lines + [f"{var}[{index}] = {_cpp_of(node.size, rule)};"]
    return lines + [f"{var}.erase({var}.begin() + {index});"]


def _dim_index(dim, tensor: str, rule) -> str:
    if isinstance(dim, Const) and isinstance(dim.value, int) and not isinstance(dim.value, bool):
        return str(dim.value) if dim.value >= 0 else f"{tensor}.dim() - {-dim.value}"
    return f"c10::maybe_wrap_dim({_cpp_of(dim, rule)}, {tensor}.dim())"


def _cpp_of(node, rule) -> str:
    """One node of `rule` as C++, with the printer that prints the whole rule."""
    from ..spec.semantics_ir import CPP_COND, _Cpp

    return _Cpp(frozenset(a.name for a in rule.schema.arguments)).at(node, CPP_COND)


def meta_size_lines(rule, var: str, ctx) -> tuple[list[str], str] | None:
    """(statements, the variable holding the sizes) of `replace_size` / `remove_size` / `reduce` over an input's
    shape, as op-plugin's Meta functions write sizes: `size = list(x.shape)` then an assignment or a `del`, or a
    loop appending the sizes a reduction keeps, where the fake's printer writes a (nested) comprehension. `var` is
    the name wanted (made unique in `ctx`); None for any other rule. A function-body statement: later lines carry
    their own indentation."""
    from ..spec.semantics_ir import PY_COND, PY_MUL, PY_OR, PY_POSTFIX, _Py

    node, printer = rule.node, _Py(ctx)
    if isinstance(node, SizeEdit) and node.edit in ("replace", "remove") and _input_shape(node.shape):
        name = _fresh(ctx, var)
        lines = [f"{name} = list({printer.at(node.shape, PY_COND)})"]
        where = printer.at(node.dim, PY_COND)  # a list index counts from the end as torch does; the range is checked
        lines.append(f"{name}[{where}] = {printer.at(node.size, PY_COND)}" if node.edit == "replace"
                     else f"del {name}[{where}]")
        return printer.statements + lines, name
    if isinstance(node, Reduce) and _input_shape(node.shape):
        name, dims = _fresh(ctx, var), _fresh(ctx, var.removesuffix("_size") + "_dims")
        i, s, d = printer.local("i"), printer.local("s"), printer.local("d")
        tensor = printer.at(node.shape.obj, PY_POSTFIX)
        given = printer.at(node.dims, PY_OR) + (" or ()" if node.dims.ty.optional else "")
        keep = node.keepdim.value if isinstance(node.keepdim, Const) else None
        loop = [f"for {i}, {s} in enumerate({tensor}.shape):",
                f"        if {i} not in {dims}:",
                f"            {name}.append({s})"]
        if keep is None:
            loop += [f"        elif {printer.at(node.keepdim, PY_MUL)}:", f"            {name}.append(1)"]
        elif keep:
            loop += ["        else:", f"            {name}.append(1)"]
        lines = [f"{name} = []",
                 # every dim when none is given (torch's full reduction); a 0-dim tensor has no size to keep
                 (f"{dims} = ([{d} % {tensor}.dim() for {d} in {given}] or range({tensor}.dim())) "
                  f"if {tensor}.dim() else []"),
                 "\n".join(loop)]
        return printer.statements + lines, name
    return None


def _input_shape(node) -> bool:
    """`x.shape` of an argument `x` (not of an earlier output)."""
    return (isinstance(node, TensorAttr) and node.attr == "shape" and isinstance(node.obj, Name)
            and not node.obj.output)


def _fresh(ctx, base: str) -> str:
    name = base
    while name in ctx.reserved:
        name += "_"
    ctx.reserved.add(name)
    return name
