"""The template context: every name, literal and line of code the templates paste, computed here.

Pure data (dicts, lists, strings, bools) so tests can inspect it without rendering, and so the
templates stay dumb. Text from the spec only reaches generated code as a Python string literal
(`literal`, `docstring`) or after validation as an identifier; nothing from the spec is ever
pasted raw into code, a comment or a template.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import replace

from .. import __version__
from ..contract import custom_op_explicit_schema_reasons, mutates_args
from ..drift import owned_functions, schema_parameters
from ..schema.model import BaseType, EnumWord, OptionalType, format_default, strip_alias
from ..schema.types import python_annotation
from ..spec.autograd import backward_header, function_source, setup_context_header
from ..spec.fake import fake_and_expected
from ..spec.model import DEVICES, Example, OpSpec, ProjectSpec, TensorValue

DEVICE_NAMES = {"npu": "NPU", "cuda": "CUDA", "cpu": "CPU"}


def literal(text: str) -> str:
    """A Python string literal for any text (quotes, backslashes, newlines, braces stay inert)."""
    return json.dumps(text, ensure_ascii=True)


def docstring(text: str, indent: str = "") -> str:
    """A docstring literal: readable triple quotes when that is safe, an escaped literal otherwise."""
    text = text.strip()
    safe = (text and all(ch.isprintable() or ch == "\n" for ch in text) and "\\" not in text
            and '"""' not in text and not text.endswith('"') and text.isascii())
    if not safe:
        return literal(text or "(no description)")
    lines = text.split("\n")
    if len(lines) == 1:
        return f'"""{text}"""'
    body = "\n".join((indent + line) if line.strip() else "" for line in lines[1:])
    return f'"""{lines[0]}\n{body}\n{indent}"""'


def project_context(spec: ProjectSpec) -> dict:
    """The cookiecutter context of a project: `project_slug` plus everything else under `_opgen`
    (cookiecutter renders underscore-free values through Jinja; `_opgen` it passes verbatim)."""
    ops = [op_context(spec, op) for op in spec.ops]
    device = spec.device
    return {
        "project_slug": spec.package,
        "_opgen": {
            "opgen_version": __version__,
            "namespace": spec.namespace,
            "namespace_literal": literal(spec.namespace),
            "package": spec.package,
            "style": spec.style,
            "device": device,
            "device_name": DEVICE_NAMES[device],
            "dispatch_key": DEVICES[device],
            "dispatch_key_literal": literal(DEVICES[device]),
            "npu": device == "npu",
            "cuda": device == "cuda",
            "spec_text": spec.text,
            "uses_number": any(op["uses_number"] for op in ops),
            "uses_math": any(op["autograd_uses_math"] for op in ops),
            # the ops without `autograd:` (named in the test file's tier list: requires_grad is not exercised)
            "no_autograd_note": _no_autograd_note([op["qualname"] for op in ops if not op["autograd"]]),
            "any_autograd": any(op["autograd"] for op in ops),
            "has_todo_fakes": any(op["todo_fake"] for op in ops),
            # the lowest torch the generated code runs on: torch.Tag.inplace/out came in 2.13;
            # auto_functionalized_v2 (the tests) in 2.6
            "torch_floor": "2.13" if any(op["tag"] for op in ops) else "2.6",
            "init_import": _wrapped_list("from .ops import ", sorted(op["function"] for op in ops), "(", ")"),
            "init_all": _wrapped_list("__all__ = ", [literal(n) for n in sorted(op["function"] for op in ops)],
                                      "[", "]"),
            "import_lines": sorted(line for op in ops for line in op["import_lines"]),
            "ops": ops,
            "npu_skip_reason": literal(f"the ops are generated for device {device!r}, not 'npu'"),
            "cuda_skip_reason": literal(f"the ops are generated for device {device!r}, not 'cuda'"),
        },
    }


