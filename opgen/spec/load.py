"""Read a spec (YAML) into `ProjectSpec`, with `path:line:col` on every error.

The YAML is composed into nodes (`yaml.compose`) rather than loaded, so every key and value keeps
the line and column it was written at; an error inside a schema string or a semantics expression
is placed at the exact character of the file. One op is read in steps, one job each: its YAML keys,
its schema and the contract rules, its Python bodies, its semantics (`opgen.spec.outputs`) and its
examples (`opgen.spec.examples`).
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from dataclasses import dataclass, replace

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..contract import (
    ALIASING_TAGS,
    AUTOGRAD_HINT,
    AUTOGRAD_NOT_FUNCTIONAL,
    ERROR,
    TAG_CONTRACT,
    TAG_HINTS,
    autograd_problems,
    check_namespace,
    check_ops,
    check_schema,
    fatal_for_generation,
    tag_contract_problems,
)
from ..errors import OpgenError
from ..files import read_input
from ..layout import op_stem
from ..registration_styles import DEFAULT_STYLE
from ..schema.model import BaseType, ListType, Return, Schema, base_name, strip_alias
from ..schema.parser import parse_schema, span_column
from .autograd import (
    CONTEXT_PARAMETERS,
    backward_header,
    backward_name_problems,
    grad_names,
    output_names,
    setup_context_header,
)
from .bodies import body_error, check_body, value_returns
from .checks import input_checks
from .examples import derive_example, describe_value, examples, load_inputs_text, parse_tolerances
from .fusion import with_fusion
from .inputs import parse_inputs
from .model import (
    DEFAULT_DEVICE,
    DEFAULT_TARGET,
    DEVICES,
    DTYPES,
    FLOATING_DTYPES,
    RANDOM_TAG,
    STYLES,
    TAGS,
    TARGETS,
    AutogradSpec,
    OpSpec,
    ProjectSpec,
)
from .names import argument_problem, op_name_problem, package_problem
from .nodes import _choice, _identifier, _kind, _mapping, _scalar, _Source, _string, compose
from .outputs import bindings, outputs
from .rule_bounds import argument_limits
from .semantics_ir import DTYPE_ALIASES

__all__ = ["derive_example", "load_inputs_text", "load_spec", "load_spec_text", "read_spec"]

SPEC_KEYS = ("namespace", "style", "device", "package", "adopt", "target", "dtype_codes", "ops")
OP_KEYS = ("schema", "doc", "tags", "let", "outputs", "reference", "autograd", "examples", "inputs", "tolerances",
           "dtypes", "contiguous", "ties", "checks", "fusion", "op_plugin")
AUTOGRAD_KEYS = ("setup_context", "backward")
# Names the generated modules use themselves; an argument with one of them would shadow it.


def load_spec(path: str) -> ProjectSpec:
    return load_spec_text(read_spec(path), path)


def read_spec(path: str) -> str:
    """The text of the spec file `path` (a regular file of at most MAX_INPUT_BYTES, UTF-8), or a located error."""
    if not os.path.lexists(path):
        raise OpgenError(f"spec file {path} does not exist", hint="give the path of an opgen spec (YAML); "
                         "see docs/spec.md, or start from a schema with --schema")
    return read_input(path, "spec file")


def load_spec_text(text: str, path: str = "<spec>", *, style: str | None = None,
                   device: str | None = None, target: str | None = None) -> ProjectSpec:
    """Parse and check a spec. `style`/`device` override the spec's own values (CLI flags)."""
    source = _Source(text, path)
    root = compose(source)
    if root is None:
        raise source.error(None, "the spec is empty", "a spec needs at least `namespace:` and `ops:` (see docs/spec.md)")
    top = _mapping(source, root, "the spec", SPEC_KEYS, required=("namespace", "ops"))
    project = _project(source, top, style, device)
    ops_node = top["ops"][1]
    if not isinstance(ops_node, SequenceNode) or not ops_node.value:
        raise source.error(ops_node, "`ops` must be a non-empty list of operators", "write `ops:` followed by "
                           "lines starting with `- schema: \"my_op(Tensor x) -> Tensor\"`")
    ops = [_op(source, node, index, project) for index, node in enumerate(ops_node.value)]
    _check_names_unique(source, ops_node, ops)
    notes = []
    for diagnostic in check_ops([op.schema for op in ops]):
        if diagnostic.severity == ERROR:
            raise source.error(ops_node, diagnostic.message, diagnostic.hint)
        notes.append(f"{diagnostic.code}: {diagnostic.text()}")
    target_value = target or (_choice(source, top["target"][1], "target", TARGETS) if "target" in top
                              else DEFAULT_TARGET)
    text_out = _with_overrides(source, top, {"style": style, "device": device, "target": target})
    return ProjectSpec(project.namespace, project.style, project.device, project.package, tuple(ops), text_out, path,
                       tuple(notes), target_value, project.dtype_codes, project.adopt)


