"""`ops[i].fusion`: the composites models write instead of calling the op, read from the YAML nodes.

The generated `<package>/patterns.py` registers them with npugraph_ex's and Inductor's pattern matchers, which
replace each composite by the op in compiled graphs. `fusion:` is one form (a mapping), a list of forms, or a
mapping with `forms:`; beside the forms it says where to register (`targets`) and which Hugging Face models prove
it (`models`). Everything is checked here, with `file:line:col`: whether the op can be a replacement at all, each
composite's body (parsed as it will be written, its returns counted), which arguments are matched as graph values
and which are constants, the conditions (`when:`, in the semantics language), the targets and the models; and which
example inputs each form is first traced with (one per dtype combination, so that a bfloat16 model's casts match).
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import replace

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import OpgenError
from ..schema.model import Argument, BaseType, ListType, OptionalType, Schema, strip_alias
from ..schema.parser import span_column
from .bodies import body_error, check_body, own_returns, value_returns
from .examples import example_value, parse_tolerances
from .model import (
    FLOATING_DTYPES,
    FUSION_TARGETS,
    HALF_DTYPES,
    FusionForm,
    FusionModel,
    FusionSpec,
    OpSpec,
    TensorValue,
)
from .nodes import _identifier, _kind, _mapping, _scalar, _Source, _string
from .semantics import SemanticsError, parse_condition

FORM_KEYS = ("name", "pattern", "inputs", "constants", "when", "tolerances")
OP_KEYS = ("targets", "models")  # about the op's fusion as a whole, beside its forms
MODEL_KEYS = ("architecture", "config", "cache")
MODEL_CACHES = ("static",)  # `fusion.models[k].cache`: the transformers caches the models test can pass in
# Scalars a pattern matches by value (torch's `scalar_workaround` turns a literal of the traced value into a wildcard):
# floats only, as npugraph_ex's own patterns use it (an int is often a dim or a size, which a traced wildcard breaks).
MATCHED_SCALARS = ("float",)
HEADER = ["def _composite():"]  # the body is checked as the body of a function, as for `reference:`
MAX_TRACES = 6  # first traces per form: every dtype combination of the examples, then other ranks


def with_fusion(source: _Source, entry: tuple[ScalarNode, Node], op: OpSpec, reference_node: Node | None,
                schema_node: ScalarNode, namespace: str) -> OpSpec:
    """`op` with its `fusion:`, and a note when no form is traced in half precision."""
    fusion = parse_fusion(source, entry, op, reference_node, schema_node, namespace)
    return replace(op, fusion=fusion, notes=op.notes + _half_precision_notes(op, fusion))


def parse_fusion(source: _Source, entry: tuple[ScalarNode, Node], op: OpSpec, reference_node: Node | None,
                 schema_node: ScalarNode, namespace: str) -> FusionSpec:
    """`ops[i].fusion` of the (otherwise complete) `op`."""
    where = f"ops[{op.index}].fusion"
    key_node, node = entry
    _check_replaceable(source, key_node, schema_node, op, where)
    if isinstance(node, ScalarNode) and _scalar(node) is None:
        node = MappingNode("tag:yaml.org,2002:map", [], node.start_mark, node.end_mark)
    fields: dict = {}
    if isinstance(node, SequenceNode):
        items = [(item, f"{where}[{number}]", FORM_KEYS) for number, item in enumerate(node.value)]
        if not items:
            raise source.error(node, f"{where} is an empty list of forms", "give one form (a mapping) or more")
    else:
        fields = _mapping(source, node, where, ("forms", *FORM_KEYS, *OP_KEYS))
        if "forms" in fields:
            items = _form_items(source, fields, where)
        else:
            items = [(node, where, (*FORM_KEYS, *OP_KEYS))]
    forms = tuple(_form(source, item, field, allowed, key_node, op, reference_node, namespace)
                  for item, field, allowed in items)
    _check_distinct(source, [item for item, _, _ in items], forms)
    targets = _targets(source, fields["targets"][1], f"{where}.targets") if "targets" in fields else FUSION_TARGETS
    models = _models(source, fields["models"][1], f"{where}.models") if "models" in fields else ()
    return FusionSpec(forms, targets, models, where)


def _form_items(source: _Source, fields: dict, where: str) -> list[tuple[Node, str, tuple[str, ...]]]:
    """The nodes of `fusion.forms`; the keys of one form may not stand beside it."""
    stray = [fields[key][0] for key in FORM_KEYS if key in fields]
    if stray:
        raise source.error(stray[0], f"{where}.{stray[0].value} stands beside {where}.forms: each form has its own",
                           f"move it into the forms of {where}.forms that need it")
    node = fields["forms"][1]
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{where}.forms must be a list of forms, not {_kind(node)}",
                           "e.g. `forms: [{name: llama, pattern: ...}, {name: olmo2, pattern: ...}]`")
    return [(item, f"{where}.forms[{number}]", FORM_KEYS) for number, item in enumerate(node.value)]


def _form(source: _Source, node: Node, field: str, allowed: tuple[str, ...], key_node: ScalarNode, op: OpSpec,
          reference_node: Node | None, namespace: str) -> FusionForm:
    """One composite: its body, inputs, constants, conditions, name and first traces."""
    if isinstance(node, ScalarNode) and _scalar(node) is None:
        node = MappingNode("tag:yaml.org,2002:map", [], node.start_mark, node.end_mark)
    fields = _mapping(source, node, field, allowed)
    anchor = key_node if field.endswith(".fusion") else node
    body, body_node, body_field = _body(source, anchor, fields, op, reference_node, field)
    _check_composite(source, body_node, body, body_field, op, namespace)
    inputs = _inputs(source, fields.get("inputs"), op.schema, field)
    _check_inputs_read(source, fields["inputs"][1] if "inputs" in fields else body_node, body_node, body, body_field,
                       inputs, field)
    constants = _constants(source, fields.get("constants"), op.schema, inputs, anchor, field)
    conditions = _conditions(source, fields["when"][1], op.schema, f"{field}.when") if "when" in fields else ()
    name = _identifier(source, fields["name"][1], f"{field}.name") if "name" in fields else ""
    # the op's results against this composite's where they are not bit-identical (another order of casts)
    tolerances = parse_tolerances(source, fields["tolerances"][1], f"{field}.tolerances") \
        if "tolerances" in fields else ()
    traces = _traces(op, inputs)
    if not traces:
        raise source.error(anchor, f"{field}: no example of ops[{op.index}] gives every tensor input of the pattern "
                           f"({', '.join(inputs)}): it has nothing to be traced with",
                           f"add an example with them to ops[{op.index}].examples")
    return FusionForm(field, name, body, "pattern" not in fields, inputs, constants, conditions, traces, tolerances)


def _check_distinct(source: _Source, nodes: list[Node], forms: tuple[FusionForm, ...]) -> None:
    """Each form is another composite, and each name names one form."""
    seen: dict = {}
    names: dict[str, str] = {}
    for node, form in zip(nodes, forms, strict=True):
        key = (ast.dump(ast.parse(form.body)), form.inputs, form.constants,
               tuple(rule.python() for rule in form.conditions))
        if key in seen:
            raise source.error(node, f"{form.field} is the composite of {seen[key]} again",
                               "remove one (the operand orders of a sum or product are matched without a form each)")
        seen[key] = form.field
        if form.name and form.name in names:
            raise source.error(node, f"{form.field}.name {form.name!r} is the name of {names[form.name]} too",
                               "give each form its own name")
        names[form.name] = form.field


def _traces(op: OpSpec, inputs: tuple[str, ...]) -> tuple[dict, ...]:
    """The inputs of a form's first traces (their metadata; None for a float matched by value): one per dtype
    combination of the examples' tensors, then one per other rank, up to MAX_TRACES (`_candidates`)."""
    tensors = [name for name in inputs if op.schema.argument(name).is_tensor]
    by_dtypes: dict = {}
    by_rank: dict = {}
    for trace in _candidates(op, inputs, tensors):
        dtypes = tuple(trace[name].dtype for name in tensors)
        by_dtypes.setdefault(dtypes, trace)
        by_rank.setdefault((dtypes, tuple(len(trace[name].shape) for name in tensors)), trace)
    chosen = list(by_dtypes.values())
    chosen += [trace for trace in by_rank.values() if all(trace is not c for c in chosen)]
    return tuple(chosen[:max(MAX_TRACES, len(by_dtypes))])


