"""Read a spec (YAML) into `ProjectSpec`, with `path:line:col` on every error.

The YAML is composed into nodes (`yaml.compose`) rather than loaded, so every key and value keeps
the line and column it was written at; an error inside a schema string or a semantics expression
is placed at the exact character of the file.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
from dataclasses import replace

import yaml
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
from ..layout import BOUND_NAMES
from ..registration_styles import DEFAULT_STYLE
from ..schema.model import (
    BaseType,
    EnumWord,
    ListType,
    OptionalType,
    Return,
    Schema,
    base_name,
    strip_alias,
)
from ..schema.parser import parse_schema, span_column
from .autograd import (
    CONTEXT_PARAMETERS,
    FOREIGN_LINE_BREAKS,
    backward_header,
    backward_name_problems,
    function_source,
    grad_names,
    output_names,
    setup_context_header,
)
from .model import (
    DEFAULT_DEVICE,
    DEFAULT_TARGET,
    DEVICES,
    DTYPES,
    STYLES,
    TARGETS,
    AutogradSpec,
    Example,
    Expected,
    OpSpec,
    OutputSpec,
    ProjectSpec,
    TensorValue,
)
from .nodes import (
    SpecError,
    _choice,
    _identifier,
    _kind,
    _mapping,
    _scalar,
    _Source,
    _string,
)

SPEC_KEYS = ("namespace", "style", "device", "package", "target", "ops")
OP_KEYS = ("schema", "doc", "tags", "outputs", "reference", "autograd", "examples", "tolerances", "dtypes", "contiguous",
           "op_plugin")
AUTOGRAD_KEYS = ("setup_context", "backward")
OUTPUT_KEYS = ("shape", "dtype", "like")
TENSOR_KEYS = ("shape", "dtype", "values")
EXPECT_KEYS = ("values", "rows", "rtol", "atol")
TOLERANCE_KEYS = ("rtol", "atol")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names the generated modules use themselves; an argument with one of them would shadow it.


def load_spec(path: str) -> ProjectSpec:
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except FileNotFoundError:
        raise OpgenError(f"spec file {path} does not exist", hint="give the path of an opgen spec (YAML); "
                         "see docs/spec.md, or start from a schema with --schema") from None
    except (OSError, UnicodeDecodeError) as error:
        raise OpgenError(f"cannot read spec file {path}: {error}") from None
    return load_spec_text(text, path)


def load_spec_text(text: str, path: str = "<spec>", *, style: str | None = None,
                   device: str | None = None, target: str | None = None) -> ProjectSpec:
    """Parse and check a spec. `style`/`device` override the spec's own values (CLI flags)."""
    source = _Source(text, path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line if mark else 0
        column = mark.column + 1 if mark else 1
        problem = error.problem or error.context or "malformed YAML"
        raise source.error(None, f"invalid YAML: {problem}", "check indentation and quoting; quote strings "
                           "that contain ': ' or start with '{', '[' or '*'", line=line, column=column) from None
    except yaml.YAMLError as error:
        raise source.error(None, f"invalid YAML: {error}") from None
    if root is None:
        raise source.error(None, "the spec is empty", "a spec needs at least `namespace:` and `ops:` (see docs/spec.md)")
    top = _mapping(source, root, "the spec", SPEC_KEYS, required=("namespace", "ops"))

    namespace = _identifier(source, top["namespace"][1], "namespace")
    style_value = style or (_choice(source, top["style"][1], "style", STYLES) if "style" in top else DEFAULT_STYLE)
    device_value = device or (_choice(source, top["device"][1], "device", tuple(DEVICES))
                              if "device" in top else DEFAULT_DEVICE)
    package = _identifier(source, top["package"][1], "package") if "package" in top else namespace
    if keyword.iskeyword(package) or package in ("torch", "tests", "test"):
        node = top["package"][1] if "package" in top else top["namespace"][1]
        raise source.error(node, f"{package!r} cannot be the name of the generated Python package",
                           "set `package:` to another name")
    for diagnostic in check_namespace(namespace):
        if diagnostic.severity == ERROR:
            raise source.error(top["namespace"][1], diagnostic.message, diagnostic.hint)

    ops_node = top["ops"][1]
    if not isinstance(ops_node, SequenceNode) or not ops_node.value:
        raise source.error(ops_node, "`ops` must be a non-empty list of operators", "write `ops:` followed by "
                           "lines starting with `- schema: \"my_op(Tensor x) -> Tensor\"`")
    ops = [_op(source, node, index, namespace, style_value) for index, node in enumerate(ops_node.value)]
    _check_names_unique(source, ops_node, ops)
    notes = []
    for diagnostic in check_ops([op.schema for op in ops]):
        if diagnostic.severity == ERROR:
            raise source.error(ops_node, diagnostic.message, diagnostic.hint)
        notes.append(f"{diagnostic.code}: {diagnostic.text()}")
    target_value = target or (_choice(source, top["target"][1], "target", TARGETS) if "target" in top
                              else DEFAULT_TARGET)
    text_out = _with_overrides(source, top, {"style": style, "device": device, "target": target})
    return ProjectSpec(namespace, style_value, device_value, package, tuple(ops), text_out, path, tuple(notes),
                       target_value)


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


# --- YAML shapes ----------------------------------------------------------------------------------


def _op(source: _Source, node: Node, index: int, namespace: str, style: str) -> OpSpec:
    where = f"ops[{index}]"
    fields = _mapping(source, node, where, OP_KEYS, required=("schema",))
    schema_node = fields["schema"][1]
    schema_text = _string(source, schema_node, f"{where}.schema")
    try:
        schema = parse_schema(schema_text)
    except OpgenError as error:
        raise source.inner(schema_node, error.column or 1, error, f"{where}.schema") from None
    if schema.namespace is not None and schema.namespace != namespace:
        raise source.inner(schema_node, 1, OpgenError(
            f"the schema's namespace {schema.namespace!r} differs from the spec's namespace {namespace!r}",
            hint=f"drop '{schema.namespace}::' (the spec's `namespace:` applies to every op)"), f"{where}.schema")
    schema = _with_namespace(schema, namespace)
    notes: list[str] = []
    tags = _tags(source, fields["tags"][1], where) if "tags" in fields else ()
    if tags:  # the user opted into torch's tag: keep the aliased return, if the schema keeps the tag's contract
        problems = tag_contract_problems(schema, tags[0])
        if problems:  # the first, as torch would refuse it
            message, part = problems[0]
            raise source.inner(schema_node, span_column(schema, part) or 1, OpgenError(
                message, hint=f"{TAG_HINTS[tags[0]]}; or remove `{where}.tags` to let opgen drop the aliased return"),
                f"{where}.schema [{TAG_CONTRACT.code}]")
    else:
        schema = _rewrite_aliased_returns(schema, notes)
    if "autograd" in fields:  # torch refuses a formula for these: say so at the part of the schema to blame
        problems = autograd_problems(schema, tags)
        if problems:
            message, part = problems[0]
            raise source.inner(schema_node, span_column(schema, part) or 1, OpgenError(
                f"`{where}.autograd` is given, but {message}", hint=f"{AUTOGRAD_HINT}; or remove `{where}.autograd`"),
                f"{where}.schema [{AUTOGRAD_NOT_FUNCTIONAL.code}]")

    for diagnostic in check_schema(schema, tags=tags, side_effect_marked=True, style=style):
        if fatal_for_generation(diagnostic, style):
            offset = span_column(schema, diagnostic.part) if diagnostic.part is not None else None
            raise source.inner(schema_node, offset or 1, OpgenError(diagnostic.message, hint=diagnostic.hint),
                               f"{where}.schema [{diagnostic.code}]")
        if diagnostic.severity != "info":
            notes.append(f"{diagnostic.code}: {diagnostic.message}")
    for arg in schema.arguments:
        if keyword.iskeyword(arg.name) or arg.name in BOUND_NAMES or arg.name.startswith("_"):
            offset = span_column(schema, ("arg", arg.name)) or 1
            raise source.inner(schema_node, offset, OpgenError(
                f"argument name {arg.name!r} cannot be used in generated Python code",
                hint=f"rename it (Python keywords, {', '.join(map(repr, sorted(BOUND_NAMES)))} and names starting "
                "with '_' are taken)"), f"{where}.schema")

    doc = _string(source, fields["doc"][1], f"{where}.doc", allow_empty=True) if "doc" in fields else ""
    reference = None
    if "reference" in fields:
        reference = _string(source, fields["reference"][1], f"{where}.reference")
        _check_body(source, fields["reference"][1], reference, f"{where}.reference", ["def _reference():"],
                    "write the body of a function whose parameters are the op's arguments")
        if re.search(r"\.view\(", reference):
            notes.append(f"{where}.reference calls .view(), which fails on a non-contiguous input (the generated tests "
                         f"pass some): use .reshape, or declare the inputs the kernel needs contiguous in "
                         f"{where}.contiguous")
    autograd = _autograd(source, fields["autograd"], schema, schema_node, where) if "autograd" in fields else None
    if tags and "outputs" in fields:
        raise source.error(fields["outputs"][0], f"{where}.outputs: the op is tagged torch.Tag.{tags[0]}, so it "
                           "returns its mutated argument(s): their shape and dtype are already known",
                           "remove `outputs:`")
    outputs = _outputs(source, fields["outputs"][1] if "outputs" in fields else None, schema, where)
    if tags:
        written = [a.name for a in schema.mutated_args]
        outputs = tuple(replace(out, returns_argument=name) for out, name in zip(outputs, written))
    examples = _examples(source, fields["examples"][1] if "examples" in fields else None, schema, where)
    if examples and examples[0].derived:
        made_up = ", ".join(f"{name}: {_describe_value(value)}" for name, value in examples[0].values.items())
        notes.append(f"no `{where}.examples`: the generated tests call the op with one opgen made up ({made_up}); "
                     "add examples with the shapes, dtypes and values your kernel expects (docs/spec.md)")
    op_plugin = None
    if "op_plugin" in fields:  # read only by `opgen new --target op_plugin`
        from .op_plugin import parse_op_plugin

        op_plugin = parse_op_plugin(source, fields["op_plugin"][1], schema, where)
    tolerances = _tolerances(source, fields["tolerances"][1], f"{where}.tolerances") if "tolerances" in fields else ()
    dtypes = _dtypes(source, fields["dtypes"][1], f"{where}.dtypes") if "dtypes" in fields else ()
    contiguous = _contiguous(source, fields["contiguous"][1], schema, f"{where}.contiguous") \
        if "contiguous" in fields else ()
    return OpSpec(index, schema, doc, outputs, reference, examples, tuple(notes), tags, autograd, tolerances,
                  op_plugin, dtypes, contiguous)


def _tags(source: _Source, node: Node, where: str) -> tuple[str, ...]:
    """`tags: [inplace]` or `tags: [out]`: the torch.Tag the op is defined with."""
    field = f"{where}.tags"
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of torch.Tag names, not {_kind(node)}",
                           "write `tags: [inplace]` or `tags: [out]`")
    tags: list[str] = []
    for item in node.value:
        value = _string(source, item, f"{field} entry")
        if value not in ALIASING_TAGS:
            close = difflib.get_close_matches(value.removeprefix("torch.Tag."), ALIASING_TAGS, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise source.error(item, f"{field}: unknown tag {value!r}", hint + "opgen generates the tags: "
                               + ", ".join(ALIASING_TAGS))
        if value in tags:
            raise source.error(item, f"{field}: {value!r} is listed twice", "list each tag once")
        tags.append(value)
    if len(tags) > 1:
        raise source.error(node, f"{field}: an op is either in-place (Tag.inplace) or an out= variant (Tag.out), "
                           "not both", "keep one tag")
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
    notes.append(f"OPG102: rewrote {schema.qualified_name}: dropped aliased return(s) {', '.join(dropped)}; "
                 f"the schema is now '{rewritten.signature()}' (callers keep using the mutated argument; to keep the "
                 "return, add `tags: [inplace]` or `tags: [out]` to the op: torch >= 2.13)")
    return rewritten


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
    function = _check_body(source, fields["backward"][1], backward, f"{field}.backward",
                           backward_header(schema, "_backward"),
                           f"write the body of `def backward(ctx, {grads})`: return one gradient per positional input")
    _check_gradient_count(source, fields["backward"][1], function, schema, f"{field}.backward")
    header = len(backward_header(schema, "_backward"))
    for name, message, hint in backward_name_problems(function, schema):
        raise _body_error(source, fields["backward"][1], name.lineno - 1 - header, name.col_offset + 1 - 4,
                          f"{field}.backward: {message}", hint)
    setup_context = None
    if "setup_context" in fields:
        setup_context = _string(source, fields["setup_context"][1], f"{field}.setup_context")
        _check_body(source, fields["setup_context"][1], setup_context, f"{field}.setup_context",
                    setup_context_header(schema, "_setup_context", setup_context),
                    "write the body of setup_context: `ctx`, the inputs and the outputs are in scope by name")
    return AutogradSpec(backward, setup_context)


def _check_gradient_count(source: _Source, node: ScalarNode, function, schema: Schema, field: str) -> None:
    """A `return a, b` in backward must give one gradient per positional input (None for non-tensors):
    torch only finds out at the first backward call. `function` is the parsed generated function."""
    import ast

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
                raise _body_error(source, node, statement.lineno - 1 - header, statement.col_offset + 1 - 4,
                                  f"{field} returns {got} gradients, but the op has {expected} positional input(s) "
                                  f"({names})", "return one gradient per positional input, None for non-tensors; "
                                  "keyword-only inputs get none")
        pending.extend(ast.iter_child_nodes(statement))


def _check_body(source: _Source, node: ScalarNode, body: str, field: str, header: list[str], hint: str):
    """Parse `body` exactly as it will be generated (after opgen's `header` lines): the function's AST.

    Validating the very text that is written is what keeps the code inside its function: the module
    must be that one `def`, so the body can neither end the function early nor add code around it."""
    import ast

    for char in body:
        if char in FOREIGN_LINE_BREAKS or char == "\0":
            raise source.error(node, f"{field} contains the control character {char!r}",
                               "write the code with plain newlines (a `|` block)")
    text = function_source(header, body)
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        line = max((error.lineno or 1) - 1 - len(header), 0)
        raise _body_error(source, node, line, max((error.offset or 1) - 4, 1),
                          f"{field} is not valid Python: {error.msg}", hint) from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):  # cannot happen: belt and braces
        raise source.error(node, f"{field} does not stay inside its function", hint)
    return tree.body[0]