@dataclass(frozen=True)
class _Project:
    """The spec-level keys every op is read with."""

    namespace: str
    style: str
    device: str
    package: str
    dtype_codes: tuple[tuple[int, str], ...]
    adopt: str = ""


def _project(source: _Source, top: dict, style: str | None, device: str | None) -> _Project:
    namespace = _identifier(source, top["namespace"][1], "namespace")
    style_value = style or (_choice(source, top["style"][1], "style", STYLES) if "style" in top else DEFAULT_STYLE)
    device_value = device or (_choice(source, top["device"][1], "device", tuple(DEVICES))
                              if "device" in top else DEFAULT_DEVICE)
    adopt = _identifier(source, top["adopt"][1], "adopt") if "adopt" in top else ""
    if adopt and "package" in top:
        raise source.error(top["package"][1], "`package` and `adopt` exclude each other: an adopted package is the "
                           "user's own", "keep `adopt:` (tests only, for the package's ops) or `package:` (a new "
                           "package registering the ops)")
    package = adopt or (_identifier(source, top["package"][1], "package") if "package" in top else namespace)
    problem = None if adopt else package_problem(package)
    if problem is not None:
        node = top["package"][1] if "package" in top else top["namespace"][1]
        raise source.error(node, *problem)
    for diagnostic in check_namespace(namespace):
        if diagnostic.severity == ERROR:
            raise source.error(top["namespace"][1], diagnostic.message, diagnostic.hint)
    codes = _dtype_codes(source, top["dtype_codes"][1]) if "dtype_codes" in top else ()
    return _Project(namespace, style_value, device_value, package, codes, adopt)


def _dtype_codes(source: _Source, node: Node) -> tuple[tuple[int, str], ...]:
    """`dtype_codes: {1: int8, 24: float8_e4m3fn}`: what an int argument carrying a dtype means (`from_code`)."""
    hint = "e.g. `dtype_codes: {1: int8, 5: float16, 24: float8_e4m3fn}` (torch_npu's codes: docs/spec.md)"
    if not isinstance(node, MappingNode) or not node.value:
        raise source.error(node, "`dtype_codes` must map int codes to dtype names", hint)
    found: dict[int, str] = {}
    for key_node, value_node in node.value:
        code, word = _scalar(key_node), _scalar(value_node)
        if not isinstance(code, int) or isinstance(code, bool):
            raise source.error(key_node, f"dtype_codes: {code!r} is not an int code", hint)
        if code in found:
            raise source.error(key_node, f"dtype_codes: code {code} is given twice", "keep one")
        if not isinstance(word, str) or word not in DTYPES:
            close = difflib.get_close_matches(str(word), DTYPES, n=1)
            raise source.error(value_node, f"dtype_codes.{code}: unknown dtype {word!r}",
                               (f"did you mean {close[0]!r}? " if close else "") + "write a torch dtype name")
        found[code] = DTYPE_ALIASES.get(word, word)
    return tuple(found.items())