def _candidates(op: OpSpec, inputs: tuple[str, ...], tensors: list[str]) -> list[dict]:
    """Each example that gives every tensor input, and it in every dtype of `ops[i].dtypes` (its tensors of its first
    floating dtype in it, as the tests sweep it). With `ops[i].dtypes`, one with another floating dtype is left out
    (the fusion does not apply there)."""
    found = []
    for example in op.examples:
        values = example.values
        if not all(isinstance(values.get(name), TensorValue) for name in tensors):
            continue
        base = {name: _metadata(values[name]) if name in tensors else None for name in inputs}
        main = next((base[name].dtype for name in tensors if base[name].dtype in FLOATING_DTYPES), None)
        found.append(base)
        found += [{name: replace(v, dtype=dtype) if isinstance(v, TensorValue) and v.dtype == main else v
                   for name, v in base.items()} for dtype in op.dtypes if main is not None and dtype != main]
    if not op.dtypes:
        return found
    return [c for c in found if all(v.dtype in op.dtypes for v in c.values() if isinstance(v, TensorValue)
                                    and v.dtype in FLOATING_DTYPES)]


def _metadata(value: TensorValue) -> TensorValue:
    return TensorValue(value.dtype, value.shape if value.shape is not None else _shape(value.values))


def _shape(values) -> tuple[int, ...]:
    shape = []
    while isinstance(values, (tuple, list)):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)