def op_context(spec: ProjectSpec, op: OpSpec) -> dict:
    schema = op.schema
    stem = schema.name + (f"_{schema.overload}" if schema.overload else "")
    namespace = spec.namespace
    qualname = f"{namespace}::{schema.op_name}"
    overload = f"torch.ops.{namespace}.{schema.name}.{schema.overload_or_default}"
    param_list = _parameters(op)
    params = ", ".join(param_list)
    returns = _return_annotation(op)
    call = ", ".join(a.name if not a.kwarg_only else f"{a.name}={a.name}" for a in schema.arguments)
    missing = op.missing_semantics
    kernel_device = spec.device if spec.device != "cpu" else None
    package = spec.package
    device_kernel_path = f"{package}/kernels/{stem}_{spec.device}.py"
    cpu_kernel_path = f"{package}/kernels/{stem}_cpu.py"
    todo_path = f"{package}/fakes/{stem}.py"
    tag = op.aliasing_tag
    # With a tag, custom_op gets the schema spelled out: the aliased return must not depend on inference.
    explicit = custom_op_explicit_schema_reasons(schema) or bool(tag)
    mutated = mutates_args(schema)
    fake_lines, expected_lines = fake_and_expected(op) if not missing and not tag else ([], [])
    if tag:
        expected_lines = [_expected_returned(op)]
    examples = [line for example in op.examples for line in _example_lines(op, example)]
    reference = op.reference
    todo_message = _todo_message(op, qualname, todo_path) if missing else ""
    return {
        "index": op.index,
        "name": schema.name,
        "stem": stem,
        "function": stem,
        "qualname": qualname,
        "qualname_literal": literal(qualname),
        "op_name_literal": literal(schema.op_name),
        "overload": overload,
        "signature_literal": _signature_literal(schema.signature(with_namespace=False)),
        # (an argument of a call in a test function: 8 columns in when the call is wrapped)
        "schema_literal": _signature_literal(f"{namespace}::{schema.signature(with_namespace=False)}", " " * 8),
        "schema_field_literal": literal(f"ops[{op.index}].schema"),
        # tags (`ops[i].tags`): the aliased return is kept and torch generates the (trivial) fake
        "tag": tag,
        "tag_guard": _tag_guard(op, qualname, tag) if tag else "",
        "trivial_fake": bool(tag),
        "tag_fake_note": {"inplace": "it returns its first argument", "out": "it returns its out= arguments",
                          "": ""}[tag],
        "bounds_lines": _bounds_lines(op),
        "opcheck_utils": "OPCHECK_UTILS_DYNAMIC" if op.is_dynamic else "OPCHECK_UTILS",
        # lines naming the op, wrapped so that long op names keep them under the line length
        "custom_op_schema_line": string_call("schema=", _schema_tail(schema), ",", "    ") if explicit else "",
        "doc": docstring(op.doc or f"The {qualname} operator.", "    "),
        "params": params,
        "parameters": param_list,
        "call_args": [part for part in call.split(", ") if part],
        "returns": returns,
        "call": call,
        "mutates_args": tuple_text([literal(n) for n in mutated]),
        "mutable": bool(mutated),
        "side_effect": not schema.returns and not schema.is_mutable,
        "dynamic": op.is_dynamic,
        "uses_number": "Number" in params or "Number" in returns,
        # kernels (user-owned files, created once)
        "kernel_device": kernel_device,
        "device_kernel": f"{stem}_{spec.device}",
        "device_type_literal": literal(spec.device),
        "device_kernel_raise": string_call("raise NotImplementedError(", f"{qualname} has no "
                                           f"{DEVICE_NAMES[spec.device]} kernel yet: write it in {device_kernel_path}",
                                           ")", "    "),
        "cpu_kernel": f"{stem}_cpu",
        "cpu_kernel_body": _reference_body(reference) if reference else [],
        "cpu_kernel_raise": string_call("raise NotImplementedError(", f"{qualname} has no CPU reference kernel yet: "
                                        f"write it in {cpu_kernel_path} (or give ops[{op.index}].reference in "
                                        "opgen.yaml before the first generation)", ")", "    "),
        "cpu_kernel_imports": _imports(reference or "", params + returns),
        "has_reference": reference is not None,
        # backward formula (`ops[i].autograd`): generated functions, user code validated at load time
        "autograd": op.autograd is not None,
        "has_setup_context": op.autograd is not None and op.autograd.setup_context is not None,
        "autograd_code": _autograd_code(op, stem),
        "autograd_uses_math": op.autograd is not None and "math." in (op.autograd.backward
                                                                      + (op.autograd.setup_context or "")),
        "no_float_skip": string_call("pytest.skip(", f"no example of {qualname} has a floating-point tensor input, so "
                                     f"there is nothing to differentiate: add one to ops[{op.index}].examples", ")",
                                     "        "),
        "import_lines": [_import(f".kernels.{stem}_cpu", f"{stem}_cpu")]
        + ([_import(f".kernels.{stem}_{spec.device}", f"{stem}_{spec.device}")] if kernel_device else [])
        + ([_import(f".fakes.{stem}", f"{stem}_fake")] if missing else []),
        # fake function
        "todo_fake": bool(missing),
        "todo_fake_function": f"{stem}_fake",
        "todo_raise": string_call("raise NotImplementedError(", todo_message, ")", "    "),
        "todo_fields": missing,
        "todo_by_hand": bool(op.undescribable_returns),
        "fake_lines": fake_lines,
        "expected_lines": expected_lines,
        # tests
        "example_lines": examples,
        "expect_lines": _expect_lines(op),
        "signature_asserts": [call_text("_assert_signature", [f"{spec.package}.{path[len(spec.package) + 1:-3].replace('/', '.')}.{name}",
                                                             literal(path), literal(f"ops[{op.index}].schema"),
                                                             _signature_literal(schema_parameters(op), " " * 8)], "    ")
                              for path, name in owned_functions(spec, op)],
        **_two_sizes(op),
        "no_two_sizes_skip": string_call("pytest.skip(", f"no two calls of {qualname} that differ only in sizes, and "
                                         f"opgen cannot derive one: add examples of two sizes to ops[{op.index}].examples",
                                         ")", "    "),
        "no_expect_skip": string_call("pytest.skip(", f"no expected values for {qualname}: add `expect:` to an "
                                      f"example in ops[{op.index}].examples (see docs/spec.md)", ")", "    "),
        "has_examples": bool(op.examples),
        "uses_generator": any(_random_tensors(value) for example in op.examples for value in example.values.values()),
        "derived_example": bool(op.examples) and op.examples[0].derived,
        "no_example_skip": string_call("pytest.skip(", f"no example inputs for {qualname}: add ops[{op.index}].examples "
                                       "to opgen.yaml", ")", "    "),
        "mutated_keys": _mutated_keys(op),
        # the arguments of the test helpers' calls (formatted by the templates' python.j2 macros)
        "spec_field_literal": literal(f"ops[{op.index}]"),
        "cpu_kernel_path_literal": literal(cpu_kernel_path),
        "output_fields": _output_fields(op),
        "positional_names": tuple_text([literal(a.name) for a in schema.positional]),
        "returned_keys": _returned_keys(op) if tag else "",
        "tolerances": _tolerances(op),
        "tag_names": [f"torch.Tag.{t}" for t in (*op.tags, "pt2_compliant_tag")],
        # the tags the op is defined with (issue 21: `nondeterministic_seeded` as well as inplace/out)
        "define_tags": tuple_text([f"torch.Tag.{t}" for t in (*op.tags, "pt2_compliant_tag")]),
        "custom_op_tags": (f"torch.Tag.{op.tags[0]}" if len(op.tags) == 1
                           else tuple_text([f"torch.Tag.{t}" for t in op.tags]) if op.tags else ""),
        "random": op.random,
        "no_device_kernel_message": literal(f"ops.py registers no {DEVICE_NAMES[spec.device]} kernel"),
        "dynamic_skip": string_call("@pytest.mark.skip(reason=", f"{qualname} has a data-dependent output size "
                                    "(`dynamic`); a captured graph cannot return a size known only at run time", ")"),
    }