def _with_overrides(source: _Source, top: dict, overrides: dict[str, str | None]) -> str:
    """The spec text with CLI overrides written in, so the stored opgen.yaml regenerates the same project."""
    edits = []
    for key, value in overrides.items():
        if value is None:
            continue
        if key in top:
            node = top[key][1]
            if _scalar(node) != value:
                edits.append((node.start_mark.index, node.end_mark.index, value))
        else:
            end = top["namespace"][1].end_mark.index
            line_end = source.text.find("\n", end)
            line_end = len(source.text) if line_end < 0 else line_end
            edits.append((line_end, line_end, f"\n{key}: {value}"))
    text = source.text
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


# --- one operator ---------------------------------------------------------------------------------


def _op(source: _Source, node: Node, index: int, project: _Project) -> OpSpec:
    where = f"ops[{index}]"
    fields = _mapping(source, node, where, OP_KEYS, required=("schema",))
    tags = _tags(source, fields["tags"][1], where) if "tags" in fields else ()
    notes: list[str] = []
    schema = _op_schema(source, fields, where, project, tags, notes)
    doc = _string(source, fields["doc"][1], f"{where}.doc", allow_empty=True) if "doc" in fields else ""
    reference = _reference(source, fields, schema, where, notes) if "reference" in fields else None
    autograd = _autograd(source, fields["autograd"], schema, fields["schema"][1], where) if "autograd" in fields \
        else None
    let = bindings(source, fields["let"][1], schema, where, project.dtype_codes) if "let" in fields else ()
    checks = _op_checks(source, fields, schema, tags, let, project, where)
    described = _op_outputs(source, fields, schema, tags, let, project, where, checks)
    shape_rules = [out.shape_rule.node for out in described if out.shape_rule is not None]
    calls = examples(source, fields["examples"][1] if "examples" in fields else None, schema, where,
                     random=RANDOM_TAG in tags, limits=argument_limits(shape_rules))
    if calls and calls[0].derived:
        made_up = ", ".join(f"{name}: {describe_value(value)}" for name, value in calls[0].values.items())
        notes.append(f"no `{where}.examples`: the generated tests call the op with one opgen made up ({made_up}); "
                     "add examples with the shapes, dtypes and values your kernel expects (docs/spec.md)")
    op_plugin = None
    if "op_plugin" in fields:  # read only by `opgen new --target op_plugin`
        from .op_plugin import parse_op_plugin

        op_plugin = parse_op_plugin(source, fields["op_plugin"][1], schema, where)
    tolerances = parse_tolerances(source, fields["tolerances"][1], f"{where}.tolerances") if "tolerances" in fields else ()
    dtypes = _dtypes(source, fields["dtypes"][1], f"{where}.dtypes") if "dtypes" in fields else ()
    contiguous = _contiguous(source, fields["contiguous"][1], schema, f"{where}.contiguous") \
        if "contiguous" in fields else ()
    inputs = parse_inputs(source, fields["inputs"][1], schema, where) if "inputs" in fields else ()
    ties = _ties(source, fields["ties"][1], schema, f"{where}.ties") if "ties" in fields else ()
    dtype_defaults = _dtype_defaults(source, fields["schema"][1], schema, project.dtype_codes, where)
    if reference is not None and not contiguous and re.search(r"\.view\(", reference):
        notes.append(_view_note(schema, contiguous, where))
    op = OpSpec(index, schema, doc, described, reference, calls, tuple(notes), tags, autograd, tolerances, op_plugin,
                tuple(binding for binding, _ in let), dtypes, contiguous, inputs=inputs, dtype_defaults=dtype_defaults,
                checks=checks, ties=ties)
    if "fusion" in fields:
        reference_node = fields["reference"][1] if "reference" in fields else None
        op = with_fusion(source, fields["fusion"], op, reference_node, fields["schema"][1], project.namespace)
    return op


