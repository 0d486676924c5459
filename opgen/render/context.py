"""The template context: every name, literal and line of code the templates paste, computed here.

Built from small typed pieces, one per concern (the op's names, its files, its signature, its registration,
kernels, fake, backward and tests), then turned into plain data (dicts, lists, strings, bools) so tests can
inspect it without rendering and cookiecutter can store it. Text from the spec only reaches generated code as
a Python string literal (`literal`, `docstring`) or after validation as an identifier; nothing from the spec is
ever pasted raw into code, a comment or a template.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .. import __version__
from ..contract import custom_op_explicit_schema_reasons, mutates_args
from ..layout import op_files, op_stem
from ..registration_styles import STYLES
from ..schema.model import ListType, OptionalType, strip_alias
from ..spec.autograd import backward_header, function_source, setup_context_header
from ..spec.model import DEVICES, OpSpec, ProjectSpec
from ..spec.semantics import promoted_arguments
from . import without_autograd
from .examples import call_lines, expected_lines, two_sizes, uses_draws, uses_generator
from .fakes import contiguity_checks, rule_code
from .fusions import fusion_code
from .kernel_code import kernel_lines, reference_lines
from .pyformat import (
    LINE_LENGTH,
    call,
    comment_lines,
    define,
    docstring,
    import_line,
    literal,
    string_call,
    string_value,
    tuple_text,
    wrapped_list,
)
from .signature import argument_default, signature

# The oldest torch line the generated projects are proven on (benchmarks/torch_matrix.py; torch_npu's 2.1 line
# has no torch.library.custom_op, register_fake or auto_functionalized_v2): older ones are refused at import
TORCH_PROVEN = "2.6"

DEVICE_NAMES = {"npu": "NPU", "cuda": "CUDA", "cpu": "CPU"}


def data(piece) -> dict:
    """A piece of the context as plain data (tuples become lists), as cookiecutter stores it."""
    return json.loads(json.dumps(asdict(piece)))


def project_context(spec: ProjectSpec) -> dict:
    """The cookiecutter context of a project: `project_slug` plus everything else under `_opgen`
    (cookiecutter renders underscore-free values through Jinja; `_opgen` it passes verbatim)."""
    ops = [op_context(spec, op) for op in spec.ops]
    device = spec.device
    functions = sorted(op["stem"] for op in ops)
    return {
        "project_slug": spec.package,
        "_opgen": {
            "opgen_version": __version__,
            "namespace": spec.namespace,
            "namespace_literal": literal(spec.namespace),
            "package": spec.package,
            "adopt": spec.adopt,
            "style": spec.style,
            "registration_api": STYLES[spec.style].api,
            "device": device,
            "device_name": DEVICE_NAMES[device],
            "dispatch_key": DEVICES[device],
            "dispatch_key_literal": literal(DEVICES[device]),
            "npu": device == "npu",
            "spec_text": spec.text,
            "uses_number": any(op["signature"]["uses_number"] for op in ops),
            "uses_math": any(op["autograd"]["uses_math"] for op in ops),
            "has_todo_fakes": any(op["fake"]["todo"] for op in ops),
            "reference_imports": sorted({line for op in ops for line in op["reference"]["imports"]}),
            # the lowest torch the generated code runs on: torch.Tag.inplace/out came in 2.13;
            # auto_functionalized_v2 (the tests) in 2.6
            "torch_floor": "2.13" if any(op["registration"]["tag"] for op in ops) else TORCH_PROVEN,
            "torch_proven": TORCH_PROVEN,
            "opgen_requirement": opgen_requirement(),  # the tests' checks (opgen.testing)
            "init_import": wrapped_list("from .ops import ", functions, "(", ")"),
            "init_all": wrapped_list("__all__ = ", [literal(n) for n in functions], "[", "]"),
            "import_lines": sorted(line for op in ops for line in op["import_lines"]),
            # ops with `fusion:`: <package>/patterns.py registers their replacements
            "fusions": tuple_text([record for op in ops for record in op["fusion"]["records"]])
            if any(op["fusion"]["constant"] for op in ops) else "",
            "fusion_models": any(op["fusion"]["models"] for op in ops),  # `fusion.models`: tests build HF models
            # where the ops have a kernel of their own: the Inductor fusions' default devices (on CPU, the Python
            # reference stands in, and Inductor's code for the composite is faster)
            "kernel_devices": tuple_text([literal(device)] if device != "cpu" else []),
            "ops": ops,
            "tests": data(_test_module(spec, ops)),
        },
    }


def opgen_requirement(version: str = __version__) -> str:
    """The opgen releases whose opgen.testing the generated tests run on: this one up to the next minor (0.x) or
    major release, where the checks' API may change."""
    major, minor = (int(part) for part in version.split(".")[:2])
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"opgen>={major}.{minor},<{upper}"


