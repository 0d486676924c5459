"""Template context of the op_plugin target: every YAML line, C++ line and Python line, computed here.

One shape/dtype rule from the spec is printed three times: as C++ for `gen_opapi` (torchnpugen
writes the kernel) or for the hand-written OpApi kernel, and as Python for the Meta function.
Nothing from the spec reaches generated code except checked identifiers, schema text (as a YAML
scalar or Python string literal), rules printed by the semantics printer and `new_params`
expressions checked to stay one C++ expression.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import replace
from pathlib import Path

import yaml

from ..render.examples import tuple_call_lines
from ..render.fakes import fake_body
from ..render.pyformat import call, literal, string_call
from ..render.signature import python_default
from ..schema.model import BaseType, OptionalType, strip_alias
from ..spec.model import RANDOM_TAG, ProjectSpec
from ..spec.op_plugin import ALL_VERSIONS
from . import compat, cpp, docs, faketest
from .clangformat import format_cpp
from .kernel import kernel_file
from .model import PluginOp, camel, plugin_ops
from .param_checks import param_checks
from .sizes import meta_size_lines, yaml_dtype, yaml_size

SCRATCH_NAMESPACE = "opgen_meta_check"
PROJECT_TEMPLATE, OP_TEMPLATE = "op_plugin", "op_plugin_op"


def yaml_scalar(text: str, quote: bool = False) -> str:
    """`text` as a YAML scalar as op-plugin writes them: plain when YAML reads it back unchanged (and `quote`
    is not asked), else single-quoted (`size: '{x.size(0)}'`; the repo never double-quotes a value)."""
    try:
        if not quote and yaml.safe_load(f"k: {text}") == {"k": text} and text == text.strip():
            return text
    except yaml.YAMLError:
        pass
    if "\n" in text or not text.isprintable():
        return json.dumps(text, ensure_ascii=False)  # a single-quoted scalar cannot hold a control character
    return "'" + text.replace("'", "''") + "'"


def versions_text(versions) -> str:
    if isinstance(versions, list):
        return f"[{versions[0]}, {versions[1]}]"
    return yaml_scalar(versions)


def by_spec_op(entries: list[PluginOp]) -> dict[int, list[PluginOp]]:
    """The entries of each spec op (the op, then its twin), by the op's index."""
    found: dict[int, list[PluginOp]] = {}
    for entry in entries:
        found.setdefault(entry.source.index, []).append(entry)
    return found


def public(entry: PluginOp) -> bool:
    """A public API of torch_npu (allowlisted, its signature tracked): exposed or `public_api`, not a twin."""
    return entry.twin_of is None and (entry.config.exposed or entry.config.public_api)


def _doc_calls(entries: list[PluginOp]) -> list[str]:
    """One docstring per torch_npu.<name> (the first overload's), none for a functional twin."""
    calls: dict[str, str] = {}
    for entry in entries:
        if entry.twin_of is None:
            calls.setdefault(docs.public_name(entry), docs.doc_call(entry))
    return list(calls.values())