def _op_schema(source: _Source, fields: dict, where: str, project: _Project, tags: tuple[str, ...],
               notes: list[str]) -> Schema:
    """The op's schema, with the spec's namespace, rewritten or kept by its tags, and the contract checked."""
    schema_node = fields["schema"][1]
    schema_text = _string(source, schema_node, f"{where}.schema")
    try:
        schema = parse_schema(schema_text)
    except OpgenError as error:
        raise source.inner(schema_node, error.column or 1, error, f"{where}.schema") from None
    if schema.namespace is not None and schema.namespace != project.namespace:
        raise source.inner(schema_node, 1, OpgenError(
            f"the schema's namespace {schema.namespace!r} differs from the spec's namespace {project.namespace!r}",
            hint=f"drop '{schema.namespace}::' (the spec's `namespace:` applies to every op)"), f"{where}.schema")
    schema = _with_namespace(schema, project.namespace)
    aliasing = next((tag for tag in tags if tag in ALIASING_TAGS), None)
    if aliasing:  # the user opted into torch's tag: keep the aliased return, if the schema keeps the tag's contract
        problems = tag_contract_problems(schema, aliasing)
        if problems:  # the first, as torch would refuse it
            message, part = problems[0]
            raise source.inner(schema_node, span_column(schema, part) or 1, OpgenError(
                message, hint=f"{TAG_HINTS[aliasing]}; or remove `{aliasing}` from `{where}.tags` to let opgen drop "
                "the aliased return"), f"{where}.schema [{TAG_CONTRACT.code}]")
    else:
        schema = _rewrite_aliased_returns(schema, notes)
    if "autograd" in fields:  # torch refuses a formula for these: say so at the part of the schema to blame
        problems = autograd_problems(schema, tags)
        if problems:
            message, part = problems[0]
            raise source.inner(schema_node, span_column(schema, part) or 1, OpgenError(
                f"`{where}.autograd` is given, but {message}", hint=f"{AUTOGRAD_HINT}; or remove `{where}.autograd`"),
                f"{where}.schema [{AUTOGRAD_NOT_FUNCTIONAL.code}]")
    _check_contract(source, schema_node, schema, tags, project.style, where, notes)
    return schema


def _check_contract(source: _Source, schema_node: ScalarNode, schema: Schema, tags: tuple[str, ...], style: str,
                    where: str, notes: list[str]) -> None:
    for diagnostic in check_schema(schema, tags=tags, side_effect_marked=True, style=style):
        if fatal_for_generation(diagnostic, style):
            offset = span_column(schema, diagnostic.part) if diagnostic.part is not None else None
            raise source.inner(schema_node, offset or 1, OpgenError(diagnostic.message, hint=diagnostic.hint),
                               f"{where}.schema [{diagnostic.code}]")
        if diagnostic.severity != "info":
            notes.append(f"{diagnostic.code}: {diagnostic.message}")
    problem = op_name_problem(schema.name, op_stem(schema))
    if problem is not None:
        raise source.inner(schema_node, span_column(schema, "name") or 1, OpgenError(problem[0], hint=problem[1]),
                           f"{where}.schema")
    for arg in schema.arguments:
        problem = argument_problem(arg.name)
        if problem is not None:
            raise source.inner(schema_node, span_column(schema, ("arg", arg.name)) or 1,
                               OpgenError(problem[0], hint=problem[1]), f"{where}.schema")


def _op_checks(source: _Source, fields: dict, schema: Schema, tags: tuple[str, ...], let, project: _Project,
               where: str) -> tuple:
    """`ops[i].checks`, refused on a tagged op (torch generates its fake, which cannot check them)."""
    if "checks" not in fields:
        return ()
    aliasing = next((tag for tag in tags if tag in ALIASING_TAGS), None)
    if aliasing:
        raise source.error(fields["checks"][0], f"{where}.checks: the op is tagged torch.Tag.{aliasing}, so torch "
                           "generates its fake, which cannot check them", "remove `checks:` (or the tag)")
    return input_checks(source, fields["checks"][1], schema, where, let, project.dtype_codes)