def op_context(spec: ProjectSpec, op: OpSpec) -> dict:
    stem = op_stem(op.schema)
    files = op_files(spec, op)
    qualname = f"{spec.namespace}::{op.schema.op_name}"
    return {
        "index": op.index,
        "name": op.schema.name,
        "stem": stem,
        "qualname": qualname,
        "qualname_literal": literal(qualname),
        "op_name_literal": literal(op.schema.op_name),
        "overload": f"torch.ops.{spec.namespace}.{op.schema.name}.{op.schema.overload_or_default}",
        "doc": docstring(op.doc or f"The {qualname} operator.", "    "),
        "files": data(_files(files)),
        "signature": data(signature(op)),
        "registration": data(_registration(spec, op, qualname, files)),
        "reference": data(_reference(op, stem)),
        "kernels": data(_kernels(spec, op, qualname, files)),
        "fake": data(_fake(op, qualname, files)),
        "autograd": data(_autograd(op, stem)),
        "fusion": data(fusion_code(spec, op)),
        "tests": data(_op_tests(spec, op, qualname, files)),
        "import_lines": [import_line(f".kernels.{files.cpu_kernel}", files.cpu_kernel)]
        + ([import_line(f".kernels.{files.device_kernel}", files.device_kernel)] if files.device_kernel else [])
        + ([import_line(f".fakes.{stem}", files.fake)] if files.todo_fake else []),
    }


# --- the pieces ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Files:
    """The op's files (opgen.layout), with the function each defines."""

    cpu_kernel: str
    cpu_kernel_path: str
    device_kernel: str | None
    device_kernel_path: str | None
    fake: str
    fake_path: str


def _files(files) -> Files:
    return Files(files.cpu_kernel, files.cpu_kernel_path, files.device_kernel, files.device_kernel_path, files.fake,
                 files.fake_path)


@dataclass(frozen=True)
class Registration:
    """How ops.py defines the op."""

    signature_literal: str  # the schema without namespace (Library.define), on a line of its own
    mutates_args: str  # custom_op's mutates_args=
    custom_op_schema_line: str  # custom_op's schema= when inference would get it wrong, else ""
    tag: str  # the aliasing tag of `ops[i].tags`: "inplace", "out" or ""
    define_tags: str  # Library.define's tags=: every tag of the op, and pt2_compliant_tag
    custom_op_tags: str  # custom_op's tags= ("" without tags)
    tag_guard: str  # module code refusing a torch without the tag
    tag_fake_note: str  # why there is no fake function (torch generates it for a tagged op)
    side_effect: bool  # returns nothing, mutates nothing: marked side-effecting
    cpu_impl: str  # the function registered for CPU: the kernel, or a wrapper making `contiguous:` inputs so
    device_impl: str | None
    wrappers: str  # the wrappers' code ("" without `contiguous:`)
    bump_versions: str  # Library style, a mutable op: the ADInplaceOrView kernel bumping the written tensors' versions
    raising_on_backward: str  # Library style without `autograd:`: the fake's decorator (without_autograd.py), else ""