def _half_precision_notes(op: OpSpec, fusion: FusionSpec) -> tuple[str, ...]:
    """A fused op whose forms are traced in no half-precision dtype: a float16 or bfloat16 model (how most are
    served) has casts those traces lack, so its composite stays unfused there."""
    dtypes = sorted({d for form in fusion.forms for combination in form.floating_dtypes for d in combination})
    if not dtypes or any(d in HALF_DTYPES for d in dtypes):
        return ()
    source = f"ops[{op.index}].dtypes" if op.dtypes else f"ops[{op.index}].examples"
    return ((f"{fusion.field} is traced in {', '.join(dtypes)} only (the dtypes of {source}): a bfloat16 or float16 "
            "model has casts these patterns lack, and keeps its composite; add an example in bfloat16 (or list the "
            f"dtypes in ops[{op.index}].dtypes)"),)


def _models(source: _Source, node: Node, field: str) -> tuple[FusionModel, ...]:
    """`fusion.models`: Hugging Face architecture names (`LlamaForCausalLM`), each alone or with config values."""
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of Hugging Face architectures",
                           "e.g. `models: [LlamaForCausalLM, {architecture: Qwen3ForCausalLM, config: {...}}]`")
    found: dict[str, FusionModel] = {}
    for number, item in enumerate(node.value):
        where = f"{field}[{number}]"
        config: tuple = ()
        cache = ""
        if isinstance(item, MappingNode):
            fields = _mapping(source, item, where, MODEL_KEYS, required=("architecture",))
            architecture = _identifier(source, fields["architecture"][1], f"{where}.architecture")
            if "config" in fields:
                config = _config(source, fields["config"][1], f"{where}.config")
            if "cache" in fields:
                cache = _cache(source, fields["cache"][1], f"{where}.cache")
        else:
            architecture = _identifier(source, item, where)
        if architecture in found:
            raise source.error(item, f"{where}: {architecture} is listed twice", "list each architecture once")
        found[architecture] = FusionModel(architecture, config, cache)
    return tuple(found.values())