def _op_outputs(source: _Source, fields: dict, schema: Schema, tags: tuple[str, ...], let, project: _Project,
                where: str, checks: tuple = ()):
    aliasing = next((tag for tag in tags if tag in ALIASING_TAGS), None)
    if aliasing and "outputs" in fields:
        raise source.error(fields["outputs"][0], f"{where}.outputs: the op is tagged torch.Tag.{aliasing}, so it "
                           "returns its mutated argument(s): their shape and dtype are already known",
                           "remove `outputs:`")
    if let and "outputs" not in fields:
        raise source.error(fields["let"][0], f"{where}.let: the op has no `outputs:` whose rules could read it",
                           "remove `let:`, or describe the outputs")
    described = outputs(source, fields["outputs"][1] if "outputs" in fields else None, schema, where, let=let,
                        dtype_codes=project.dtype_codes, checks=checks)
    if aliasing:
        written = [a.name for a in schema.mutated_args]
        described = tuple(replace(out, returns_argument=name) for out, name in zip(described, written))
    return described


def _reference(source: _Source, fields: dict, schema: Schema, where: str, notes: list[str]) -> str:
    """`reference:`, checked as the body of the CPU kernel; an op that returns nothing must return no value."""
    node = fields["reference"][1]
    reference = _string(source, node, f"{where}.reference")
    header = ["def _reference():"]
    function = check_body(source, node, reference, f"{where}.reference", header,
                           "write the body of a function whose parameters are the op's arguments")
    if schema.returns:
        return reference
    returned = next(iter(value_returns(function)), None)
    if returned is not None:
        rewritten = any(note.startswith("OPG102: rewrote") for note in notes)
        why = ("opgen dropped the aliased return of `-> Tensor(a!)` (the op now returns nothing, as OPG102 "
               "explains)" if rewritten else "the op returns nothing (`-> ()`)")
        keeping = next((m.group(1) for note in notes if (m := _KEEPING_TAGS.search(note))), None)
        hint = "drop the returned value"
        if rewritten:
            hint = "drop the `return` (the caller keeps the tensor it passed)" + (
                f", or add {keeping} to keep the return" if keeping else "")
        raise body_error(source, node, returned.lineno - 1 - len(header), returned.col_offset + 1 - 4,
                         f"{where}.reference returns a value, but {why}: torch would raise \"Expected ... to return "
                          "None\" at the first call", hint)
    return reference


def _tags(source: _Source, node: Node, where: str) -> tuple[str, ...]:
    """`tags: [inplace]`, `[out]`, `[nondeterministic_seeded]` (alone or with one of the others): the torch.Tag
    names the op is defined with."""
    field = f"{where}.tags"
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of torch.Tag names, not {_kind(node)}",
                           "write `tags: [inplace]`, `tags: [out]` or `tags: [nondeterministic_seeded]`")
    tags: list[str] = []
    for item in node.value:
        value = _string(source, item, f"{field} entry")
        if value not in TAGS:
            close = difflib.get_close_matches(value.removeprefix("torch.Tag."), TAGS, n=1, cutoff=0.5)
            if value in ("random", "rng", "nondeterministic", "seeded"):
                close = [RANDOM_TAG]
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise source.error(item, f"{field}: unknown tag {value!r}", hint + "opgen generates the tags: "
                               + ", ".join(TAGS) + f" ({RANDOM_TAG}: the op draws random numbers)")
        if value in tags:
            raise source.error(item, f"{field}: {value!r} is listed twice", "list each tag once")
        tags.append(value)
    if len([t for t in tags if t in ALIASING_TAGS]) > 1:
        raise source.error(node, f"{field}: an op is either in-place (Tag.inplace) or an out= variant (Tag.out), "
                           "not both", "keep one of them")
    return tuple(tags)


def _with_namespace(schema: Schema, namespace: str) -> Schema:
    return replace(schema, namespace=namespace, spans=schema.spans)