def _registration(spec: ProjectSpec, op: OpSpec, qualname: str, files) -> Registration:
    schema = op.schema
    tag = op.aliasing_tag
    # With a tag, custom_op gets the schema spelled out: the aliased return must not depend on inference. So does a
    # list argument: torch 2.5 and 2.6 infer none from a `list[...]` annotation.
    explicit = custom_op_explicit_schema_reasons(schema) or bool(tag) or any(map(_is_list, schema.arguments))
    tail = schema.signature(with_namespace=False)
    tail = tail[tail.index("("):]
    return Registration(
        signature_literal=string_value(schema.signature(with_namespace=False), "    "),
        mutates_args=tuple_text([literal(n) for n in mutates_args(schema)]),
        custom_op_schema_line=string_call("schema=", tail, ",", "    ") if explicit else "",
        tag=tag,
        define_tags=tuple_text([f"torch.Tag.{t}" for t in (*op.tags, "pt2_compliant_tag")]),
        custom_op_tags=(f"torch.Tag.{op.tags[0]}" if len(op.tags) == 1
                        else tuple_text([f"torch.Tag.{t}" for t in op.tags]) if op.tags else ""),
        tag_guard=_tag_guard(op, qualname, tag) if tag else "",
        tag_fake_note={"inplace": "it returns its first argument", "out": "it returns its out= arguments",
                       "": ""}[tag],
        side_effect=not schema.returns and not schema.is_mutable,
        cpu_impl=_impl(spec, op, f"_{files.cpu_kernel}_contiguous" if op.contiguous else files.cpu_kernel),
        device_impl=_impl(spec, op, f"_{files.device_kernel}_contiguous" if op.contiguous else files.device_kernel)
        if files.device_kernel else None,
        wrappers=_wrappers(spec, op, qualname, files),
        bump_versions=_bump_versions(spec, op, qualname),
        raising_on_backward=without_autograd.decorator(spec, op) if without_autograd.needs_guard(spec, op) else "",
    )


def _is_list(arg) -> bool:
    t = strip_alias(arg.type)
    return isinstance(t.elem if isinstance(t, OptionalType) else t, ListType)


def _impl(spec: ProjectSpec, op: OpSpec, kernel: str) -> str:
    """The function registered for a kernel: it, or it behind the guard raising on backward."""
    return without_autograd.guarded_name(kernel) if without_autograd.needs_guard(spec, op) else kernel


def _wrappers(spec: ProjectSpec, op: OpSpec, qualname: str, files) -> str:
    """The `contiguous:` wrappers, then the guards raising on backward (around them, if any)."""
    functions = [_contiguous_wrappers(op, qualname, files)]
    if without_autograd.needs_guard(spec, op):
        kernels = filter(None, (files.cpu_kernel, files.device_kernel))
        functions += [without_autograd.guard_function(spec, op, f"_{k}_contiguous" if op.contiguous else k)
                      for k in kernels]
    return "\n\n\n".join(f for f in functions if f)


def _contiguous_wrappers(op: OpSpec, qualname: str, files) -> str:
    """For `ops[i].contiguous`: each kernel behind a function that passes those inputs contiguous, and refuses a
    written one that is not (its writes would land in a copy)."""
    if not op.contiguous:
        return ""
    sig = signature(op)
    written = {a.name for a in op.schema.mutated_args}
    args = [f"{a.name}.contiguous()" if a.name in op.contiguous and a.name not in written else a.name
            for a in op.schema.arguments]
    args = [arg if not a.kwarg_only else f"{a.name}={arg}" for a, arg in zip(op.schema.arguments, args, strict=True)]
    functions = []
    for kernel in filter(None, (files.cpu_kernel, files.device_kernel)):
        doc = docstring("\n".join(comment_lines(f"{kernel} with {', '.join(op.contiguous)} contiguous "
                                                 f"(ops[{op.index}].contiguous in opgen.yaml).", 100)), "    ")
        checks = "".join(f"{line}\n    " for line in contiguity_checks(op))
        functions.append(define(f"_{kernel}_contiguous", list(sig.parameters), sig.returns) + f"\n    {doc}\n    "
                         + checks + call(f"return {kernel}", args, "    "))
    return "\n\n\n".join(functions)


def _bump_versions(spec: ProjectSpec, op: OpSpec, qualname: str) -> str:
    """Library style, an op that writes arguments: an ADInplaceOrView kernel that bumps their version counters, as
    custom_op registers one. Without it a kernel writing memory directly (a device kernel) leaves `_version` as it
    was, and a tensor autograd saved for backward is silently used with its new values."""
    if not STYLES[spec.style].infers_schema and op.schema.mutated_args:
        stem = op_stem(op.schema)
        sig = signature(op)
        lines = [define(f"_{stem}_written", ["keyset", *sig.parameters], sig.returns),
                 "    " + docstring("\n".join(comment_lines(f"The version counters of what {qualname} writes, bumped as "
                                                          "for an in-place aten op.", 100)), "    ")]
        for arg in op.schema.mutated_args:
            optional = isinstance(strip_alias(arg.type), OptionalType)
            listed = isinstance(strip_alias(arg.type), ListType)
            target = f"[t for t in {arg.name} if t is not None]" if listed else arg.name
            lines += ([f"    if {arg.name} is not None:", f"        torch.autograd.graph.increment_version({target})"]
                      if optional else [f"    torch.autograd.graph.increment_version({target})"])
        overload = f"torch.ops.{spec.namespace}.{op.schema.name}.{op.schema.overload_or_default}"
        lines.append("    " + call(f"return {overload}.redispatch",
                                    ["keyset & torch._C._after_ADInplaceOrView_keyset", *sig.call_args], "    "))
        lines += ["", "", call("lib.impl", [literal(op.schema.op_name), f"_{stem}_written", '"ADInplaceOrView"',
                                           "with_keyset=True"])]
        return "\n".join(lines)
    return ""