def _cache(source: _Source, node: Node, field: str) -> str:
    """`fusion.models[k].cache`: which transformers cache the model is run with (`static`: a StaticCache)."""
    if not isinstance(node, ScalarNode) or node.value not in MODEL_CACHES:
        raise source.error(node, f"{field} must be one of {', '.join(MODEL_CACHES)}",
                           "`cache: static` runs the model with a transformers StaticCache passed in (use_cache on)")
    return node.value


def _config(source: _Source, node: Node, field: str) -> tuple[tuple[str, object], ...]:
    if not isinstance(node, MappingNode):
        raise source.error(node, f"{field} must map config names to values", "e.g. `config: {num_hidden_layers: 1}`")
    found = []
    for key, value in node.value:
        name = _identifier(source, key, f"{field} key")
        found.append((name, _scalar(value)))
    return tuple(found)


def _check_replaceable(source: _Source, key_node: ScalarNode, schema_node: ScalarNode, op: OpSpec, where: str) -> None:
    """The ops a compiled graph cannot get in place of a composite, refused where the spec says why."""
    refusals = [
        (op.random, ("the op draws random numbers (torch.Tag.nondeterministic_seeded): its draws cannot equal the "
         "composite's"), f"remove `{where}`"),
        (bool(op.aliasing_tag), (f"the op is tagged torch.Tag.{op.aliasing_tag} (it returns its mutated argument), "
         "which opgen's replacements do not functionalize"), (f"remove `{where}`, or the tag (opgen's default form "
         "`-> ()` can be a replacement)")),
        (op.is_dynamic, "the op has a data-dependent output size (`dynamic`), which npugraph_ex does not compile",
         f"remove `{where}`"),
        (bool(op.missing_semantics), ("the op has no fake function from the semantics (the replacement is traced with "
         "fake tensors)"), f"fill {', '.join(op.missing_semantics)}"),
        (not op.schema.returns and not op.schema.is_mutable, ("the op returns nothing and writes nothing: a composite "
         "has nothing it could replace"), f"remove `{where}`"),
    ]
    for refused, why, hint in refusals:
        if refused:
            raise source.error(key_node, f"{where}: {op.schema.qualified_name} cannot replace a composite: {why}", hint)
    for ret in op.schema.returns:
        if strip_alias(ret.type) != BaseType("Tensor"):
            raise source.inner(schema_node, span_column(op.schema, "returns") or 1, OpgenError(
                f"`{where}`: a replacement returns plain Tensors, and this op returns '{ret.type}'",
                hint=f"remove `{where}`"), f"ops[{op.index}].schema")
    for arg in op.schema.arguments:
        listed = isinstance(strip_alias(arg.type), ListType) and arg.is_tensor
        optional_write = arg.is_write and isinstance(strip_alias(arg.type), OptionalType)
        if listed or optional_write:
            what = "a list of tensors" if listed else "an optional written tensor"
            raise source.inner(schema_node, span_column(op.schema, ("arg", arg.name)) or 1, OpgenError(
                f"`{where}`: argument {arg.name!r} is {what} ('{arg.type}'), which opgen's patterns do not match",
                hint=f"remove `{where}`"), f"ops[{op.index}].schema")


def _body(source: _Source, key_node: ScalarNode, fields: dict, op: OpSpec, reference_node: Node | None,
          where: str) -> tuple[str, Node, str]:
    """The composite's body, its node and its field: `fusion.pattern`, else the op's `reference:`."""
    if "pattern" in fields:
        node = fields["pattern"][1]
        return _string(source, node, f"{where}.pattern"), node, f"{where}.pattern"
    if op.reference is None or reference_node is None:
        raise source.error(key_node, f"{where}: no composite to match: the op has no `reference:`",
                           f"give `{where}.pattern`: the body that models write instead of calling the op")
    return op.reference, reference_node, f"ops[{op.index}].reference (the composite of {where})"