def _body_error(source: _Source, node: ScalarNode, line: int, column: int, message: str, hint: str) -> SpecError:
    """An error at 0-based `line`, 1-based `column` of a body as dedented (a `|` block maps to the file)."""
    body = _scalar(node)
    if node.style != "|" or not isinstance(body, str):
        return source.error(node, message, hint)
    import textwrap

    raw = body.split("\n")
    skipped = next((i for i, text in enumerate(raw) if text.strip()), 0)  # blank lines dropped before the code
    index = min(line + skipped, len(raw) - 1)
    dedented = textwrap.dedent(body).split("\n")
    common = len(raw[index]) - len(dedented[index]) if index < len(dedented) else 0
    file_line = node.start_mark.line + 1 + index
    text = source.lines[file_line] if file_line < len(source.lines) else ""
    margin = len(text) - len(raw[index]) if text.endswith(raw[index]) else 0
    return source.error(None, message, hint, line=file_line, column=margin + common + column)


def _outputs(source: _Source, node: Node | None, schema: Schema, where: str) -> tuple[OutputSpec, ...]:
    names = list(schema.return_names)
    given: dict[str, tuple[ScalarNode, Node]] = {}
    if node is not None and not (isinstance(node, ScalarNode) and _scalar(node) is None):
        if not names:
            raise source.error(node, f"{where}.outputs: the op returns nothing, so there is nothing to describe",
                               "remove `outputs:`")
        hint_names = ", ".join(names)
        if not isinstance(node, MappingNode):
            raise source.error(node, f"{where}.outputs must map each returned tensor to {{shape, dtype}}",
                               f"returned tensors: {hint_names}")
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
                hint = (f"did you mean {close[0]!r}? " if close else "") + f"the op returns: {hint_names} " \
                    "(unnamed returns are out0, out1, ...)"
                raise source.error(key_node, f"{where}.outputs: {key!r} is not a return of {schema.qualified_name}",
                                   hint)
            given[key] = (key_node, value_node)
    from .semantics import SemanticsError, parse_dtype, parse_shape

    outputs = []
    for index, (name, ret) in enumerate(zip(names, schema.returns)):
        supported = strip_alias(ret.type) == BaseType("Tensor")
        shape_rule = dtype_rule = like = None
        if name in given:
            key_node, value_node = given[name]
            field = f"{where}.outputs.{name}"
            if not supported:
                raise source.error(key_node, f"{field}: semantics can only describe plain Tensor returns, not "
                                   f"'{ret.type}'", "remove this entry; opgen writes a TODO fake for the op")
            entry = _mapping(source, value_node, field, OUTPUT_KEYS)
            if "like" in entry:
                like_node = entry["like"][1]
                like = _scalar(like_node) if isinstance(like_node, ScalarNode) else None
                tensors = [a.name for a in schema.arguments if strip_alias(a.type) == BaseType("Tensor")]
                if like not in tensors:
                    raise source.error(like_node, f"{field}.like must name a Tensor argument",
                                       f"one of: {', '.join(tensors) or '(none)'}")
                if "shape" in entry or "dtype" in entry:
                    raise source.error(like_node, f"{field}: `like` gives the shape and dtype already",
                                       "remove `shape`/`dtype`, or `like`")
                shape_rule = parse_shape(f"{like}.shape", schema, names[:index])
                dtype_rule = parse_dtype(f"{like}.dtype", schema, names[:index])
            if "shape" in entry:
                shape_rule = _rule(source, entry["shape"][1], f"{field}.shape", schema, parse_shape, SemanticsError,
                                   names[:index])
            if "dtype" in entry:
                dtype_rule = _rule(source, entry["dtype"][1], f"{field}.dtype", schema, parse_dtype, SemanticsError,
                                   names[:index])
        outputs.append(OutputSpec(name, index, shape_rule, dtype_rule, supported, like=like))
    return tuple(outputs)