def _tag_guard(op: OpSpec, qualname: str, tag: str) -> str:
    """Module-level code refusing to import on a torch without the tag (torch_npu pins older torch)."""
    field = f"ops[{op.index}].tags"
    message = (f"{qualname} is tagged torch.Tag.{tag} ({field} in opgen.yaml), but this torch has no "
               f"torch.Tag.{tag} (it came in torch 2.13): upgrade torch, or remove {field} and re-run `opgen new`, "
               "which then drops the aliased return")
    return f"if not hasattr(torch.Tag, {literal(tag)}):\n    " + string_call("raise RuntimeError(", message, ")", "    ")


@dataclass(frozen=True)
class Reference:
    """The spec's `reference:` as a function of <package>/reference.py, the tests' oracle (opgen-owned)."""

    function: str  # "" without `reference:`
    lines: tuple[str, ...]
    imports: tuple[str, ...]


def _reference(op: OpSpec, stem: str) -> Reference:
    if op.reference is None:
        return Reference("", (), ())
    sig = signature(op)
    lines = reference_lines(op)
    return Reference(stem, tuple(lines), tuple(_imports("\n".join(lines), ", ".join(sig.parameters) + sig.returns)))


@dataclass(frozen=True)
class Kernels:
    """The user's kernel files, created once: the CPU kernel from `reference:` (else a stub) and a device stub."""

    device: str | None  # the device kernel's device ("npu", "cuda"), None for a CPU-only package
    device_type_literal: str
    device_raise: str
    has_reference: bool  # the spec's `reference:` is the CPU kernel's body
    cpu_body: tuple[str, ...]
    cpu_raise: str
    imports: tuple[str, ...]  # what the kernel files import


def _kernels(spec: ProjectSpec, op: OpSpec, qualname: str, files) -> Kernels:
    reference = op.reference
    sig = signature(op)
    annotations = ", ".join(sig.parameters) + sig.returns
    return Kernels(
        device=spec.device if spec.device != "cpu" else None,
        device_type_literal=literal(spec.device),
        device_raise=string_call("raise NotImplementedError(", f"{qualname} has no {DEVICE_NAMES[spec.device]} kernel "
                                 f"yet: write it in {files.device_kernel_path}", ")", "    "),
        has_reference=reference is not None,
        cpu_body=tuple(kernel_lines(op)) if reference else (),
        cpu_raise=string_call("raise NotImplementedError(", f"{qualname} has no CPU reference kernel yet: write it in "
                              f"{files.cpu_kernel_path} (or give ops[{op.index}].reference in opgen.yaml before the "
                              "first generation)", ")", "    "),
        imports=tuple(_imports(reference or "", annotations)),
    )


def _imports(body: str, annotations: str) -> list[str]:
    """Imports a kernel file needs: torch when the code names it, math likewise."""
    imports = []
    if "math." in body:
        imports.append("import math")
    if "torch" in body or "torch" in annotations:
        imports.append("import torch")
    if "Number" in annotations:
        imports.append("from torch.types import Number")
    return imports


@dataclass(frozen=True)
class Fake:
    """The fake function: generated from the semantics (`lines`), torch's own for a tagged op (`trivial`), or a
    TODO file the user fills (`todo`)."""

    lines: tuple[str, ...]
    trivial: bool
    todo: bool
    todo_fields: tuple[str, ...]  # the spec fields that would describe it
    todo_by_hand: bool  # the semantics cannot describe the returns at all
    todo_raise: str


def _fake(op: OpSpec, qualname: str, files) -> Fake:
    return Fake(
        lines=rule_code(op, op_stem(op.schema)).fake_lines,
        trivial=bool(op.aliasing_tag),
        todo=files.todo_fake,
        todo_fields=tuple(op.missing_semantics),
        todo_by_hand=bool(op.undescribable_returns),
        todo_raise=string_call("raise NotImplementedError(", _todo_message(op, qualname, files.fake_path), ")", "    ")
        if files.todo_fake else "",
    )