LINE_LENGTH = 120


def _todo_message(op: OpSpec, qualname: str, todo_path: str) -> str:
    """What the TODO fake function raises: the spec fields to fill, or (for returns the semantics cannot
    describe) that the fake is written by hand."""
    if op.undescribable_returns:
        returns = ", ".join(repr(str(r.type)) for r in op.schema.returns)
        return (f"{qualname} has no fake function: the spec's semantics cannot describe its returns ({returns}), so "
                f"write the fake function by hand in {todo_path}")
    return (f"{qualname} has no fake function: fill {', '.join(op.missing_semantics)} in opgen.yaml and re-run "
            f"`opgen new`, or write the fake function by hand in {todo_path}")


def define(name: str, params: list[str], returns: str) -> str:
    """A `def` line, wrapped one parameter per line when it would be too long."""
    line = f"def {name}({', '.join(params)}) -> {returns}:"
    if len(line) <= LINE_LENGTH:
        return line
    return f"def {name}(\n" + "".join(f"    {param},\n" for param in params) + f") -> {returns}:"


def string_call(prefix: str, text: str, suffix: str, indent: str = "") -> str:
    """`prefix"text"suffix`, with the literal split over lines (implicit concatenation) when too long.
    `indent` is where the line starts in the generated file (the result's first line carries none)."""
    line = prefix + literal(text) + suffix
    if len(indent + line) <= LINE_LENGTH:
        return line
    pieces, current = [], ""
    separator = ", " if ", " in text else " "
    for part in text.split(separator):
        candidate = part if not current else current + separator + part
        if current and len(literal(candidate)) > LINE_LENGTH - 8 - len(indent):
            pieces.append(current + separator)
            current = part
        else:
            current = candidate
    pieces.append(current)
    return prefix + "\n" + "".join(f"{indent}    {literal(piece)}\n" for piece in pieces) + indent + suffix