def _rule(source: _Source, node: Node, field: str, schema: Schema, parse, error_type, earlier: list[str]):
    value = _scalar(node) if isinstance(node, ScalarNode) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise source.error(node, f"{field} must be an expression string, not {_kind(node)}",
                           'quote it, e.g. shape: "x.shape" or dtype: "x.dtype"')
    try:
        return parse(value, schema, earlier)  # a rule may read the outputs described before it
    except error_type as error:
        raise source.inner(node, error.column or 1, error, field) from None


# --- examples -------------------------------------------------------------------------------------


def _examples(source: _Source, node: Node | None, schema: Schema, where: str) -> tuple[Example, ...]:
    if node is None or (isinstance(node, ScalarNode) and _scalar(node) is None):
        derived = derive_example(schema)
        return () if derived is None else (derived,)
    if not isinstance(node, SequenceNode):
        raise source.error(node, f"{where}.examples must be a list of {{argument: value}} mappings",
                           "write `examples:` then `- {x: {shape: [4, 8], dtype: float32}}`")
    names = [a.name for a in schema.arguments]
    # `expect` is the key of the expected values, unless it is an argument's name (then it is that argument)
    expect_key = "expect" if "expect" not in names else None
    allowed = tuple(names) + ((expect_key,) if expect_key else ())
    examples = []
    for number, item in enumerate(node.value):
        field = f"{where}.examples[{number}]"
        entries = _mapping(source, item, field, allowed) if names or isinstance(item, MappingNode) else {}
        values: dict = {}
        for arg in schema.arguments:
            if arg.name in entries:
                values[arg.name] = _example_value(source, entries[arg.name][1], arg.type, f"{field}.{arg.name}")
            elif not arg.has_default:
                raise source.error(item, f"{field} gives no value for {arg.name!r}, which has no default",
                                   f"add `{arg.name}: ...` ({_value_hint(arg.type)})")
        expect = _expect(source, entries[expect_key][1], schema, f"{field}.expect") if expect_key in entries else ()
        examples.append(Example(values, expect=expect))
    return tuple(examples)