def _rewrite_aliased_returns(schema: Schema, notes: list[str]) -> Schema:
    """`-> Tensor(a!)` returning a mutated argument becomes `-> ()`: the caller already holds that tensor.

    torch.compile cannot functionalize aliased returns of custom ops (OPG102), and the `Tag.inplace`
    route only exists in the newest torch; dropping the return keeps the op correct everywhere.
    (`tags: [inplace]` / `tags: [out]` in the spec keeps the return instead.)
    """
    written = {letter for a in schema.mutated_args for letter in (a.alias.before if a.alias else ())}
    kept: list[Return] = []
    dropped: list[str] = []
    for ret in schema.returns:
        alias = ret.alias
        if alias is not None and alias.is_write and set(alias.before) <= written and base_name(ret.type) == "Tensor":
            dropped.append(str(ret))
        else:
            kept.append(ret)
    if not dropped:
        return schema
    rewritten = replace(schema, returns=tuple(kept), returns_tuple=schema.returns_tuple and len(kept) == 1,
                        spans=schema.spans)
    fitting = [f"`tags: [{tag}]`" for tag in ALIASING_TAGS if not tag_contract_problems(schema, tag)]
    keep = (f"to keep the return, add {' or '.join(fitting)} to the op: torch >= 2.13" if fitting else
            "no torch.Tag lets this schema keep the return: " + "; ".join(TAG_HINTS[tag] for tag in ALIASING_TAGS))
    notes.append(f"OPG102: rewrote {schema.qualified_name}: dropped aliased return(s) {', '.join(dropped)}; "
                 f"the schema is now '{rewritten.signature()}' (callers keep using the mutated argument; {keep})")
    return rewritten


# the tags an OPG102 rewrite note offers for keeping the return (only those whose contract the schema meets)
_KEEPING_TAGS = re.compile(r"OPG102: rewrote .*to keep the return, add (`tags: \[\w+\]`(?: or `tags: \[\w+\]`)?)")


def _autograd(source: _Source, entry: tuple[ScalarNode, Node], schema: Schema, schema_node: ScalarNode,
              where: str) -> AutogradSpec:
    """`autograd: {setup_context: BODY, backward: BODY}`; the op's contract was checked (OPG113) already."""
    field = f"{where}.autograd"
    key_node, node = entry
    if not schema.returns:
        raise source.error(key_node, f"{field}: the op returns nothing, so there is nothing to differentiate",
                           f"remove `{field}`")
    for ret, name in zip(schema.returns, output_names(schema)):
        if strip_alias(ret.type) != BaseType("Tensor"):
            raise source.inner(schema_node, span_column(schema, "returns") or 1, OpgenError(
                f"return {name!r} is '{ret.type}': opgen generates backward formulas only for ops returning plain "
                "Tensors", hint=f"remove `{field}` and register the formula by hand"), f"{where}.schema")
    for arg in schema.arguments:
        if arg.name in CONTEXT_PARAMETERS:
            raise source.inner(schema_node, span_column(schema, ("arg", arg.name)) or 1, OpgenError(
                f"argument name {arg.name!r} is a parameter of the generated setup_context (`{field}`)",
                hint=f"rename it: {', '.join(CONTEXT_PARAMETERS)} are taken"), f"{where}.schema")
    for name in output_names(schema):
        if name in CONTEXT_PARAMETERS:
            raise source.inner(schema_node, span_column(schema, "returns") or 1, OpgenError(
                f"return name {name!r} is a parameter of the generated setup_context (`{field}`)",
                hint=f"rename it: {', '.join(CONTEXT_PARAMETERS)} are taken"), f"{where}.schema")
    fields = _mapping(source, node, field, AUTOGRAD_KEYS, required=("backward",))
    grads = ", ".join(grad_names(schema))
    backward = _string(source, fields["backward"][1], f"{field}.backward")
    function = check_body(source, fields["backward"][1], backward, f"{field}.backward",
                           backward_header(schema, "_backward"),
                           f"write the body of `def backward(ctx, {grads})`: return one gradient per positional input")
    _check_gradient_count(source, fields["backward"][1], function, schema, f"{field}.backward")
    header = len(backward_header(schema, "_backward"))
    for name, message, hint in backward_name_problems(function, schema):
        raise body_error(source, fields["backward"][1], name.lineno - 1 - header, name.col_offset + 1 - 4,
                          f"{field}.backward: {message}", hint)
    setup_context = None
    if "setup_context" in fields:
        setup_context = _string(source, fields["setup_context"][1], f"{field}.setup_context")
        check_body(source, fields["setup_context"][1], setup_context, f"{field}.setup_context",
                    setup_context_header(schema, "_setup_context", setup_context),
                    "write the body of setup_context: `ctx`, the inputs and the outputs are in scope by name")
    return AutogradSpec(backward, setup_context)