def call_text(head: str, args: list[str], indent: str = "", tail: str = "") -> str:
    """`head(a, b)tail`, or one argument per line (with a trailing comma) when that line would be too long."""
    line = f"{head}({', '.join(args)}){tail}"
    if len(indent + line) <= LINE_LENGTH:
        return line
    inner = "".join(f"{indent}    {arg},\n" for arg in args)
    return f"{head}(\n{inner}{indent}){tail}"


def _wrapped_list(prefix: str, items: list[str], opening: str, closing: str) -> str:
    """`prefix[a, b]` (or `prefix a, b` for an import), one item per line when too long."""
    inline = ", ".join(items)
    if len(prefix) + len(inline) + 2 <= LINE_LENGTH:
        return f"{prefix}{inline}" if opening == "(" else f"{prefix}{opening}{inline}{closing}"
    return f"{prefix}{opening}\n" + "".join(f"    {item},\n" for item in items) + closing


def _import(module: str, name: str) -> str:
    line = f"from {module} import {name}"
    return line if len(line) <= LINE_LENGTH else f"from {module} import (\n    {name},\n)"


def tuple_text(items: list[str]) -> str:
    if not items:
        return "()"
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _no_autograd_note(qualnames: list[str]) -> list[str]:
    """Lines of the test file's tier list saying why requires_grad is not exercised for these ops."""
    if not qualnames:
        return []
    text = (f"requires_grad is not exercised for {', '.join(qualnames)}: without `autograd:` in opgen.yaml no "
            "backward is registered (a Library op would get torch's warn-only autograd fallback and silently "
            "wrong gradients, a custom_op raises on backward), so there is no formula to check.")
    return textwrap.wrap(text, LINE_LENGTH - 10, break_on_hyphens=False)


def _autograd_code(op: OpSpec, stem: str) -> str:
    """The setup_context and backward functions (the same text `opgen.spec.load` validated)."""
    if op.autograd is None:
        return ""
    functions = []
    if op.autograd.setup_context is not None:
        header = setup_context_header(op.schema, f"_{stem}_setup_context", op.autograd.setup_context)
        functions.append(function_source(header, op.autograd.setup_context))
    functions.append(function_source(backward_header(op.schema, f"_{stem}_backward"), op.autograd.backward))
    return "\n\n\n".join(functions)


def _signature_literal(signature: str, indent: str = "    ") -> str:
    """A schema as a string literal argument on a line of its own at `indent`, split over lines when too long."""
    text = literal(signature)
    return text if len(f"{indent}{text},") <= LINE_LENGTH else string_call("(", signature, ")", indent)


def _tag_guard(op: OpSpec, qualname: str, tag: str) -> str:
    """Module-level code refusing to import on a torch without the tag (torch_npu pins older torch)."""
    field = f"ops[{op.index}].tags"
    message = (f"{qualname} is tagged torch.Tag.{tag} ({field} in opgen.yaml), but this torch has no "
               f"torch.Tag.{tag} (it came in torch 2.13): upgrade torch, or remove {field} and re-run `opgen new`, "
               "which then drops the aliased return")
    return f"if not hasattr(torch.Tag, {literal(tag)}):\n    " + string_call("raise RuntimeError(", message, ")", "    ")


def _returned_keys(op: OpSpec) -> str:
    """Where each return of a tagged op comes from: the position (or keyword name) of its mutated argument."""
    keys = {a.name: str(i) for i, a in enumerate(op.schema.positional)}
    keys.update({a.name: literal(a.name) for a in op.schema.kwarg_only})
    return tuple_text([keys[out.returns_argument] for out in op.outputs])