def project_context(spec: ProjectSpec, style: Path | None = None) -> dict:
    entries = plugin_ops(spec)
    grouped = by_spec_op(entries)
    ops = [op_context(spec, op, grouped[op.index], style) for op in spec.ops]
    members = [compat.func_entry(e) for e in entries] + [m for e in entries if public(e) for m in compat.op_api_entries(e)]
    fake_tests = [faketest.fake_test_class(faketest.class_name(camel(op.schema.name)), grouped[op.index],
                                           grouped[op.index][0].config.devices) for op in spec.ops]
    return {
        "project_slug": "op_plugin_contribution",
        "_opgen": {
            "spec_text": spec.text,
            "all_version": "[" + ", ".join(ALL_VERSIONS) + "]",
            "yaml_entries": ["\n".join(yaml_entry(entry)) for entry in entries],
            "derivatives_entries": ["\n".join(lines) for lines in map(derivatives_entry, entries) if lines],
            "meta_functions": [meta_function(entry) for entry in entries],
            "doc_calls": _doc_calls(entries),
            "json_members": [compat.member_text(key, value) for key, value in members],
            "public_names": list(dict.fromkeys(entry.schema.name for entry in entries if public(entry))),
            "fake_tests": [text for text in fake_tests if text],
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
        lines += _gen_opapi_block(entry)
    return lines


def _gen_opapi_block(entry: PluginOp) -> list[str]:
    keys = gen_opapi_names(entry)
    tensors = _tensor_args(entry)
    lines = ["    gen_opapi:"]
    for out in entry.outputs:
        lines += [f"      {keys[out.name]}:", f"        size: {yaml_scalar(yaml_size(out.shape_rule, tensors))}",
                  f"        dtype: {yaml_scalar(yaml_dtype(out.dtype_rule, tensors))}"]
    params = list(entry.config.new_params) + [(c.local, c.value) for c in entry.conversions]
    if params:
        lines.append("      new_params:")
        lines += [f"        {name}: {yaml_scalar(value, quote=True)}" for name, value in params]
    local = {c.argument: c.local for c in entry.conversions}
    exec_args = [keys.get(name, local.get(name, name)) for name in entry.exec_args]
    # the aclnn name alone passes the schema's arguments in order, then the outputs (torchnpugen's default)
    default = [a.name for a in entry.schema.arguments] + [keys[out.name] for out in entry.outputs]
    lines.append(f"      exec: {yaml_scalar(', '.join([entry.aclnn] + ([] if exec_args == default else exec_args)))}")
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


def meta_source(schema, op, returns_self: bool = False, checks: tuple[str, ...] = ()) -> str:
    """`@impl(m, "name")` + a Meta function whose outputs come from `op`'s semantics (or `self`), after the
    parameter `checks` (`torch._check(...)` lines)."""
    if returns_self:
        body = [*checks, f"return {schema.arguments[0].name}"]
    else:
        body = [*checks, *fake_body(op, sizes=meta_size_lines)]
    head = f"@impl(m, {literal(schema.op_name)})\ndef {meta_name(schema)}({meta_parameters(schema)}):"
    return head + "\n" + "\n".join(f"    {line}" for line in body)  # a wrapped line carries its own indentation


# the Meta module's own table of torch_npu's dtype codes (op_plugin/python/meta/_meta_registrations.py)
MODULE_DTYPE_MAP = "TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP"


def meta_function(entry: PluginOp, module_codes: dict[int, str] | None = None) -> str:
    """The Meta function; its dtype codes read from the module's MODULE_DTYPE_MAP (`module_codes`: code -> dtype
    name) where that map gives every code of the spec the same dtype, else from a table of its own."""
    outputs = tuple(replace(out, index=i) for i, out in enumerate(entry.outputs))
    op = replace(entry.source, schema=entry.schema, outputs=outputs, tags=())
    checks = tuple(check.meta_check(entry.name) for check in param_checks(entry.outputs))
    text = meta_source(entry.schema, op, returns_self=entry.kind == "inplace", checks=checks)
    return _module_dtype_map(text, entry, module_codes) if module_codes else text


def _module_dtype_map(text: str, entry: PluginOp, module_codes: dict[int, str]) -> str:
    table = next((node.table for out in entry.outputs for rule in out.rules for node in rule.node.walk()
                  if type(node).__name__ == "FromCode"), None)
    if not table or any(module_codes.get(code) != name for code, name in table):
        return text
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if re.match(r"    dtype_codes_* = \{", line)), None)
    if start is None:
        return text
    name = lines[start].split(" = ", 1)[0].strip()
    end = start if lines[start].endswith("}") else next(i for i in range(start, len(lines)) if lines[i] == "    }")
    body = "\n".join(lines[:start] + lines[end + 1:])
    return re.sub(rf"\b{re.escape(name)}\[", f"{MODULE_DTYPE_MAP}[", body)