def _check_composite(source: _Source, node: Node, body: str, field: str, op: OpSpec, namespace: str) -> None:
    """The composite returns what the op returns (one value per return, none for `-> ()`) and does not call the op."""
    function = check_body(source, node, body, field, HEADER, "write the body of a function of the op's arguments "
                          "that computes what the op does, as models write it")
    header = len(HEADER)
    count = len(op.schema.returns)
    for returned in own_returns(function):
        got = _return_count(returned)
        if got is not None and got != count:
            wanted = "nothing (the op returns nothing; the buffers it writes are written in place)" if not count \
                else f"{count} value(s), one per return of the op ({', '.join(op.schema.return_names)})"
            raise body_error(source, node, returned.lineno - 1 - header, returned.col_offset + 1 - 4,
                             f"{field} returns {got} value(s), but it must return {wanted}",
                             "return what the op returns, in its order")
    if count and not value_returns(function):
        raise source.error(node, f"{field} returns nothing, but the op returns {', '.join(op.schema.return_names)}",
                           "end the body with `return ...`, one value per return of the op")
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Attribute)):
        if _dotted(call) in (f"torch.ops.{namespace}.{op.schema.name}", f"torch.ops.{namespace}"):
            raise body_error(source, node, call.lineno - 1 - header, call.col_offset + 1 - 4,
                             f"{field} calls the op itself: the composite is what models write without it",
                             "write the computation with torch operators")


def _check_inputs_read(source: _Source, node: Node, body_node: Node, body: str, field: str, inputs: tuple[str, ...],
                       where: str) -> None:
    """Every input is read by the composite: a pattern is traced from it, and one input it never uses has no node to
    match (torch's matcher then fails on every graph)."""
    read = {n.id for n in ast.walk(check_body(source, body_node, body, field, HEADER, "")) if isinstance(n, ast.Name)}
    unread = [name for name in inputs if name not in read]
    if unread:
        raise source.error(node, f"{field} never reads {', '.join(unread)}, an input of the pattern ({where}.inputs): a "
                           "pattern traced from it has no node to match it with", "read it in the composite (the op "
                           f"takes every tensor argument); a scalar may instead be a value of {where}.constants")


def _return_count(statement: ast.Return) -> int | None:
    """How many values a `return` gives: 0 for a bare `return` / `return None`, the items of a tuple display, 1 for
    another expression that is no tuple; None when it cannot be known (a name that may hold a tuple)."""
    value = statement.value
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return 0
    if isinstance(value, ast.Tuple):
        return None if any(isinstance(e, ast.Starred) for e in value.elts) else len(value.elts)
    return None if isinstance(value, (ast.Name, ast.Subscript, ast.Call)) else 1


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _kind_of(arg: Argument) -> str:
    t = strip_alias(arg.type)
    t = t.elem if isinstance(t, OptionalType) else t
    return t.name if isinstance(t, BaseType) else str(t)


def _inputs(source: _Source, entry: tuple[ScalarNode, Node] | None, schema: Schema, where: str) -> tuple[str, ...]:
    """`fusion.inputs`: the arguments matched as graph values. Default: every (non-optional) tensor argument."""
    tensors = [a.name for a in schema.arguments if a.is_tensor and not isinstance(strip_alias(a.type), OptionalType)]
    if entry is None:
        return tuple(tensors)
    field = f"{where}.inputs"
    node = entry[1]
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of argument names", f"e.g. `inputs: [{', '.join(tensors)}]`")
    found: list[str] = []
    for item in node.value:
        name = _scalar(item)
        arg = schema.argument(name) if isinstance(name, str) else None
        if arg is None:
            close = difflib.get_close_matches(str(name), [a.name for a in schema.arguments], n=1)
            raise source.error(item, f"{field}: {name!r} is not an argument of {schema.qualified_name}",
                               (f"did you mean {close[0]!r}? " if close else "") + "the arguments are: "
                               + ", ".join(a.name for a in schema.arguments))
        if name in found:
            raise source.error(item, f"{field}: {name!r} is listed twice", "list each argument once")
        if not arg.is_tensor and _kind_of(arg) not in MATCHED_SCALARS:
            raise source.error(item, f"{field}: {name!r} is '{arg.type}', which a pattern cannot match as a value "
                               "(it matches float literals only)",
                               f"give its value in `{where}.constants` instead")
        found.append(name)
    missing = [name for name in tensors if name not in found]
    if missing:
        raise source.error(node, f"{field} leaves out the tensor(s) {', '.join(missing)}: a tensor cannot be a "
                           "constant of a pattern", f"add {', '.join(missing)} to {field}")
    return tuple(a.name for a in schema.arguments if a.name in found)


