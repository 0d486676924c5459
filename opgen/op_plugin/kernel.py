"""The OpApi kernel (op_plugin/ops/opapi/<Camel>KernelNpuOpApi.cpp) as op-plugin's own kernels read.

`(DO_COMPATIBILITY)`, the outputs allocated from the semantics (op_infer's helpers where the repo has one),
the non-tensor arguments converted for aclnn (convert.py), one `EXEC_NPU_CMD`, the return. Written in
the layout op-plugin's `.clang-format` gives (2-space indent, `const at::Tensor& x`, parameters one per line
when the signature is longer than 120 columns); `opgen add` then runs clang-format with the checkout's
own `.clang-format` where clang-format is installed.
"""

from __future__ import annotations

import os
import re
import time

from ..errors import OpgenError
from ..schema.model import BaseType, ListType, strip_alias
from ..spec.semantics_ir import FLOOR_DIV, FLOOR_DIV_HEADER
from . import cpp
from .param_checks import param_checks
from .sizes import edited_size_lines, kernel_dtype, kernel_size

COLUMNS = 120
INDENT = "  "
CONTINUATION = "    "
# op-plugin's licence header (op_plugin/ops/opapi/*.cpp: 441 of 460 files); {year}: the year the file is written
LICENCE = """\
// Copyright (c) {year} Huawei Technologies Co., Ltd
// All rights reserved.
//
// Licensed under the BSD 3-Clause License  (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// https://opensource.org/licenses/BSD-3-Clause
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License."""


def licence_year() -> int:
    """This year, or the one SOURCE_DATE_EPOCH gives (reproducible builds: the same spec, the same bytes)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return time.gmtime(int(epoch) if epoch.isdigit() else None).tm_year


def licence() -> str:
    return LICENCE.format(year=licence_year())


def repo_type(text: str) -> str:
    """torchgen's spelling (`const at::Tensor &`, `::std::tuple<at::Tensor,at::Tensor>`) as op-plugin writes it."""
    text = re.sub(r"\s*&$", "&", text.strip()).replace("::std::", "std::")
    return re.sub(r",(?=\S)", ", ", text)


def signature_lines(schema) -> list[str]:
    """`RET name(ARGS) {` on one line, or broken after `(` with one parameter per line (clang-format's
    AlignAfterOpenBracket: AlwaysBreak, BinPackParameters: false)."""
    params = [f"{repo_type(cpp.argument_type(a))} {a.name}" for a in schema.arguments]
    head = f"{repo_type(cpp.return_type(schema))} {cpp.cpp_name(schema)}("
    line = head + ", ".join(params) + ") {"
    if len(line) <= COLUMNS or not params:
        return [line]
    return [head] + [f"{CONTINUATION}{p}," for p in params[:-1]] + [f"{CONTINUATION}{params[-1]}) {{"]


def call_lines(head: str, args: list[str], indent: str, tail: str = ";") -> list[str]:
    """`head(args)tail` as clang-format lays out a call: on one line, else all arguments on the next line,
    else one per line (BinPackArguments: false)."""
    line = f"{indent}{head}({', '.join(args)}){tail}"
    if len(line) <= COLUMNS:
        return [line]
    inner = indent + CONTINUATION
    together = f"{inner}{', '.join(args)}){tail}"
    if len(together) <= COLUMNS:
        return [f"{indent}{head}(", together]
    return [f"{indent}{head}("] + [f"{inner}{a}," for a in args[:-1]] + [f"{inner}{args[-1]}){tail}"]


def assign_lines(target: str, head: str, args: list[str], indent: str) -> list[str]:
    """`target = head(args);` as clang-format breaks it: on one line, else after `=` when the call then fits,
    else as a call broken after `(`."""
    line = f"{indent}{target} = {head}({', '.join(args)});"
    if len(line) <= COLUMNS:
        return [line]
    continued = f"{indent}{CONTINUATION}{head}({', '.join(args)});"
    if len(continued) <= COLUMNS:
        return [f"{indent}{target} =", continued]
    return call_lines(f"{target} = {head}", args, indent)


def kernel_file(entries, acl_op: bool) -> str:
    """The whole .cpp: licence, includes, `namespace op_api` with one function per entry."""
    functions = "\n\n".join(kernel_function(entry) for entry in entries)
    includes = ([f"#include <{FLOOR_DIV_HEADER}>"] if FLOOR_DIV in functions else []) + (
        ['#include "op_plugin/AclOpsInterface.h"'] if acl_op else []) + [
        '#include "op_plugin/OpApiInterface.h"', '#include "op_plugin/utils/op_api_common.h"']
    return (f"{licence()}\n\n" + "\n".join(includes) + "\n\nnamespace op_api {\n"
            f"using npu_preparation = at_npu::native::OpPreparation;\n\n{functions}\n\n}} // namespace op_api\n")