def module_dtype_codes(meta_text: str | None) -> dict[int, str]:
    """MODULE_DTYPE_MAP of the checkout's Meta module as {code: dtype name}; empty when it has none."""
    import ast

    if not meta_text or MODULE_DTYPE_MAP not in meta_text:
        return {}
    try:
        tree = ast.parse(meta_text)
    except SyntaxError:
        return {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [MODULE_DTYPE_MAP]
                and isinstance(node.value, ast.Dict)):
            return {key.value: value.attr for key, value in zip(node.value.keys, node.value.values)
                    if isinstance(key, ast.Constant) and isinstance(key.value, int) and isinstance(value, ast.Attribute)}
    return {}


# --- per spec op: kernel file and tests -------------------------------------------------------------


def op_context(spec: ProjectSpec, op, entries: list[PluginOp], style: Path | None = None) -> dict:
    """One spec op's files; the kernel formatted with clang-format (the target's `style` file, else opgen's
    statement of op-plugin's rules) where clang-format is installed."""
    main = entries[0]
    kernels = [e for e in entries if e.kernel == "opapi"]
    source = kernel_file(kernels, main.config.acl_op) if kernels else ""
    source = (format_cpp(source, style) or source) if source else ""
    examples = [line for example in op.examples for line in tuple_call_lines(op, example)]
    reference = textwrap.dedent(op.reference).strip("\n").split("\n") if op.reference else []
    ops_table, npu_ops_table = [], []
    for entry in entries:
        cloned = [i for i, a in enumerate(entry.schema.positional) if a.name in entry.cloned]
        inplace_twin = entry.twin_of is not None and entry.source.schema.name.endswith("_")
        written = [i for i, a in enumerate(entry.schema.positional) if a.is_write]
        npu_ops_table.append(f"({literal(entry.name)}, {written}, {cloned}, {inplace_twin}),")
        items = [literal(entry.name), string_call("(", entry.func, ")", "        "), literal(meta_name(entry.schema)),
                 str([i for i, a in enumerate(entry.schema.positional) if a.is_write]),
                 str([i for i, a in enumerate(entry.schema.positional) if a.name in entry.cloned]),
                 str(entry.twin_of is not None and entry.source.schema.name.endswith("_"))]
        ops_table.append(call("", items, "    ", ","))
    return {
        "index": op.index,
        "name": main.name,
        "file_stem": cpp.stem(main.schema),
        "camel": camel(op.schema.name),
        "class_name": "TestNpu" + camel(op.schema.name),
        "kernel_file": f"{camel(op.schema.name)}KernelNpuOpApi.cpp" if kernels else "",
        "kernel_source": source,
        "kernel_kind": main.kernel,
        "devices": repr(list(main.config.devices)),
        "example_lines": examples,
        "has_examples": bool(examples),
        "has_reference": bool(reference),
        "reference_def": f"def _reference({meta_parameters(main.schema)}):",
        "reference_body": reference,
        "ops_table": ops_table,
        "npu_ops_table": npu_ops_table,
        "spec_op": f"ops[{op.index}]",
        "scratch_namespace": f"{SCRATCH_NAMESPACE}_{cpp.stem(main.schema)}",
        "doc_page": docs.page(main) if main.config.exposed else "",
        "doc_page_name": f"torch_npu-{docs.public_name(main)}.md" if main.config.exposed else "",
    }


def render_files(spec: ProjectSpec, templates=None, style: Path | None = None) -> list:
    """The contribution's files as PlannedFiles (yaml/Meta/docs generated; kernels and tests the user's); a
    file that renders empty is one this contribution does not need (no backward, no kernel)."""
    from ..render.templates import render_templates

    context = project_context(spec, style)
    jobs = [(PROJECT_TEMPLATE, context, "generated")]
    jobs += [(OP_TEMPLATE, {**context, "_op": op}, "user") for op in context["_opgen"]["ops"]]
    return render_templates(jobs, templates, skip_blank=True)