def _expect(source: _Source, node: Node, schema: Schema, field: str) -> tuple[Expected, ...]:
    """`expect: {<return or mutated argument>: VALUES | {values: VALUES, rtol:, atol:} | {rows: {i: VALUES}}}`."""
    returns = list(schema.return_names)
    untupled = len(schema.returns) == 1 and not schema.returns_tuple
    written = {a.name: (i if not a.kwarg_only else a.name) for i, a in enumerate(schema.arguments) if a.is_write}
    targets = returns + [name for name in written if name not in returns]
    if not isinstance(node, MappingNode) or not node.value:
        raise source.error(node, f"{field} must map outputs or mutated arguments to their expected values",
                           f"e.g. `expect: {{{(targets or ['out0'])[0]}: [[1.0, 2.0]]}}`; "
                           f"can be checked: {', '.join(targets) or 'nothing (the op returns and mutates nothing)'}")
    found = []
    for key_node, value_node in node.value:
        key = _scalar(key_node)
        if key not in targets:
            close = difflib.get_close_matches(str(key), targets, n=1, cutoff=0.5)
            raise source.error(key_node, f"{field}: {key!r} is neither a return nor a mutated argument of "
                               f"{schema.qualified_name}", (f"did you mean {close[0]!r}? " if close else "")
                               + f"can be checked: {', '.join(targets) or 'nothing'} (unnamed returns are out0, out1, ...)")
        if any(e.name == key for e in found):
            raise source.error(key_node, f"{field}: {key!r} is given twice", "keep one")
        where = f"{field}.{key}"
        if key in returns:
            index = returns.index(key)
            if strip_alias(schema.returns[index].type) != BaseType("Tensor"):
                raise source.error(key_node, f"{where}: only plain Tensor returns can be checked, not "
                                   f"'{schema.returns[index].type}'", "remove this entry")
            output, argument = (None if untupled else index), None
        else:
            output, argument = None, written[key]
        if isinstance(value_node, MappingNode):
            entries = _mapping(source, value_node, where, EXPECT_KEYS)
            if ("values" in entries) == ("rows" in entries):
                raise source.error(value_node, f"{where} needs exactly one of `values` (the whole tensor) or `rows` "
                                   "(some rows along dim 0)", "e.g. {rows: {7: [1.0, 2.0]}, atol: 1.0e-3}")
            rtol = _tolerance(source, entries["rtol"][1], f"{where}.rtol") if "rtol" in entries else None
            atol = _tolerance(source, entries["atol"][1], f"{where}.atol") if "atol" in entries else None
            if "values" in entries:
                found.append(Expected(key, output, argument, values=_numbers(source, entries["values"][1],
                                                                             f"{where}.values"), rtol=rtol, atol=atol))
                continue
            rows_node = entries["rows"][1]
            if not isinstance(rows_node, MappingNode) or not rows_node.value:
                raise source.error(rows_node, f"{where}.rows must map row indices to values", "e.g. {7: [1.0, 2.0]}")
            rows = []
            for row_key, row_value in rows_node.value:
                row = _scalar(row_key)
                if not isinstance(row, int) or isinstance(row, bool):
                    raise source.error(row_key, f"{where}.rows: {row!r} is not a row index (an integer)")
                if any(r == row for r, _ in rows):
                    raise source.error(row_key, f"{where}.rows: row {row} is given twice", "keep one")
                rows.append((row, _numbers(source, row_value, f"{where}.rows.{row}")))
            found.append(Expected(key, output, argument, rows=tuple(rows), rtol=rtol, atol=atol))
        else:
            found.append(Expected(key, output, argument, values=_numbers(source, value_node, where)))
    return tuple(found)