def _constants(source: _Source, entry: tuple[ScalarNode, Node] | None, schema: Schema, inputs: tuple[str, ...],
               key_node: ScalarNode, where: str) -> tuple[tuple[str, object], ...]:
    """`fusion.constants`: the value of every argument that is not an input, baked into the pattern (default: its
    schema default)."""
    field = f"{where}.constants"
    given: dict[str, tuple[ScalarNode, Node]] = {}
    if entry is not None:
        node = entry[1]
        if not isinstance(node, MappingNode):
            raise source.error(node, f"{field} must map argument names to values", "e.g. `constants: {epsilon: 1.0e-6}`")
        others = tuple(a.name for a in schema.arguments if a.name not in inputs)
        for key, value in node.value:
            name = _scalar(key)
            arg = schema.argument(name) if isinstance(name, str) else None
            if arg is None:
                close = difflib.get_close_matches(str(name), [a.name for a in schema.arguments], n=1)
                raise source.error(key, f"{field}: {name!r} is not an argument of {schema.qualified_name}",
                                   (f"did you mean {close[0]!r}? " if close else "")
                                   + f"the arguments that can be constants are: {', '.join(others) or 'none'}")
            if name in inputs:
                why = "a tensor is a graph value" if arg.is_tensor else f"it is listed in {where}.inputs"
                raise source.error(key, f"{field}: {name!r} cannot be a constant: {why}",
                                   f"remove it from {field}" + ("" if arg.is_tensor else f" or from {where}.inputs"))
            given[name] = (key, value)
    constants = []
    for arg in schema.arguments:
        if arg.name in inputs:
            continue
        if arg.name in given:
            constants.append((arg.name, example_value(source, given[arg.name][1], arg.type, f"{field}.{arg.name}")))
        elif arg.has_default:
            constants.append((arg.name, arg.default))
        else:
            raise source.error(key_node, f"{where}: {arg.name!r} is neither an input nor has a default, so the pattern "
                               "has no value for it", f"give `{field}.{arg.name}`, or list it in {where}.inputs")
    return tuple(constants)


def _conditions(source: _Source, node: Node, schema: Schema, field: str) -> tuple:
    items = node.value if isinstance(node, SequenceNode) else [node]
    if not items or not all(isinstance(item, ScalarNode) and isinstance(_scalar(item), str) for item in items):
        raise source.error(node, f"{field} must be a condition or a list of them, not {_kind(node)}",
                           'e.g. `when: ["gamma.dim() == 1", "x1.dtype == gamma.dtype"]`')
    found = []
    for number, item in enumerate(items):
        where = f"{field}[{number}]" if isinstance(node, SequenceNode) else field
        try:
            found.append(parse_condition(_scalar(item), schema))
        except SemanticsError as error:
            raise source.inner(item, error.column or 1, error, where) from None
    return tuple(found)


def _targets(source: _Source, node: Node, field: str) -> tuple[str, ...]:
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of targets", f"choose from: {', '.join(FUSION_TARGETS)}")
    found: list[str] = []
    for item in node.value:
        value = _scalar(item)
        if value not in FUSION_TARGETS:
            close = difflib.get_close_matches(str(value), FUSION_TARGETS, n=1, cutoff=0.5)
            raise source.error(item, f"{field}: unknown target {value!r}", (f"did you mean {close[0]!r}? " if close
                                                                             else "") + "choose from: "
                               + ", ".join(FUSION_TARGETS))
        if value in found:
            raise source.error(item, f"{field}: {value!r} is listed twice", "list each target once")
        found.append(value)
    return tuple(t for t in FUSION_TARGETS if t in found)