def _todo_message(op: OpSpec, qualname: str, todo_path: str) -> str:
    """What the TODO fake function raises: the spec fields to fill, or (for returns the semantics cannot
    describe) that the fake is written by hand."""
    if op.undescribable_returns:
        returns = ", ".join(repr(str(r.type)) for r in op.schema.returns)
        return (f"{qualname} has no fake function: the spec's semantics cannot describe its returns ({returns}), so "
                f"write the fake function by hand in {todo_path}")
    return (f"{qualname} has no fake function: fill {', '.join(op.missing_semantics)} in opgen.yaml and re-run "
            f"`opgen new`, or write the fake function by hand in {todo_path}")


@dataclass(frozen=True)
class Autograd:
    """The backward formula (`ops[i].autograd`): generated functions, user code validated at load time."""

    enabled: bool
    has_setup_context: bool
    code: str
    uses_math: bool


def _autograd(op: OpSpec, stem: str) -> Autograd:
    if op.autograd is None:
        return Autograd(False, False, "", False)
    functions = []
    if op.autograd.setup_context is not None:
        header = setup_context_header(op.schema, f"_{stem}_setup_context", op.autograd.setup_context)
        functions.append(function_source(header, op.autograd.setup_context))
    functions.append(function_source(backward_header(op.schema, f"_{stem}_backward"), op.autograd.backward))
    return Autograd(True, op.autograd.setup_context is not None, "\n\n\n".join(functions),
                    "math." in op.autograd.backward + (op.autograd.setup_context or ""))


# --- the generated tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class TestModule:
    """What tests/test_<package>.py needs besides the ops: its imports and the lines saying why some
    tiers are not run."""

    uses_number: bool  # a semantics function's parameter is a Scalar
    uses_reference: bool  # some op has `reference:`: the tests import <package>/reference.py
    package_modules: tuple[str, ...]  # what the tests import from the package at module level: reference
    # some op has `fusion:`: the `patterns` fixture imports <package>/patterns.py for the fusion tests alone (it imports
    # Inductor's pattern matcher, seconds that a run of the other tests need not pay)
    uses_patterns: bool
    npu_unavailable: str
    cuda_unavailable: str
    aliasing_tags: str  # the torch.Tag names the ops are defined with that older torch lines lack, as a tuple literal


def _test_module(spec: ProjectSpec, ops: list[dict]) -> TestModule:
    skipped = {device: literal(f"the ops are generated for device {spec.device!r}, not {device!r}")
               for device in ("npu", "cuda")}
    return TestModule(
        uses_number=any("Number" in op["tests"]["semantics_def"] + op["tests"]["bounds_def"] for op in ops),
        uses_reference=any(op["reference"]["function"] for op in ops),
        package_modules=("reference",) if any(op["reference"]["function"] for op in ops) else (),
        uses_patterns=any(op["fusion"]["constant"] for op in ops),
        npu_unavailable="checks.npu_unavailable()" if spec.device == "npu" else skipped["npu"],
        cuda_unavailable="checks.cuda_unavailable()" if spec.device == "cuda" else skipped["cuda"],
        aliasing_tags=tuple_text([literal(t) for t in dict.fromkeys(op.aliasing_tag for op in spec.ops
                                                                     if op.aliasing_tag)]),
    )


@dataclass(frozen=True)
class OpTests:
    """One op's part of tests/test_<package>.py: its data (the `Op` constant, the examples, `expect:`, the
    semantics) and what its test functions pass to the checks of opgen.testing."""

    constant: str  # the module-level `Op(...)`: KV_CACHE_UPDATE
    op_lines: tuple[str, ...]  # its definition
    examples: str  # the function returning the calls of every example
    example_lines: tuple[str, ...]
    uses_generator: bool
    derived_example: bool  # no example given: a small one made up by opgen
    two_sizes: dict | None  # examples.TwoSizes
    expected: str  # the module-level tuple of Expected(...), "" without `expect:`
    expected_lines: tuple[str, ...]
    semantics_def: str
    semantics_lines: tuple[str, ...]
    bounds_def: str
    bounds_lines: tuple[str, ...]
    registered_lines: tuple[str, ...]  # the body of test_<op>_is_registered
    dynamic: bool  # a data-dependent output size: no capture tiers
    skips: dict  # reason -> pytest.skip(...) line
    drawn: bool  # some example draws an argument in its domain (`ops[i].inputs`): the calls go through Op.drawn