def _numbers(source: _Source, node: Node, field: str):
    """A number or a (nested, rectangular) list of numbers, as nested tuples."""
    values = yaml.safe_load(yaml.serialize(node)) if not isinstance(node, ScalarNode) else _scalar(node)
    if isinstance(values, str):
        number = _number(values)
        values = values if number is None else number

    def check(value) -> tuple | None:  # the shape of `value`, or None when it is not rectangular numbers
        if isinstance(value, list):
            shapes = {check(item) for item in value}
            if not value:
                return (0,)
            return None if len(shapes) != 1 or None in shapes else (len(value), *shapes.pop())
        return () if isinstance(value, (int, float)) else None

    if check(values) is None:
        raise source.error(node, f"{field} must be a number or a rectangular (nested) list of numbers",
                           "e.g. [[1.0, 2.0], [3.0, 4.0]]; .nan and .inf are numbers too")
    return _freeze(values)


def _tolerance(source: _Source, node: Node, field: str) -> float:
    value = _number(_scalar(node)) if isinstance(node, ScalarNode) else None
    if value is None or value < 0:
        raise source.error(node, f"{field} must be a number >= 0", "e.g. 1.0e-3")
    return value


def _tolerances(source: _Source, node: Node, field: str) -> tuple[tuple[str, float, float], ...]:
    """`tolerances: {float16: {rtol: 1e-2, atol: 1e-3}}`: the device kernel against the CPU reference."""
    if not isinstance(node, MappingNode):
        raise source.error(node, f"{field} must map dtype names to {{rtol, atol}}",
                           "e.g. {float16: {rtol: 1.0e-2, atol: 1.0e-3}}")
    found = []
    for key_node, value_node in node.value:
        word = _scalar(key_node)
        if not isinstance(word, str) or word not in DTYPES:
            raise source.error(key_node, f"{field}: unknown dtype {word!r}", f"one of: {', '.join(DTYPES)}")
        entries = _mapping(source, value_node, f"{field}.{word}", TOLERANCE_KEYS, required=TOLERANCE_KEYS)
        found.append((DTYPES[word], _tolerance(source, entries["rtol"][1], f"{field}.{word}.rtol"),
                      _tolerance(source, entries["atol"][1], f"{field}.{word}.atol")))
    return tuple(sorted(found))


FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")


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
    """`contiguous: [x]`: inputs the kernels need contiguous; the generated registration passes them so."""
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
        if argument.is_write:
            raise source.error(item, f"{field}: {name!r} is written (Tensor(a!)): a contiguous copy would take the "
                               "kernel's writes", "make the kernel handle any strides of it (or copy back itself)")
        if name not in found:
            found.append(name)
    return tuple(found)


def _value_hint(t) -> str:
    name = base_name(t)
    if name == "Tensor":
        if isinstance(strip_alias(t), ListType):
            return "a list of {shape: [...], dtype: ...}"
        return "{shape: [4, 8], dtype: float32} or {values: [...], dtype: int64}"
    return {"int": "an integer", "SymInt": "an integer", "float": "a number", "bool": "true or false",
            "str": "a string", "ScalarType": "a dtype name such as float32", "Scalar": "a number"}.get(name, "a value")


def _example_value(source: _Source, node: Node, t, field: str):
    t = strip_alias(t)
    if isinstance(t, OptionalType):
        if isinstance(node, ScalarNode) and _scalar(node) is None:
            return None
        return _example_value(source, node, t.elem, field)
    if isinstance(t, ListType):
        if not isinstance(node, SequenceNode):
            raise source.error(node, f"{field} must be a list ({_value_hint(t)}), not {_kind(node)}")
        # `int[2]`'s size is a hint torch does not enforce: any length is accepted, as by torch
        return tuple(_example_value(source, item, t.elem, f"{field}[{i}]") for i, item in enumerate(node.value))
    name = t.name if isinstance(t, BaseType) else None
    if name == "Tensor":
        return _tensor_value(source, node, field)
    value = _scalar(node) if isinstance(node, ScalarNode) else node
    if name in ("int", "SymInt") and isinstance(value, int) and not isinstance(value, bool):
        return value
    if name == "float":
        number = _number(value)
        if number is not None:
            return number
    if name == "Scalar":
        number = _number(value)
        if number is not None:
            return int(number) if isinstance(value, int) else number
    if name == "bool" and isinstance(value, bool):
        return value
    if name == "str" and isinstance(value, str):
        return value
    if name == "ScalarType" and isinstance(value, str):
        if value not in DTYPES:
            raise source.error(node, f"{field}: unknown dtype {value!r}", f"one of: {', '.join(DTYPES)}")
        return EnumWord(DTYPES[value])
    if name not in ("int", "SymInt", "float", "Scalar", "bool", "str", "ScalarType"):
        raise source.error(node, f"{field}: examples cannot give a value of type '{t}' yet",
                           "leave the argument out to use its default")
    raise source.error(node, f"{field} must be {_value_hint(t)}, not {_kind(node)}")


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _tensor_value(source: _Source, node: Node, field: str) -> TensorValue:
    entries = _mapping(source, node, field, TENSOR_KEYS)
    if ("shape" in entries) == ("values" in entries):
        raise source.error(node, f"{field} needs exactly one of `shape` (random values) or `values` (exact values)",
                           "e.g. {shape: [4, 8], dtype: float16} or {values: [0, 2], dtype: int64}")
    dtype = None
    if "dtype" in entries:
        word = _string(source, entries["dtype"][1], f"{field}.dtype")
        if word not in DTYPES:
            close = difflib.get_close_matches(word, DTYPES, n=1)
            raise source.error(entries["dtype"][1], f"{field}.dtype: unknown dtype {word!r}",
                               (f"did you mean {close[0]!r}? " if close else "") + f"one of: {', '.join(DTYPES)}")
        dtype = DTYPES[word]
    if "shape" in entries:
        shape_node = entries["shape"][1]
        shape = _scalar(shape_node) if isinstance(shape_node, ScalarNode) else None
        items = shape_node.value if isinstance(shape_node, SequenceNode) else None
        dims = [_scalar(item) if isinstance(item, ScalarNode) else None for item in (items or [])]
        if items is None or shape is not None or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                         for d in dims):
            raise source.error(shape_node, f"{field}.shape must be a list of sizes >= 0, such as [4, 8]")
        return TensorValue(dtype or "float32", shape=tuple(dims))
    values = yaml.safe_load(yaml.serialize(entries["values"][1]))
    flat = list(_flatten(values))
    if not flat and not isinstance(values, list) or any(isinstance(v, (str, type(None), dict)) for v in flat):
        raise source.error(entries["values"][1], f"{field}.values must be a number or (nested) list of numbers")
    if dtype is None:
        dtype = "bool" if all(isinstance(v, bool) for v in flat) and flat else (
            "int64" if all(isinstance(v, int) for v in flat) else "float32")
    return TensorValue(dtype, values=_freeze(values))


