"""Template context of the op_plugin target: every YAML line, C++ line and Python line, computed here.

One shape/dtype rule from the spec is printed three times: as C++ for `gen_opapi` (torchnpugen
writes the kernel) or for the hand-written OpApi kernel, and as Python for the Meta function.
Nothing from the spec reaches generated code except checked identifiers, schema text (as a YAML
scalar or Python string literal), rules printed by the semantics printer and `new_params`
expressions checked to stay one C++ expression.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace

import yaml

from ..errors import OpgenError
from ..render.examples import tuple_call_lines
from ..render.fakes import fake_body
from ..render.pyformat import call, docstring, literal, string_call
from ..render.signature import python_default
from ..schema.model import BaseType, ListType, OptionalType, strip_alias
from ..spec.model import RANDOM_TAG, ProjectSpec
from ..spec.op_plugin import ALL_VERSIONS
from . import cpp
from .model import PluginOp, camel, plugin_ops

SCRATCH_NAMESPACE = "opgen_meta_check"
PROJECT_TEMPLATE, OP_TEMPLATE = "op_plugin", "op_plugin_op"


def yaml_scalar(text: str) -> str:
    """`text` as a YAML scalar: plain when YAML reads it back unchanged, else double-quoted (JSON)."""
    try:
        if yaml.safe_load(f"k: {text}") == {"k": text} and text == text.strip():
            return text
    except yaml.YAMLError:
        pass
    return json.dumps(text, ensure_ascii=False)


def versions_text(versions) -> str:
    if isinstance(versions, list):
        return f"[{versions[0]}, {versions[1]}]"
    return yaml_scalar(versions)


def project_context(spec: ProjectSpec) -> dict:
    entries = plugin_ops(spec)
    by_source: dict[int, list[PluginOp]] = {}
    for entry in entries:
        by_source.setdefault(entry.source.index, []).append(entry)
    ops = [op_context(spec, op, by_source[op.index]) for op in spec.ops]
    return {
        "project_slug": "op_plugin_contribution",
        "_opgen": {
            "spec_text": spec.text,
            "all_version": "[" + ", ".join(ALL_VERSIONS) + "]",
            "yaml_lines": [line for entry in entries for line in yaml_entry(entry)],
            "derivatives_lines": [line for entry in entries for line in derivatives_entry(entry)],
            "meta_functions": [meta_function(entry) for entry in entries],
            "doc_calls": [doc_call(entry) for entry in entries if entry.twin_of is None],
            "ops": ops,
        },
    }


# --- op_plugin_functions.yaml -------------------------------------------------------------------


def gen_opapi_names(entry: PluginOp) -> dict[str, str]:
    """Output name -> the `gen_opapi` result key (`out`, or `out0`, `out1`, ... as op-plugin writes them)."""
    if len(entry.outputs) == 1:
        return {entry.outputs[0].name: "out"}
    return {out.name: f"out{i}" for i, out in enumerate(entry.outputs)}


def _tensor_args(entry: PluginOp) -> list[str]:
    return [a.name for a in entry.schema.arguments if strip_alias(a.type) == BaseType("Tensor")]


def _short_cpp(expr: str, entry: PluginOp, member: str) -> str:
    """`x.sizes()` / `x.scalar_type()` of an input tensor as op-plugin writes it: just `x`."""
    for name in _tensor_args(entry):
        if expr == f"{name}.{member}":
            return name
    return expr


def yaml_entry(entry: PluginOp) -> list[str]:
    config = entry.config
    versions = versions_text(config.versions)
    lines = [f"  - func: {yaml_scalar(entry.func)}"]
    if entry.source.random:  # torchgen requires the tag of an op with a Generator (checked by the model)
        lines.append(f"    tags: {RANDOM_TAG}")
    if config.acl_op and entry.twin_of is None:
        lines.append(f"    acl_op: {versions}")
    lines.append(f"    op_api: {versions}")
    if config.exposed:
        lines.append(f"    exposed: {versions}")
    if config.internal_format_opapi:
        lines.append(f"    internal_format_opapi: {versions}")
    if entry.kernel == "gen_opapi":
        keys = gen_opapi_names(entry)
        lines.append("    gen_opapi:")
        for out in entry.outputs:
            size = _short_cpp(out.shape_rule.cpp(), entry, "sizes()")
            dtype = _short_cpp(out.dtype_rule.cpp(), entry, "scalar_type()")
            lines += [f"      {keys[out.name]}:", f"        size: {yaml_scalar(size)}",
                      f"        dtype: {yaml_scalar(dtype)}"]
        if config.new_params:
            lines.append("      new_params:")
            lines += [f"        {name}: {yaml_scalar(value)}" for name, value in config.new_params]
        exec_args = [keys.get(name, name) for name in entry.exec_args]
        lines.append(f"      exec: {yaml_scalar(', '.join([entry.aclnn, *exec_args]))}")
    return lines


def derivatives_entry(entry: PluginOp) -> list[str]:
    config = entry.config
    if not config.backward or entry.twin_of is not None:
        return []
    lines = [f"  - name: {yaml_scalar(entry.func)}"]
    if config.output_differentiability is not None:
        flags = ", ".join("true" if f else "false" for f in config.output_differentiability)
        lines.append(f"    output_differentiability: [{flags}]")
    lines += [f"    {yaml_scalar(key)}: {yaml_scalar(formula)}" for key, formula in config.backward]
    lines.append(f"    version: {versions_text(config.versions)}")
    return lines


# --- OpApi kernel (C++) ---------------------------------------------------------------------------


def _cpp_locals(entry: PluginOp) -> dict[str, str]:
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


def kernel_function(entry: PluginOp) -> str:
    """The OpApi kernel: (fallback), allocate outputs from the semantics, one EXEC_NPU_CMD, return."""
    schema = entry.schema
    args = ", ".join(a.name for a in schema.arguments)
    body = []
    if entry.config.acl_op and entry.twin_of is None:
        body.append(f"DO_COMPATIBILITY({entry.aclnn}, acl_op::{cpp.cpp_name(schema)}({args}));")
    variables = _cpp_locals(entry)
    options_from = _options_source(entry)
    substitutions = dict(variables)
    for out in entry.outputs:
        var = variables[out.name]
        cloned = next((name for name in entry.cloned if out.name == f"{name}_out"), None)
        if cloned is not None:  # the functional twin works on a copy of the mutated argument
            body.append(f"at::Tensor {var} = {cloned}.clone();")
            substitutions[cloned] = var
            continue
        if options_from is None:
            raise OpgenError(f"{entry.name}: no Tensor or Tensor[] argument to take the outputs' device from",
                             hint="write this kernel by hand; opgen allocates outputs like an input tensor")
        body += _allocation(out, var, options_from)
    exec_args = [substitutions.get(name, name) for name in entry.exec_args]
    body.append(f"EXEC_NPU_CMD({', '.join([entry.aclnn, *exec_args])});")
    if entry.kind == "inplace":
        body.append(f"return {schema.arguments[0].name};")
    elif len(entry.outputs) == 1 and not schema.returns_tuple:
        body.append(f"return {variables[entry.outputs[0].name]};")
    elif entry.outputs:
        body.append("return std::make_tuple(" + ", ".join(f"std::move({variables[o.name]})" for o in entry.outputs)
                    + ");")
    return cpp.signature(schema) + "\n{\n" + "".join(f"    {line}\n" for line in body) + "}"


def _allocation(out, var: str, options_from: str) -> list[str]:
    """The C++ lines allocating one output from its semantics; a Tensor[] one tensor by tensor, in a loop over
    its element index."""
    allocate = [f"auto {var}_size = {out.shape_rule.cpp()};",
                f"at::Tensor {var} = npu_preparation::apply_tensor_without_format(",
                f"    {var}_size, {options_from}.options().dtype({out.dtype_rule.cpp()}));"]
    if not out.is_list:
        return allocate
    index, element = out.element_index, f"{var}_{out.element_index}"
    allocate = [line.replace(f"at::Tensor {var} =", f"at::Tensor {element} =") for line in allocate]
    return [f"std::vector<at::Tensor> {var};",
            f"for (int64_t {index} = 0; {index} < {out.length_rule.cpp()}; ++{index}) {{",
            *(f"    {line}" for line in allocate),
            f"    {var}.push_back(std::move({element}));",
            "}"]


def _options_source(entry: PluginOp) -> str | None:
    """The input whose options (device) the outputs take: the first Tensor, or a Tensor[]'s first element."""
    for arg in entry.schema.arguments:
        t = strip_alias(arg.type)
        if t == BaseType("Tensor"):
            return arg.name
        if isinstance(t, ListType) and strip_alias(t.elem) == BaseType("Tensor"):
            return f"{arg.name}[0]"
    return None


