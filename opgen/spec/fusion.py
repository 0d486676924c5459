"""`ops[i].fusion`: the composite models write instead of calling the op, read from the YAML nodes.

The generated `<package>/patterns.py` registers it with npugraph_ex's and Inductor's pattern matchers, which
replace the composite by the op in compiled graphs. Everything is checked here, with `file:line:col`: whether the
op can be a replacement at all, the composite's body (parsed as it will be written, its returns counted), which
arguments are matched as graph values and which are constants, the conditions (`when:`, in the semantics
language) and the targets.
"""

from __future__ import annotations

import ast
import difflib

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import OpgenError
from ..schema.model import Argument, BaseType, ListType, OptionalType, Schema, strip_alias
from ..schema.parser import span_column
from .bodies import body_error, check_body, own_returns, value_returns
from .examples import example_value
from .model import FUSION_TARGETS, FusionSpec, OpSpec
from .nodes import _kind, _mapping, _scalar, _Source, _string
from .semantics import SemanticsError, parse_condition

FUSION_KEYS = ("pattern", "inputs", "constants", "when", "targets")
# Scalars a pattern matches by value (torch's `scalar_workaround` turns a literal of the traced value into a wildcard):
# floats only, as npugraph_ex's own patterns use it (an int is often a dim or a size, which a traced wildcard breaks).
MATCHED_SCALARS = ("float",)
HEADER = ["def _composite():"]  # the body is checked as the body of a function, as for `reference:`


def parse_fusion(source: _Source, entry: tuple[ScalarNode, Node], op: OpSpec, reference_node: Node | None,
                 schema_node: ScalarNode, namespace: str) -> FusionSpec:
    """`ops[i].fusion` of the (otherwise complete) `op`."""
    where = f"ops[{op.index}].fusion"
    key_node, node = entry
    _check_replaceable(source, key_node, schema_node, op, where)
    if isinstance(node, ScalarNode) and _scalar(node) is None:
        node = MappingNode("tag:yaml.org,2002:map", [], node.start_mark, node.end_mark)
    fields = _mapping(source, node, where, FUSION_KEYS)
    body, body_node, field = _body(source, key_node, fields, op, reference_node, where)
    _check_composite(source, body_node, body, field, op, namespace)
    inputs = _inputs(source, fields.get("inputs"), op.schema, where)
    _check_inputs_read(source, fields["inputs"][1] if "inputs" in fields else body_node, body_node, body, field,
                       inputs, where)
    constants = _constants(source, fields.get("constants"), op.schema, inputs, key_node, where)
    conditions = _conditions(source, fields["when"][1], op.schema, f"{where}.when") if "when" in fields else ()
    targets = _targets(source, fields["targets"][1], f"{where}.targets") if "targets" in fields else FUSION_TARGETS
    return FusionSpec(body, "pattern" not in fields, inputs, constants, conditions, targets)


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