def _flatten(value):
    if isinstance(value, list):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _freeze(value):
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


# Tensor arguments with these names index into other tensors: a made-up example gives them int64 values
# 0..3, valid along any dimension of the made-up [4, 8] tensors.
_INDEX_NAME = re.compile(r"(^|_)(index|indices|idx|ids?|slots?|slot_mapping|positions?|offsets?)$")


def derive_example(schema: Schema) -> Example | None:
    """A small call for an op without `examples` (tensors [4, 8] float32, index-like names int64 0..3), or
    None when opgen cannot guess one."""
    values: dict = {}
    for arg in schema.arguments:
        if arg.has_default:
            continue
        t = strip_alias(arg.type)
        if t == BaseType("Tensor") and _INDEX_NAME.search(arg.name):
            values[arg.name] = TensorValue("int64", values=(0, 1, 2, 3))
        elif t == BaseType("Tensor"):
            values[arg.name] = TensorValue("float32", shape=(4, 8))
        elif t == ListType(BaseType("Tensor")):
            values[arg.name] = (TensorValue("float32", shape=(4, 8)), TensorValue("float32", shape=(4, 8)))
        elif t in (BaseType("int"), BaseType("SymInt")):
            values[arg.name] = 1
        elif t == BaseType("float"):
            values[arg.name] = 0.5
        elif t == BaseType("bool"):
            values[arg.name] = False
        else:
            return None
    return Example(values, derived=True)