# --- Meta, docs -----------------------------------------------------------------------------------


def meta_parameters(schema) -> str:
    """The schema's arguments as Python parameters: same names, same defaults, `*` before keyword-only ones."""
    parts, star = [], False
    for arg in schema.arguments:
        if arg.kwarg_only and not star:
            parts.append("*")
            star = True
        parts.append(f"{arg.name}={_meta_default(arg)}" if arg.has_default else arg.name)
    return ", ".join(parts)


def _meta_default(arg) -> str:
    """The default as the dispatcher passes it: a bare word such as `int reduction=Mean` is its number."""
    from ..schema.model import ENUM_WORDS, EnumWord

    base = strip_alias(arg.type)
    base = base.elem if isinstance(base, OptionalType) else base
    if isinstance(arg.default, EnumWord) and isinstance(base, BaseType) and base.name == "int":
        return str(ENUM_WORDS["int"][arg.default.word])
    return python_default(arg.type, arg.default)


def meta_name(schema) -> str:
    return f"{cpp.stem(schema)}_meta"


def meta_source(schema, op, returns_self: bool = False) -> str:
    """`@impl(m, "name")` + a Meta function whose outputs come from `op`'s semantics (or `self`)."""
    if returns_self:
        body = [f"return {schema.arguments[0].name}"]
    else:
        body = fake_body(op)
    head = f"@impl(m, {literal(schema.op_name)})\ndef {meta_name(schema)}({meta_parameters(schema)}):"
    return head + "\n" + "\n".join(f"    {line}" for line in body)  # a wrapped line carries its own indentation