def _check_gradient_count(source: _Source, node: ScalarNode, function, schema: Schema, field: str) -> None:
    """A `return a, b` in backward must give one gradient per positional input (None for non-tensors):
    torch only finds out at the first backward call. `function` is the parsed generated function."""

    header = len(backward_header(schema, "_backward"))

    expected = len(schema.positional)
    pending = list(function.body)
    while pending:
        statement = pending.pop()
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # returns of nested functions are theirs
        if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Tuple):
            got = len(statement.value.elts)
            if got != expected and not any(isinstance(e, ast.Starred) for e in statement.value.elts):
                names = ", ".join(a.name for a in schema.positional)
                raise body_error(source, node, statement.lineno - 1 - header, statement.col_offset + 1 - 4,
                                  f"{field} returns {got} gradients, but the op has {expected} positional input(s) "
                                  f"({names})", "return one gradient per positional input, None for non-tensors; "
                                  "keyword-only inputs get none")
        pending.extend(ast.iter_child_nodes(statement))


def _check_names_unique(source: _Source, ops_node: SequenceNode, ops: list[OpSpec]) -> None:
    seen: dict[str, int] = {}
    for op in ops:
        key = op.schema.op_name
        if key in seen:
            raise source.error(ops_node.value[op.index], f"ops[{op.index}] defines {key!r} again (first in "
                               f"ops[{seen[key]}])", "give each op (or overload) its own name")
        seen[key] = op.index



def _dtypes(source: _Source, node: Node, field: str) -> tuple[str, ...]:
    """`dtypes: [float16, float32]`: the floating dtypes the op supports (the tests sweep these, not all three of
    float16, bfloat16 and float32)."""
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of floating dtype names", "e.g. `dtypes: [float16, float32]`")
    found: list[str] = []
    for item in node.value:
        word = _scalar(item)
        name = DTYPES.get(word) if isinstance(word, str) else None
        if name not in FLOATING_DTYPES:
            raise source.error(item, f"{field}: {word!r} is not a floating dtype", f"one of: {', '.join(FLOATING_DTYPES)}")
        if name in found:
            raise source.error(item, f"{field}: {name} is listed twice", "list each dtype once")
        found.append(name)
    return tuple(found)


def _contiguous(source: _Source, node: Node, schema: Schema, field: str) -> tuple[str, ...]:
    """`contiguous: [x]`: inputs the kernels need contiguous; the generated registration passes them so, and refuses
    a written one that is not (a contiguous copy would take the kernel's writes)."""
    tensors = [a.name for a in schema.arguments if base_name(a.type) == "Tensor" and not isinstance(
        strip_alias(a.type), ListType)]
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of tensor argument names", f"e.g. `contiguous: "
                           f"[{(tensors or ['x'])[0]}]`")
    found: list[str] = []
    for item in node.value:
        name = _scalar(item)
        argument = schema.argument(name) if isinstance(name, str) else None
        if argument is None or name not in tensors:
            raise source.error(item, f"{field}: {name!r} is not a tensor argument of {schema.qualified_name}",
                               "tensor arguments: " + (", ".join(tensors) or "none"))
        if name not in found:
            found.append(name)
    return tuple(found)