def _describe_value(value) -> str:
    if isinstance(value, TensorValue):
        shape = list(value.shape) if value.shape is not None else list(value.values)
        return f"{value.dtype}{shape}" if value.shape is not None else f"{value.dtype} {shape}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_describe_value(item) for item in value) + "]"
    return repr(value)


def _check_names_unique(source: _Source, ops_node: SequenceNode, ops: list[OpSpec]) -> None:
    seen: dict[str, int] = {}
    for op in ops:
        key = op.schema.op_name
        if key in seen:
            raise source.error(ops_node.value[op.index], f"ops[{op.index}] defines {key!r} again (first in "
                               f"ops[{seen[key]}])", "give each op (or overload) its own name")
        seen[key] = op.index




def _inputs_hint(key: str, schemas: dict[str, Schema]) -> str:
    """What a mapping in an inputs file may hold: op names mapped to lists of examples, or one op's example."""
    names = "map op names (" + ", ".join(schemas) + ") to lists of examples"
    if len(schemas) > 1:
        arguments = {a.name for schema in schemas.values() for a in schema.arguments}
        return names + (f"; {key!r} is an argument: one bare example is only for one checked op" if key in arguments
                        else "")
    schema = next(iter(schemas.values()))
    return names + ", or give one example of its arguments (" + ", ".join(a.name for a in schema.arguments) + ")"


def _is_one_example(root: MappingNode, schemas: dict[str, Schema]) -> bool:
    """A mapping of the one checked op's argument names (no op name among them) is one example of it."""
    if len(schemas) != 1:
        return False
    schema = next(iter(schemas.values()))
    keys = [_scalar(key) for key, _ in root.value]
    return all(isinstance(key, str) and schema.argument(key) is not None for key in keys)


def load_inputs_text(text: str, path: str, schemas: dict[str, Schema]) -> dict[str, tuple[Example, ...]]:
    """`opgen check --inputs FILE` (YAML or JSON): examples in the spec's syntax, either one list for every
    op, one example (a mapping of argument names) when one op is checked, or a mapping from op name (`ns::op`,
    `op` or `ns::op.overload`) to a list. Keys of `schemas` are
    the ops' full names; the result maps each op the file gives examples for to them."""
    source = _Source(text, path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise source.error(None, f"invalid YAML/JSON: {error.problem or error.context}",
                           line=mark.line if mark else 0, column=mark.column + 1 if mark else 1) from None
    except yaml.YAMLError as error:
        raise source.error(None, f"invalid YAML/JSON: {error}") from None
    hint = ("write a list of examples, e.g. `- {x: {shape: [4, 8], dtype: float32}, eps: 1.0e-6}`, or map op "
            "names to such lists")
    if isinstance(root, SequenceNode):
        return {name: _examples(source, root, schema, "inputs") for name, schema in schemas.items()}
    if not isinstance(root, MappingNode):
        raise source.error(root, "the inputs file must be a list of examples or a mapping of op names to lists", hint)
    if _is_one_example(root, schemas):  # `{x: {shape: [4, 8]}, eps: 1e-6}`: the one example of the one op
        name, schema = next(iter(schemas.items()))
        single = SequenceNode("tag:yaml.org,2002:seq", [root], root.start_mark, root.end_mark)
        return {name: _examples(source, single, schema, "inputs")}
    found: dict[str, tuple[Example, ...]] = {}
    for key_node, value in root.value:
        key = _string(source, key_node, "an op name")
        matches = [name for name in schemas if key in (name, name.split("::")[-1], name.split(".")[0],
                                                        name.split("::")[-1].split(".")[0])]
        if not matches:
            raise source.error(key_node, f"{key!r} is none of the checked ops", _inputs_hint(key, schemas))
        for name in matches:
            found[name] = _examples(source, value, schemas[name], f"inputs[{key!r}]")
    return found