def _expected_returned(op: OpSpec) -> str:
    items = [f"({out.returns_argument}.shape, {out.returns_argument}.dtype)" for out in op.outputs]
    return "return [" + ", ".join(items) + "]"


def _schema_tail(schema) -> str:
    """The schema without its name, as `custom_op(schema=...)` wants it."""
    text = schema.signature(with_namespace=False)
    return text[text.index("("):]


def _parameters(op: OpSpec) -> list[str]:
    parts = []
    star = False
    for arg in op.schema.arguments:
        if arg.kwarg_only and not star:
            parts.append("*")
            star = True
        annotation = python_annotation(arg.type) or "object"
        text = f"{arg.name}: {annotation}"
        if arg.has_default:
            text += f" = {python_default(arg.type, arg.default)}"
        parts.append(text)
    return parts


def python_default(t, value) -> str:
    """A schema default as Python source."""
    if value is None:
        return "None"
    if isinstance(value, EnumWord):
        from ..schema.model import SCALAR_TYPE_WORDS

        base = strip_alias(t)
        base = base.elem if isinstance(base, OptionalType) else base
        if isinstance(base, BaseType) and base.name == "ScalarType" and value.word in SCALAR_TYPE_WORDS:
            number = SCALAR_TYPE_WORDS[value.word]
            names = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                     7: "float64", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16"}
            return f"torch.{names[number]}"
        return repr(value.word)
    if isinstance(value, str):
        return literal(value)
    if isinstance(value, tuple):
        return "(" + "".join(python_default(t, v) + ", " for v in value).rstrip(" ") + ")" if value else "()"
    return format_default(value)


def _return_annotation(op: OpSpec) -> str:
    returns = op.schema.returns
    if not returns:
        return "None"
    parts = [python_annotation(r.type) or "object" for r in returns]
    if len(parts) == 1 and not op.schema.returns_tuple:
        return parts[0]
    return "tuple[" + ", ".join(parts) + "]"


def _reference_body(reference: str) -> list[str]:
    return textwrap.dedent(reference).strip("\n").split("\n")


def _imports(body: str, signature: str) -> list[str]:
    """Imports a kernel file needs: torch when the code names it, math likewise."""
    imports = []
    if "math." in body:
        imports.append("import math")
    if "torch" in body or "torch" in signature:
        imports.append("import torch")
    if "Number" in signature:
        imports.append("from torch.types import Number")
    return imports


def _bounds_lines(op: OpSpec) -> list[str]:
    """`return [(min, max), ...]` of every `dynamic` size in the op's shape rules (in the order the fake
    function creates them), None where the spec gives no bound or the bound reads another output."""
    from ..spec.semantics_ir import Dynamic, PyContext, _Py

    if op.missing_semantics or op.aliasing_tag:
        return []
    items = []
    printer = _Py(PyContext(reserved={a.name for a in op.schema.arguments}))
    for out in op.outputs:
        pending = [out.shape_rule.node]
        while pending:
            node = pending.pop(0)
            if node is None:
                continue
            if isinstance(node, Dynamic):
                bounds = [None if bound is None or out.shape_rule.uses_outputs else printer.at(bound, 0)
                          for bound in (node.lower, node.upper)]
                items.append(f"({bounds[0]}, {bounds[1]})")
            elif hasattr(node, "children"):
                pending[:0] = [child for child in node.children() if child is not None]
    if not items or printer.statements:
        return []
    return ["return [" + ", ".join(items) + "]"]


def _two_sizes(op: OpSpec) -> dict:
    """Two calls for the dynamic-shape tier: two examples that differ only in tensor sizes, else example 0
    and a copy with its last size D doubled in every tensor whose last size is D (exact values repeated)."""
    structure = [_structure(example.values) for example in op.examples]
    for a in range(len(op.examples)):
        for b in range(a + 1, len(op.examples)):
            if structure[a] == structure[b] and op.examples[a].values != op.examples[b].values:
                return {"two_sizes_lines": [f"_{_stem(op)}_calls()[{a}],", f"_{_stem(op)}_calls()[{b}],"],
                        "two_sizes_doc": f"ops[{op.index}].examples[{a}] and [{b}]", "two_sizes_derived": False,
                        "two_sizes_uses_generator": False}
    none = {"two_sizes_lines": [], "two_sizes_doc": "", "two_sizes_derived": False, "two_sizes_uses_generator": False}
    if not op.examples:
        return none
    values = op.examples[0].values
    tensors = [t for value in values.values() for t in _tensor_values(value)]
    random = [t for t in tensors if t.shape]
    first = max(random, key=lambda t: len(t.shape)) if random else next((t for t in tensors if _last(t)), None)
    last = _last(first) if first is not None else None
    if not last or last < 2:
        return none
    doubled = {name: _doubled(value, last) for name, value in values.items()}
    lines = [line for example in (op.examples[0], Example(doubled)) for line in _example_lines(op, example)]
    return {"two_sizes_lines": lines, "two_sizes_doc": f"ops[{op.index}].examples[0], and it with last size "
            f"{last} doubled (by opgen)", "two_sizes_derived": True,
            "two_sizes_uses_generator": any(t.shape is not None for t in tensors)}