def _op_tests(spec: ProjectSpec, op: OpSpec, qualname: str, files) -> OpTests:
    stem = op_stem(op.schema)
    constant = stem.upper()
    rules = rule_code(op, stem)
    pair = two_sizes(op)
    expected = expected_lines(op)
    generator = uses_generator(op.examples)
    return OpTests(
        constant=constant,
        op_lines=tuple(_op_lines(spec, op, constant, files)),
        examples=f"{stem}_examples",
        example_lines=tuple(line for example in op.examples for line in call_lines(op, example)),
        uses_generator=generator,
        derived_example=bool(op.examples) and op.examples[0].derived,
        two_sizes=asdict(pair) if pair else None,
        expected=f"{constant}_EXPECTED" if expected else "",
        expected_lines=tuple(expected),
        semantics_def=rules.semantics_def,
        semantics_lines=rules.semantics_lines,
        bounds_def=rules.bounds_def,
        bounds_lines=rules.bounds_lines,
        registered_lines=tuple(_registered_lines(spec, op, constant, files)),
        dynamic=op.is_dynamic,
        skips=_skips(op, qualname),
        drawn=uses_draws(op),
    )


def _op_lines(spec: ProjectSpec, op: OpSpec, constant: str, files) -> list[str]:
    """`CONSTANT = Op(overload, field=..., ...)`: what the checks need to know of the op, one field per line."""
    fields = [f"torch.ops.{spec.namespace}.{op.schema.name}.{op.schema.overload_or_default}",
              f"field={literal(f'ops[{op.index}]')}",
              "schema=" + string_value(f"{spec.namespace}::{op.schema.signature(with_namespace=False)}", "    ",
                                       "schema="),
              f"cpu_kernel={literal(files.cpu_kernel_path)}"]
    if spec.adopt:  # the adopted package's kernel lives in its files, not ours: messages name the op's kernel
        fields.pop()
    if op.schema.returns:
        fields.append("outputs=" + _tuple_value([literal(name) for name in op.schema.return_names], "outputs="))
    if op.aliasing_tag:
        fields.append("returned=" + _tuple_value([literal(out.returns_argument) for out in op.outputs], "returned="))
        fields.append(f"tag={literal(op.aliasing_tag)}")
    if op.random:
        fields.append("random=True")
    if op.is_dynamic:
        fields.append("dynamic=True")
    if op.reference is not None:
        fields.append(f"reference=reference.{op_stem(op.schema)}")
    if op.dtypes:
        fields.append("dtypes=" + tuple_text([f"torch.{dtype}" for dtype in op.dtypes]))
    if op.tolerances:
        fields.append("tolerances={" + ", ".join(f"torch.{dtype}: ({rtol!r}, {atol!r})"
                                                 for dtype, rtol, atol in op.tolerances) + "}")
    if op.inputs:
        fields.append(_inputs_field(op))
    promotes = sorted({group for out in op.outputs if out.dtype_rule is not None
                       for group in promoted_arguments(out.dtype_rule)})
    if promotes:
        fields.append("promotes=" + tuple_text([tuple_text([literal(name) for name in group]) for group in promotes]))
    if op.contiguous:
        fields.append("contiguous=" + tuple_text([literal(name) for name in op.contiguous]))
    if op.checks:
        fields.append("checked=True")
    fields += _ties_field(op)
    return [f"{constant} = checks.Op("] + [f"    {field}," for field in fields] + [")"]


def _ties_field(op: OpSpec) -> list[str]:
    """`ties={"ids": lambda *, logits, **_: torch.softmax(logits.float(), -1)}` from `ops[i].ties`, or nothing."""
    if not op.ties:
        return []
    return ["ties={" + ", ".join(f"{literal(name)}: lambda *, {', '.join(used)}, **_: {scores}"
                                 for name, scores, used in op.ties) + "}"]


