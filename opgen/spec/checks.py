"""`ops[i].checks`: conditions on the inputs, in the semantics language, that the op refuses to run without.

The fake checks each with `torch._check` before it allocates anything (torch's own meta functions check their
inputs the same way), so a call the kernel would refuse fails while tracing, naming the spec's field, instead of
at run time or replay.
"""

from __future__ import annotations

from yaml.nodes import Node, ScalarNode, SequenceNode

from ..schema.model import Schema
from .nodes import _kind, _scalar, _Source
from .semantics import ConditionRule, Scope, SemanticsError, parse_condition


def input_checks(source: _Source, node: Node, schema: Schema, where: str, let: tuple = (),
                 dtype_codes: tuple = ()) -> tuple[ConditionRule, ...]:
    """The conditions of `checks:` (a list of strings), each parsed and type-checked like the other rules; they
    may read the arguments and the `let:` names."""
    field = f"{where}.checks"
    if not isinstance(node, SequenceNode) or not node.value or not all(
            isinstance(item, ScalarNode) and isinstance(_scalar(item), str) for item in node.value):
        raise source.error(node, f"{field} must be a list of conditions, not {_kind(node)}",
                           'e.g. `checks: ["gamma.shape == x.shape[-1:]", "x.shape[-1] % 2 == 0"]`')
    scope = Scope(bindings=tuple(binding for binding, _ in let), dtype_codes=dtype_codes)
    found = []
    for number, item in enumerate(node.value):
        try:
            found.append(parse_condition(_scalar(item), schema, scope))
        except SemanticsError as error:
            raise source.inner(item, error.column or 1, error, f"{field}[{number}]") from None
    return tuple(found)