def _stem(op: OpSpec) -> str:
    return op.schema.name + (f"_{op.schema.overload}" if op.schema.overload else "")


def _structure(values: dict) -> tuple:
    """What must be equal for two calls to share one dynamic graph: everything but tensor sizes."""
    def key(value):
        if isinstance(value, TensorValue):
            return ("tensor", value.dtype, len(value.shape) if value.shape is not None else _rank(value.values))
        if isinstance(value, tuple):
            return tuple(key(v) for v in value)
        return value
    return tuple(sorted((name, repr(key(value))) for name, value in values.items()))


def _tensor_values(value) -> list:
    if isinstance(value, TensorValue):
        return [value]
    if isinstance(value, tuple):
        return [t for v in value for t in _tensor_values(v)]
    return []


def _rank(values) -> int:
    return 1 + _rank(values[0]) if isinstance(values, tuple) and values else int(isinstance(values, tuple))


def _last(tensor: TensorValue) -> int | None:
    if tensor.shape is not None:
        return tensor.shape[-1] if tensor.shape else None
    values = tensor.values
    if not isinstance(values, tuple):
        return None
    while values and isinstance(values[0], tuple):
        values = values[0]
    return len(values)


def _doubled(value, last: int):
    if isinstance(value, tuple):
        return tuple(_doubled(v, last) for v in value)
    if not isinstance(value, TensorValue) or _last(value) != last:
        return value
    if value.shape is not None:
        return replace(value, shape=(*value.shape[:-1], 2 * last))

    def repeat(values):
        return values + values if not values or not isinstance(values[0], tuple) else tuple(repeat(v) for v in values)
    return replace(value, values=repeat(value.values))


def _output_fields(op: OpSpec) -> str:
    """The spec field describing each output, for the generated tests' messages."""
    fields = [f"ops[{op.index}].outputs.{out.name}" if out.returns_argument is None
              else f"ops[{op.index}].schema (returns {out.returns_argument})" for out in op.outputs]
    return tuple_text([literal(field) for field in fields])


def _tolerances(op: OpSpec) -> list[str]:
    """`tolerances={torch.float16: (rtol, atol)}` from `ops[i].tolerances`, or nothing."""
    if not op.tolerances:
        return []
    return ["tolerances={" + ", ".join(f"torch.{dtype}: ({rtol!r}, {atol!r})" for dtype, rtol, atol in op.tolerances)
            + "}"]


def _expect_lines(op: OpSpec) -> list[str]:
    """One tuple per `expect:` entry (see `_assert_expected` in the test template), wrapped to the line length."""
    lines = []
    for number, example in enumerate(op.examples):
        for item in example.expect:
            argument = None if item.argument is None else (
                literal(item.argument) if isinstance(item.argument, str) else str(item.argument))
            rows = None if item.rows is None else "{" + ", ".join(f"{row}: {_numbers(values)}"
                                                                  for row, values in item.rows) + "}"
            parts = [str(number), literal(item.name), repr(item.output), str(argument), repr(item.element),
                     repr(item.length), _numbers(item.values) if item.rows is None else "None", str(rows),
                     repr(item.rtol), repr(item.atol)]
            line = "(" + ", ".join(parts) + "),"
            if len(line) + 8 <= LINE_LENGTH:
                lines.append(line)
            else:
                lines += ["("] + [f"    {part}" for piece in parts for part in _wrap_value(piece + ",", 12)] + ["),"]
    return lines


def _numbers(values) -> str:
    """Expected numbers as Python source (nan and inf spelled as float(...))."""
    if isinstance(values, tuple):
        return "[" + ", ".join(_numbers(v) for v in values) + "]"
    if isinstance(values, float) and not math.isfinite(values):
        return f'float("{values}")'
    return repr(values)


