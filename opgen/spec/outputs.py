"""`ops[i].let` and `ops[i].outputs`: the semantics of an op's returns, read from the YAML nodes.

Each rule is parsed and type-checked by `opgen.spec.semantics` in the scope it may read (the arguments,
the `let:` names, the outputs described before it, a `Tensor[]` return's element index, the spec's
`dtype_codes`), and an error inside a rule is placed at its character in the file.
"""

from __future__ import annotations

import difflib
import keyword
from dataclasses import replace

from yaml.nodes import MappingNode, Node, ScalarNode

from ..schema.model import BaseType, ListType, Schema, strip_alias
from .model import OutputSpec
from .nodes import _kind, _mapping, _scalar, _Source
from .semantics import (
    FUNCTIONS,
    Binding,
    Scope,
    SemanticsError,
    parse_binding,
    parse_dtype,
    parse_int,
    parse_shape,
    parse_tensor,
)
from .semantics_ir import DTYPE_ALIASES, DTYPES

OUTPUT_KEYS = ("shape", "dtype", "like", "length", "index")
LIST_KEYS = ("length", "index")  # only a Tensor[] return has these
DEFAULT_INDEX = "i"
# names a `let:` binding or an element index cannot take: the generated fake uses them, or rules mean them
_RESERVED = frozenset({"torch", "None", "True", "False", *FUNCTIONS, *DTYPES, *DTYPE_ALIASES})


def bindings(source: _Source, node: Node, schema: Schema, where: str,
             dtype_codes: tuple[tuple[int, str], ...]) -> tuple[tuple[Binding, ScalarNode], ...]:
    """`let: {name: rule}`: each rule may read the arguments and the names before it. (binding, key node) pairs."""
    field = f"{where}.let"
    if not isinstance(node, MappingNode) or not node.value:
        raise source.error(node, f"{field} must map names to rules", 'e.g. `let: {d: "wrap_dim(dim, x)"}`')
    found: list[tuple[Binding, ScalarNode]] = []
    for key_node, value_node in node.value:
        name = _scalar(key_node)
        _check_new_name(source, key_node, name, schema, f"{field}: the name", [b.name for b, _ in found])
        scope = Scope(bindings=tuple(b for b, _ in found), dtype_codes=dtype_codes)
        text = _rule_text(source, value_node, f"{field}.{name}")
        try:
            binding = parse_binding(name, text, schema, scope)
        except SemanticsError as error:
            raise source.inner(value_node, error.column or 1, error, f"{field}.{name}") from None
        found.append((binding, key_node))
    return tuple(found)


def _check_new_name(source: _Source, node: Node, name, schema: Schema, what: str, taken: list[str]) -> None:
    """A name the spec introduces (a `let:` name, an element index) must not hide anything a rule can read."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise source.error(node, f"{what} {name!r} is not a Python identifier", "use letters, digits and '_'")
    clash = ("an argument of the op" if name in {a.name for a in schema.arguments} else
             "a return of the op" if name in list(schema.return_names) else
             "a name of the rule language" if name in _RESERVED else
             "taken by the generated code" if name.startswith("_") else
             "given twice" if name in taken else None)
    if clash:
        raise source.error(node, f"{what} {name!r} is {clash}", "choose another name")


def outputs(source: _Source, node: Node | None, schema: Schema, where: str, *, let=(),
            dtype_codes: tuple[tuple[int, str], ...] = (), checks: tuple = ()) -> tuple[OutputSpec, ...]:
    """One OutputSpec per return; `let`: the op's (binding, key node) pairs, each of which a rule (of the outputs
    or of `checks`, the op's `checks:`) must read."""
    names = list(schema.return_names)
    given = _given_outputs(source, node, schema, names, where)
    found = []
    earlier: list[str] = []  # outputs a later rule may read as tensors (not lists)
    for index, (name, ret) in enumerate(zip(names, schema.returns)):
        base = strip_alias(ret.type)
        is_list = base == ListType(BaseType("Tensor"))
        supported = base == BaseType("Tensor") or is_list
        out = OutputSpec(name, index, supported=supported, is_list=is_list)
        if name in given:
            key_node, value_node = given[name]
            if not supported:
                raise source.error(key_node, f"{where}.outputs.{name}: semantics can describe Tensor and Tensor[] "
                                   f"returns, not '{ret.type}'", "remove this entry: opgen writes a TODO fake for the op (the op_plugin target, which needs every "
                                   "output's semantics, refuses such a return)")
            scope = Scope(outputs=tuple(earlier), bindings=tuple(b for b, _ in let), dtype_codes=dtype_codes)
            out = _output(source, value_node, out, schema, scope, f"{where}.outputs.{name}")
        if not is_list:
            earlier.append(name)
        found.append(out)
    _check_bindings_used(source, let, found, checks, where)
    return tuple(found)