def kernel_function(entry) -> str:
    """One kernel: (fallback), allocate the outputs, convert the arguments, one EXEC_NPU_CMD, return."""
    schema = entry.schema
    body: list[str] = []
    if entry.config.acl_op and entry.twin_of is None:
        fallback = f"acl_op::{cpp.cpp_name(schema)}({', '.join(a.name for a in schema.arguments)})"
        body += call_lines("DO_COMPATIBILITY", [entry.aclnn, fallback], INDENT)
    for check in param_checks(entry.outputs):
        body += _check_lines(check.torch_check(entry.name))
    variables = output_locals(entry)
    options_from = _options_source(entry)
    substitutions = dict(variables)
    # a dtype code's aclDataType comes first: the allocation reads it back as the output's dtype, as neighbours do
    acl_types = {c.argument: c.local for c in entry.conversions if c.cpp_type == ACL_DATA_TYPE}
    body += _converted(entry.conversions, substitutions, dtype_codes=True)
    tensors = [a.name for a in schema.arguments if strip_alias(a.type) == BaseType("Tensor")]
    sizes: dict[str, str] = {}  # a shape rule -> the variable an earlier output computed it in
    for out in entry.outputs:
        var = variables[out.name]
        cloned = next((name for name in entry.cloned if out.name == f"{name}_out"), None)
        if cloned is not None:  # the functional twin works on a copy of the mutated argument, contiguous as its Meta
            body.append(f"{INDENT}at::Tensor {var} = {cloned}.clone(at::MemoryFormat::Contiguous);")
            substitutions[cloned] = var
            continue
        if options_from is None:
            raise OpgenError(f"{entry.name}: no Tensor or Tensor[] argument to take the outputs' device from",
                             hint="write this kernel by hand; opgen allocates outputs like an input tensor")
        body += _allocation(out, var, options_from, tensors, sizes, acl_types)
    for out in entry.outputs:
        if out.is_list:  # ConvertType takes an at::TensorList lvalue, not the std::vector
            body.append(f"{INDENT}at::TensorList {variables[out.name]}_list({variables[out.name]});")
            substitutions[out.name] = f"{variables[out.name]}_list"
    body += _converted(entry.conversions, substitutions, dtype_codes=False)
    body += call_lines("EXEC_NPU_CMD", [entry.aclnn, *(substitutions.get(n, n) for n in entry.exec_args)], INDENT)
    if entry.kind == "inplace":
        body.append(f"{INDENT}return {schema.arguments[0].name};")
    elif len(entry.outputs) == 1 and not schema.returns_tuple:
        body.append(f"{INDENT}return {variables[entry.outputs[0].name]};")
    elif entry.outputs:
        body += call_lines("return std::make_tuple", [variables[o.name] for o in entry.outputs], INDENT)
    return "\n".join(signature_lines(schema) + body + ["}"])


ACL_DATA_TYPE = "aclDataType"  # the C++ type of a dtype code converted for aclnn (convert.py)


def _converted(conversions, substitutions: dict[str, str], dtype_codes: bool) -> list[str]:
    """The statements converting the dtype-code arguments (`dtype_codes`) or the others; each argument's local
    takes its place in the aclnn call (`substitutions`)."""
    lines = []
    for conversion in conversions:
        if (conversion.cpp_type == ACL_DATA_TYPE) is dtype_codes:
            lines.append(f"{INDENT}{conversion.statement()}")
            substitutions[conversion.argument] = conversion.local
    return lines


def _check_lines(statement: str) -> list[str]:
    """`TORCH_CHECK(cond, "message" + OPS_ERROR(...));`, its arguments on the next line when it is too long."""
    line = f"{INDENT}{statement}"
    if len(line) <= COLUMNS:
        return [line]
    head, rest = statement.split("(", 1)
    return [f"{INDENT}{head}(", f"{INDENT}{CONTINUATION}{rest}"]


def output_locals(entry) -> dict[str, str]:
    """Output name -> its C++ variable (renamed when it would shadow an argument)."""
    taken = {a.name for a in entry.schema.arguments}
    names = {}
    for out in entry.outputs:
        name = out.name
        while name in taken:
            name += "_result"
        taken.add(name)
        names[out.name] = name
    return names


def _allocation(out, var: str, options_from: str, tensors: list[str], sizes: dict[str, str],
                acl_types: dict[str, str]) -> list[str]:
    """The lines allocating one output; a Tensor[] one tensor by tensor, in a loop over its element index. `sizes`
    maps a shape rule already computed (by an earlier output) to its variable, which this output reuses;
    `acl_types` a dtype-code argument to its aclDataType local."""
    dtype = kernel_dtype(out.dtype_rule, acl_types)
    options = f"{options_from}.options()" + ("" if dtype == f"{options_from}.scalar_type()" else f".dtype({dtype})")
    lines: list[str] = []
    reused = sizes.get(out.shape_rule.text) if not out.is_list else None
    edited = None if reused or out.is_list else edited_size_lines(out.shape_rule, tensors, f"{var}_size")
    size = reused or (f"{var}_size" if edited else kernel_size(out.shape_rule, tensors))
    if edited:
        lines += edited
        sizes[out.shape_rule.text] = size
    elif not reused and not re.fullmatch(r"\w+\.sizes\(\)", size):
        lines.append(f"auto {var}_size = {size};")
        size = f"{var}_size"
        if not out.is_list:
            sizes[out.shape_rule.text] = size
    if not out.is_list:
        return [f"{INDENT}{line}" for line in lines] + assign_lines(
            f"at::Tensor {var}", "npu_preparation::apply_tensor_without_format", [size, options], INDENT)
    index, element, inner = out.element_index, f"{var}_{out.element_index}", INDENT * 2
    return [f"{INDENT}std::vector<at::Tensor> {var};",
            f"{INDENT}for (int64_t {index} = 0; {index} < {out.length_rule.cpp()}; ++{index}) {{",
            *(f"{inner}{line}" for line in lines),
            *assign_lines(f"at::Tensor {element}", "npu_preparation::apply_tensor_without_format", [size, options],
                          inner),
            f"{inner}{var}.push_back(std::move({element}));",
            f"{INDENT}}}"]


def _options_source(entry) -> str | None:
    """The input whose options (device) the outputs take: the first Tensor, or a Tensor[]'s first element."""
    for arg in entry.schema.arguments:
        t = strip_alias(arg.type)
        if t == BaseType("Tensor"):
            return arg.name
        if isinstance(t, ListType) and strip_alias(t.elem) == BaseType("Tensor"):
            return f"{arg.name}[0]"
    return None