def meta_function(entry: PluginOp) -> str:
    outputs = tuple(replace(out, index=i) for i, out in enumerate(entry.outputs))
    op = replace(entry.source, schema=entry.schema, outputs=outputs, tags=())
    return meta_source(entry.schema, op, returns_self=entry.kind == "inplace")


def doc_call(entry: PluginOp) -> str:
    text = entry.source.doc or f"torch_npu.{entry.name}: see op_plugin_functions.yaml for the schema."
    return f"_add_torch_npu_docstr(\n    {literal(entry.name)},\n    {docstring(text, '    ')},\n)"


# --- per spec op: kernel file and tests -------------------------------------------------------------


def op_context(spec: ProjectSpec, op, entries: list[PluginOp]) -> dict:
    main = entries[0]
    kernels = [kernel_function(e) for e in entries if e.kernel == "opapi"]
    examples = [line for example in op.examples for line in tuple_call_lines(op, example)]
    reference = textwrap.dedent(op.reference).strip("\n").split("\n") if op.reference else []
    checks = []
    for entry in entries:
        checks.append({
            "name": entry.name,
            "name_literal": literal(entry.name),
            "func_literal": literal(entry.func),
            "meta_function_literal": literal(meta_name(entry.schema)),
            "mutated_positions": [i for i, a in enumerate(entry.schema.positional) if a.is_write],
            "twin": entry.twin_of is not None,
            "cloned_positions": [i for i, a in enumerate(entry.schema.positional) if a.name in entry.cloned],
            "inplace_twin": entry.twin_of is not None and entry.source.schema.name.endswith("_"),
        })
    params = meta_parameters(main.schema)
    ops_table = []
    for entry, check in zip(entries, checks):
        items = [check["name_literal"], string_call("(", entry.func, ")", "        "), check["meta_function_literal"],
                 str(check["mutated_positions"]), str(check["cloned_positions"]), str(check["inplace_twin"])]
        ops_table.append(call("", items, "    ", ","))
    return {
        "index": op.index,
        "name": main.name,
        "file_stem": cpp.stem(main.schema),
        "camel": camel(op.schema.name),
        "class_name": "TestNpu" + camel(op.schema.name),
        "kernel_file": f"{camel(op.schema.name)}KernelNpuOpApi.cpp" if kernels else "",
        "kernel_functions": kernels,
        "acl_op": main.config.acl_op,
        "kernel_kind": main.kernel,
        "example_lines": examples,
        "has_examples": bool(examples),
        "has_reference": bool(reference),
        "reference_def": f"def _reference({params}):",
        "reference_body": reference,
        "ops_table": ops_table,
        "spec_op": f"ops[{op.index}]",
        "scratch_namespace": f"{SCRATCH_NAMESPACE}_{cpp.stem(main.schema)}",
    }


def render_files(spec: ProjectSpec, templates=None) -> list:
    """The contribution's files as PlannedFiles (yaml/Meta/docs generated; kernels and tests the user's); a
    file that renders empty is one this contribution does not need (no backward, no kernel)."""
    from ..render.templates import render_templates

    context = project_context(spec)
    jobs = [(PROJECT_TEMPLATE, context, "generated")]
    jobs += [(OP_TEMPLATE, {**context, "_op": op}, "user") for op in context["_opgen"]["ops"]]
    return render_templates(jobs, templates, skip_blank=True)