def _inputs_field(op: OpSpec) -> str:
    """`inputs={"idx": checks.Domain(index_into=lambda *, x, **_: x.shape[0], unique=True)}` from `ops[i].inputs`, one
    argument per line when too long (a field of `Op(...)`, 4 columns in)."""
    items = []
    for spec in op.inputs:
        parts = [f"{key}={value!r}" for key, value in (("low", spec.low), ("high", spec.high)) if value is not None]
        if spec.index_into is not None:
            read = [a for a in op.schema.arguments if a.name in spec.index_into.uses]
            params = ", ".join(["*", *(f"{a.name}={argument_default(op, a)}" if a.has_default else a.name
                                       for a in read), "**_"])
            parts.append(f"index_into=lambda {params}: {spec.index_into.python()}")
        parts += [f"{key}=True" for key in ("unique", "finite", "nonempty") if getattr(spec, key)]
        if spec.values is not None:
            parts.append(f"values={tuple_text([repr(value) for value in spec.values])}")
        items.append(f"{literal(spec.name)}: checks.Domain({', '.join(parts)})")
    line = "inputs={" + ", ".join(items) + "}"
    if len(line) + 5 <= LINE_LENGTH:
        return line
    return "inputs={\n" + "".join(f"        {item},\n" for item in items) + "    }"


def _tuple_value(items: list[str], lead: str) -> str:
    """A tuple after `lead` on a line 4 columns in (a field of `Op(...)`), one item per line when too long."""
    text = tuple_text(items)
    return text if len(f"    {lead}{text},") <= LINE_LENGTH else call("", items, "    ")


def _registered_lines(spec: ProjectSpec, op: OpSpec, constant: str, files) -> list[str]:
    """Registration: kernels at each dispatch key, the tags, the schema; the user's functions' signatures."""
    keys = ['"CPU"'] + ([] if op.aliasing_tag else ['"Meta"']) + ([literal(DEVICES[spec.device])] if files.device_kernel else [])
    tags = tuple_text([f"torch.Tag.{t}" for t in (*op.tags, "pt2_compliant_tag")])
    if spec.adopt:  # the user's package registered it: its kernel at the device found, its fake; no files of ours
        # a CPU kernel may sit at CompositeExplicitAutograd (custom_op without device_types): not asked for
        device = [literal(DEVICES[spec.device])] if spec.device != "cpu" else []
        keys = list(dict.fromkeys(device + ([] if op.aliasing_tag else ['"Meta"'])))
        # pt2_compliant_tag is the package's choice (custom_op adds it, a Library define may not): taken as it is
        tags = f"{tuple_text([f'torch.Tag.{t}' for t in op.tags])} + tuple(set({constant}.overload.tags) & " \
            "{torch.Tag.pt2_compliant_tag})"
        return [call("checks.assert_registered", [constant, tuple_text(keys), f"tags={tags}"], "    ")]
    stem = op_stem(op.schema)
    lines = [f"assert callable({spec.package}.{stem})"]
    if op.aliasing_tag:
        lines.append(f"# torch.Tag.{op.aliasing_tag}: torch generates the fake (no Meta kernel of ours)")
    args = [constant, tuple_text(keys), f"tags={tags}"] + (["side_effect=True"] if _side_effect(op) else [])
    lines.append(call("checks.assert_registered", args, "    "))
    for path, function in files.owned():
        module = path[:-3].replace("/", ".")
        lines.append(call("checks.assert_signature", [f"{module}.{function}", constant], "    "))
    return lines


def _side_effect(op: OpSpec) -> bool:
    return not op.schema.returns and not op.schema.is_mutable


def _skips(op: OpSpec, qualname: str) -> dict:
    """Why a test of the op cannot run, as the statement (or decorator) that says so."""
    return {
        "no_example": string_call("pytest.skip(", f"no example inputs for {qualname}: add ops[{op.index}].examples to "
                                  "opgen.yaml", ")", "    "),
        "no_expect": string_call("pytest.skip(", f"no expected values for {qualname}: add `expect:` to an example in "
                                 f"ops[{op.index}].examples (see docs/spec.md)", ")", "    "),
        "no_two_sizes": string_call("pytest.skip(", f"no two calls of {qualname} that differ only in sizes, and opgen "
                                    f"cannot derive one: add examples of two sizes to ops[{op.index}].examples", ")",
                                    "    "),
        "dynamic": string_call("@pytest.mark.skip(reason=", f"{qualname} has a data-dependent output size (`dynamic`); "
                               "a captured graph cannot return a size known only at run time", ")"),
        "dynamic_npugraph_ex": string_call("@pytest.mark.skip(reason=", f"{qualname} has a data-dependent output size "
                                           "(`dynamic`): npugraph_ex's graph converter does not compile its size check "
                                           "(TypeError: '>=' not supported between instances of 'ValuePack' and "
                                           "'int')", ")"),
    }