def _wrap_value(text: str, indent: int) -> list[str]:
    """`text` (a value ending in ","), its top-level list or dict broken one item per line, recursively."""
    if len(text) + indent <= LINE_LENGTH or text[0] not in "[{":
        return [text]
    closing = text[-2]
    items = _split_top_level(text[1:-2])
    out = [text[0]]
    for item in items:
        if text[0] == "{" and ": " in item and len(item) + indent + 5 > LINE_LENGTH:
            key, value = item.split(": ", 1)
            inner = _wrap_value(value + ",", indent + 4)
            out += [f"    {key}: {inner[0]}"] + [f"    {line}" for line in inner[1:]]
        else:
            out += [f"    {line}" for line in _wrap_value(item + ",", indent + 4)]
    return out + [closing + ","]


def _mutated_keys(op: OpSpec) -> str:
    keys = []
    for index, arg in enumerate(op.schema.positional):
        if arg.is_write:
            keys.append(str(index))
    keys += [literal(a.name) for a in op.schema.kwarg_only if a.is_write]
    return tuple_text(keys)


# --- example inputs -------------------------------------------------------------------------------


def _example_lines(op: OpSpec, example: Example) -> list[str]:
    """`((positional...), {keyword: ...}),` building one call's inputs from generator `g`, wrapped if long."""
    values = example.values
    positional = list(op.schema.positional)
    last_given = max((i for i, a in enumerate(positional) if a.name in values), default=-1)
    args = []
    for arg in positional[: last_given + 1]:
        if arg.name in values:
            args.append(_value(values[arg.name]))
        else:
            args.append(python_default(arg.type, arg.default))
    kwargs = [f"{literal(a.name)}: {_value(values[a.name])}" for a in op.schema.kwarg_only if a.name in values]
    args_text = "(" + "".join(a + ", " for a in args).rstrip(" ") + ")" if args else "()"
    line = f"({args_text}, {{{', '.join(kwargs)}}}),"
    if len(line) + 8 <= LINE_LENGTH:
        return [line]
    lines = ["(", "    ("]
    lines += [part for arg in args for part in _fit(f"        {arg},", 8)]
    if kwargs:
        lines += ["    ),", "    {"]
        lines += [part for kwarg in kwargs for part in _fit(f"        {kwarg},", 8)]
        lines += ["    },", "),"]
    else:
        lines += ["    ),", "    {},", "),"]
    return lines


def _random_tensors(value) -> bool:
    if isinstance(value, TensorValue):
        return value.shape is not None
    return isinstance(value, tuple) and any(_random_tensors(v) for v in value)


def _fit(line: str, indent: int) -> list[str]:
    """`line` (an argument ending in ","), with a long list broken one element per line."""
    if len(line) + indent <= LINE_LENGTH:
        return [line]
    stripped = line.strip()
    lead = line[: len(line) - len(line.lstrip())]
    if stripped.startswith("[") and stripped.endswith("],"):
        items = _split_top_level(stripped[1:-2])
        return [f"{lead}["] + [f"{lead}    {item}," for item in items] + [f"{lead}],"]
    if stripped.startswith("torch.tensor([") and stripped.endswith("),"):  # exact values: one row per line
        values, *rest = _split_top_level(stripped[len("torch.tensor("):-2])
        return ([f"{lead}torch.tensor(", f"{lead}    ["] + [f"{lead}        {item}," for item in
                                                            _split_top_level(values[1:-1])]
                + [f"{lead}    ],"] + [f"{lead}    {item}," for item in rest] + [f"{lead}),"])
    return [line]


def _split_top_level(text: str) -> list[str]:
    """Split `a, b(c, d), [e, f]` at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:index].strip())
            start = index + 1
    if text[start:].strip():
        items.append(text[start:].strip())
    return items


def _value(value) -> str:
    if isinstance(value, TensorValue):
        if value.shape is not None:
            return f"_random({tuple(value.shape)!r}, torch.{value.dtype}, g)"
        return f"torch.tensor({_nested(value.values)}, dtype=torch.{value.dtype})"
    if isinstance(value, tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, EnumWord):
        return f"torch.{value.word}"
    if isinstance(value, str):
        return literal(value)
    if isinstance(value, float):
        return repr(value)
    return repr(value)


def _nested(values) -> str:
    if isinstance(values, tuple):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    return repr(values)
