"""`ops[i].inputs`: where an argument's values live, so that the generated tests draw valid inputs and explore the
rest of what the op takes.

```yaml
inputs:
  slot_mapping: {index_into: "key_cache.shape[0]", unique: true}   # rows of the cache, each once
  probs: {range: [0, 1]}                                             # values in [0, 1]
  scale: {range: [0, null]}                                          # a scalar never negative
  block_size: {values: [16, 32, 64]}                                 # a scalar that takes these values only
  x: {finite: true, nonempty: true}                                  # no NaN/inf variants, no size-0 variant
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..schema.model import Schema, base_name
from .nodes import _kind, _mapping, _scalar, _Source
from .semantics import SemanticsError, parse_int

INPUT_KEYS = ("range", "index_into", "unique", "finite", "nonempty")
SCALAR_KEYS = ("range", "values")  # what an int/float/Scalar argument can be given
_SCALARS = ("int", "SymInt", "float", "Scalar")
_HINT = ("e.g. `inputs: {slot_mapping: {index_into: \"cache.shape[0]\", unique: true}, x: {range: [0, 1]}, "
         "eps: {range: [0, null]}, block_size: {values: [16, 32]}}` (docs/spec.md, 'Inputs')")


@dataclass(frozen=True)
class InputSpec:
    """Where one argument's values live: `low`/`high` a closed range (None: unbounded); `index_into` an IntRule, the
    number of rows its integer values index; `unique`, `finite` (no NaN or infinity), `nonempty` (no size 0);
    `values` (a scalar) the only values it takes."""

    name: str
    low: float | None = None
    high: float | None = None
    index_into: object | None = None
    unique: bool = False
    finite: bool = False
    nonempty: bool = False
    values: tuple | None = None


def parse_inputs(source: _Source, node: Node, schema: Schema, where: str) -> tuple[InputSpec, ...]:
    field = f"{where}.inputs"
    if not isinstance(node, MappingNode) or not node.value:
        raise source.error(node, f"{field} must map argument names to where their values live, not {_kind(node)}",
                           _HINT)
    found = []
    for key_node, value_node in node.value:
        name = _scalar(key_node)
        argument = schema.argument(name) if isinstance(name, str) else None
        if argument is None:
            names = ", ".join(a.name for a in schema.arguments)
            raise source.error(key_node, f"{field}: {name!r} is not an argument of {schema.qualified_name}",
                               f"arguments: {names}")
        kind = base_name(argument.type)
        if kind not in ("Tensor", *_SCALARS):
            raise source.error(key_node, f"{field}.{name}: a {kind} argument has no values to range over",
                               "describe Tensor, int, float or Scalar arguments")
        keys = INPUT_KEYS if kind == "Tensor" else SCALAR_KEYS
        entries = _mapping(source, value_node, f"{field}.{name}", keys)
        found.append(_one(source, entries, schema, f"{field}.{name}", name, kind))
    return tuple(found)


def _one(source: _Source, entries: dict, schema: Schema, field: str, name: str, kind: str) -> InputSpec:
    low = high = index_into = values = None
    if "range" in entries:
        low, high = _range(source, entries["range"][1], f"{field}.range")
    if "values" in entries:
        if "range" in entries:
            raise source.error(entries["values"][0], f"{field}: `values` already gives every value of {name!r}",
                               "keep one of `range:` and `values:`")
        values = _values(source, entries["values"][1], f"{field}.values", kind)
    if "index_into" in entries:
        node = entries["index_into"][1]
        text = _scalar(node)
        if not isinstance(node, ScalarNode) or not isinstance(text, str):
            raise source.error(node, f"{field}.index_into must be a size rule in quotes",
                               'e.g. `index_into: "cache.shape[0]"`: the number of rows its values index')
        try:
            index_into = parse_int(text, schema)
        except SemanticsError as error:
            raise source.inner(node, error.column or 1, error, f"{field}.index_into") from None
        if name in index_into.uses:
            raise source.error(node, f"{field}.index_into reads {name!r} itself", "name the size it indexes")
        if low is not None or high is not None:
            raise source.error(entries["range"][0], f"{field}: `index_into` already gives the range of {name!r}",
                               "keep one of `range:` and `index_into:`")
    flags = {}
    for key in ("unique", "finite", "nonempty"):
        if key in entries:
            value = _scalar(entries[key][1])
            if not isinstance(value, bool):
                raise source.error(entries[key][1], f"{field}.{key} must be true or false", f"write `{key}: true`")
            flags[key] = value
    return InputSpec(name, low, high, index_into, **flags, values=values)


def _values(source: _Source, node: Node, field: str, kind: str) -> tuple:
    integral = kind in ("int", "SymInt")
    hint = f"write the values the op takes: {'[16, 32, 64]' if integral else '[0.5, 1.0, 2.0]'}"
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must be a list of the values the argument takes", hint)
    found = []
    for item in node.value:
        value = _scalar(item)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (integral and not isinstance(value, int)) or not _fits(value, integral):
            raise source.error(item, f"{field}: {_shown(value)} is not {'a 64-bit int' if integral else 'a finite number'}",
                               hint)
        if value in found:
            raise source.error(item, f"{field}: {value!r} is listed twice", hint)
        found.append(value)
    return tuple(found)


def _fits(value: float, integral: bool) -> bool:
    """A torch int (64 bits) or a finite double."""
    if integral:
        return -(2 ** 63) <= value < 2 ** 63
    return abs(value) <= 1.7976931348623157e308 and (isinstance(value, int) or math.isfinite(value))


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"


def _range(source: _Source, node: Node, field: str) -> tuple[float | None, float | None]:
    hint = "write [low, high], null for no bound: [0, 1], [0, null]"
    if not isinstance(node, SequenceNode) or len(node.value) != 2:
        raise source.error(node, f"{field} must be a list of two bounds", hint)
    bounds = []
    for item in node.value:
        value = _scalar(item)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not _fits(value, False)):
            raise source.error(item, f"{field}: {_shown(value)} is not a finite number or null", hint)
        bounds.append(value)
    low, high = bounds
    if low is None and high is None:
        raise source.error(node, f"{field} bounds nothing", "give at least one bound, or leave `range:` out")
    if low is not None and high is not None and low > high:
        raise source.error(node, f"{field}: the low bound {low} is above the high bound {high}", hint)
    return low, high