def _ties(source: _Source, node: Node, schema: Schema, field: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """`ties: {topk_ids: scores}`: an index tensor (a return or a written argument) picking along the last dim of the
    scores: a tensor the op reads, or a Python expression of its arguments (`torch.softmax(logits.float(), -1)`).
    Where the scores tie, a kernel may pick another of the tied indices (torch.topk leaves that order unspecified).
    Each entry: (index name, expression, the arguments it reads)."""
    written = {a.name for a in schema.mutated_args}
    picks = [*schema.return_names, *(a.name for a in schema.mutated_args)]
    if not isinstance(node, MappingNode) or not node.value:
        read = [a.name for a in schema.arguments if a.name not in written]
        raise source.error(node, f"{field} must map an index output to the scores it picks from",
                           f"e.g. `ties: {{{(picks or ['indices'])[0]}: {(read or ['scores'])[0]}}}`")
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for key_node, value_node in node.value:
        name = _scalar(key_node)
        if name not in picks:
            raise source.error(key_node, f"{field}: {name!r} is neither a return nor a written argument of "
                               f"{schema.qualified_name}", "index outputs: " + (", ".join(picks) or "none"))
        scores = _scalar(value_node)
        found.append((name, str(scores), _scores_reads(source, value_node, scores, schema, f"{field}.{name}")))
    return tuple(found)


def _scores_reads(source: _Source, node: Node, scores, schema: Schema, field: str) -> tuple[str, ...]:
    """The arguments a `ties:` scores expression reads: some, none of them written (else a located error)."""
    written = {a.name for a in schema.mutated_args}
    read = [a.name for a in schema.arguments if base_name(a.type) == "Tensor" and not isinstance(
        strip_alias(a.type), ListType) and a.name not in written]
    hint = ("the name of a tensor it reads (" + (", ".join(read) or "none") + "), or a Python expression of its "
            "arguments and torch")
    try:
        tree = ast.parse(str(scores), mode="eval")
    except SyntaxError:
        raise source.error(node, f"{field}: {scores!r} is not a Python expression", hint) from None
    used = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - {"torch"})
    unknown = [n for n in used if schema.argument(n) is None]
    if not isinstance(scores, str) or unknown or written & set(used) or not used:
        problem = (f"names {', '.join(unknown)}, not an argument" if unknown else
                   f"reads {', '.join(sorted(written & set(used)))}, which the op writes" if written & set(used) else
                   "reads no argument")
        raise source.error(node, f"{field}: {scores!r} {problem}", hint)
    return tuple(used)


def _view_note(schema: Schema, contiguous: tuple[str, ...], where: str) -> str:
    written = [a.name for a in schema.mutated_args if a.name not in contiguous]
    note = (f"{where}.reference calls .view(), which fails on a non-contiguous input (the generated tests pass some): "
            f"use .reshape, or declare the inputs the kernel needs contiguous in {where}.contiguous")
    if written:
        note += (f"; for a written argument ({', '.join(written)}) `contiguous:` means the op refuses a non-contiguous "
                 "one with a clear error (the registration checks it), as real cache kernels do")
    return note


def _dtype_defaults(source: _Source, schema_node: ScalarNode, schema: Schema, codes: tuple[tuple[int, str], ...],
                    where: str) -> tuple[tuple[str, str], ...]:
    """(argument, dtype name) of each ScalarType argument whose default is a number: torch keeps the number and
    passes it to a Python kernel or fake as an int, not a torch.dtype, so the number must be one of the spec's
    `dtype_codes:` (the generated Python then defaults to that dtype); else it is refused at its column."""
    table = dict(codes)
    found = []
    for arg in schema.arguments:
        if base_name(arg.type) != "ScalarType" or not isinstance(arg.default, int) or isinstance(arg.default, bool):
            continue
        if arg.default in table:
            found.append((arg.name, table[arg.default]))
            continue
        offset = span_column(schema, ("arg", arg.name)) or 1
        raise source.inner(schema_node, offset, OpgenError(
            f"the default of ScalarType {arg.name!r} is the number {arg.default}: torch passes it to Python kernels "
            "and fake functions as an int, not a torch.dtype, so every call using the default fails",
            hint=f"write the dtype word (`ScalarType {arg.name}=float16`), or say which dtype {arg.default} is in "
            f"the spec's `dtype_codes:` (e.g. `dtype_codes: {{{arg.default}: float8_e4m3fn}}`)"), f"{where}.schema")
    return tuple(found)