def _given_outputs(source: _Source, node: Node | None, schema: Schema, names: list[str], where: str) -> dict:
    given: dict[str, tuple[ScalarNode, Node]] = {}
    if node is None or (isinstance(node, ScalarNode) and _scalar(node) is None):
        return given
    if not names:
        raise source.error(node, f"{where}.outputs: the op returns nothing, so there is nothing to describe",
                           "remove `outputs:`")
    if not isinstance(node, MappingNode):
        raise source.error(node, f"{where}.outputs must map each returned tensor to {{shape, dtype}}",
                           f"returned tensors: {', '.join(names)}")
    for key_node, value_node in node.value:
        key = _scalar(key_node)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
            hint = (f"did you mean {close[0]!r}? " if close else "") + f"the op returns: {', '.join(names)} " \
                "(unnamed returns are out0, out1, ...)"
            raise source.error(key_node, f"{where}.outputs: {key!r} is not a return of {schema.qualified_name}", hint)
        if key in given:
            raise source.error(key_node, f"duplicate key {key!r} in {where}.outputs",
                               f"the first {key!r} is on line {given[key][0].start_mark.line + 1}; keep one")
        given[key] = (key_node, value_node)
    return given


def _output(source: _Source, node: Node, out: OutputSpec, schema: Schema, scope: Scope, field: str) -> OutputSpec:
    entry = _mapping(source, node, field, OUTPUT_KEYS)
    if not out.is_list:
        for key in LIST_KEYS:
            if key in entry:
                raise source.error(entry[key][0], f"{field}.{key}: only a Tensor[] return has `{key}`",
                                   "remove it")
    else:
        index = _scalar(entry["index"][1]) if "index" in entry else DEFAULT_INDEX
        _check_new_name(source, entry["index"][1] if "index" in entry else node, index, schema,
                        f"{field}.index: the element index", [b.name for b in scope.bindings])
        if "length" not in entry:
            raise source.error(node, f"{field} is a Tensor[] return: it needs `length:`, the number of tensors "
                               f"(its other rules describe tensor `{index}` of the list)", 'e.g. length: "len(x)"')
        length = _rule(source, entry["length"][1], f"{field}.length", lambda text: parse_int(text, schema, scope))
        scope = replace(scope, index=index)
        out = replace(out, length_rule=length, element_index=index)
    if "like" in entry:
        return _like(source, entry, out, schema, scope, field)
    rules = {}
    for key, parse in (("shape", parse_shape), ("dtype", parse_dtype)):
        if key in entry:
            rules[f"{key}_rule"] = _rule(source, entry[key][1], f"{field}.{key}",
                                         lambda text, parse=parse: parse(text, schema, scope=scope))
    return replace(out, **rules)


def _like(source: _Source, entry: dict, out: OutputSpec, schema: Schema, scope: Scope, field: str) -> OutputSpec:
    """`like: x` (any tensor: `xs[i]`, a `let:` name): x's shape and layout, and its dtype unless `dtype:` says."""
    like_node = entry["like"][1]
    if "shape" in entry:
        raise source.error(entry["shape"][0], f"{field}: `like` gives the shape (and layout) already",
                           "remove `shape`, or `like`")
    like = _rule(source, like_node, f"{field}.like", lambda text: parse_tensor(text, schema, scope))
    shape = parse_shape(f"({like.text}).shape", schema, scope=scope)
    if "dtype" in entry:
        dtype = _rule(source, entry["dtype"][1], f"{field}.dtype", lambda text: parse_dtype(text, schema, scope=scope))
    else:
        dtype = parse_dtype(f"({like.text}).dtype", schema, scope=scope)
    return replace(out, like=like, like_dtype="dtype" in entry, shape_rule=shape, dtype_rule=dtype)


def _rule_text(source: _Source, node: Node, field: str) -> str:
    value = _scalar(node) if isinstance(node, ScalarNode) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise source.error(node, f"{field} must be an expression string, not {_kind(node)}",
                           'quote it, e.g. shape: "x.shape" or dtype: "x.dtype"')
    return value


def _rule(source: _Source, node: Node, field: str, parse):
    text = _rule_text(source, node, field)
    try:
        return parse(text)
    except SemanticsError as error:
        raise source.inner(node, error.column or 1, error, field) from None


def _check_bindings_used(source: _Source, let, found: list[OutputSpec], checks: tuple, where: str) -> None:
    """A `let:` name no rule reads is a mistake (a typo in a rule, or a leftover) the fake would hide."""
    used = frozenset().union(*(rule.uses_bindings for out in found for rule in out.rules),
                             *(rule.uses_bindings for rule in checks))
    for binding, key_node in let:
        if binding.name not in used:
            raise source.error(key_node, f"{where}.let.{binding.name} is read by no rule of {where}.outputs",
                               "use it in a rule, or remove it")
