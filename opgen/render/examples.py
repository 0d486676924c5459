"""The spec's examples as Python source for the generated tests: one call per example (a dict of arguments
by name, random tensors drawn from a seeded generator `g`), the pair of calls of the two-sizes tier, and the
`expect:` entries as `Expected(...)` rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..schema.model import EnumWord
from ..spec.model import Example, OpSpec, TensorValue
from ..spec.two_sizes import choose_two_sizes, tensor_values
from .pyformat import LINE_LENGTH, fit, literal, wrap_value


def call_lines(op: OpSpec, example: Example, indent: int = 8) -> list[str]:
    """`{"x": ..., "y": ...},` building one call's arguments (in schema order), one per line when too long. A random
    tensor of an argument with `ops[i].inputs` is a `checks.Draw(...)`, drawn in its domain once the call exists."""
    items = [f"{literal(a.name)}: {_argument_source(op, a.name, example.values[a.name])}" for a in op.schema.arguments
             if a.name in example.values]
    line = "{" + ", ".join(items) + "},"
    if len(line) + indent <= LINE_LENGTH:
        return [line]
    return ["{"] + [part for item in items for part in fit(f"    {item},", indent)] + ["},"]


def tuple_call_lines(op: OpSpec, example: Example, random: str = "_random") -> list[str]:
    """`((positional...), {keyword: ...}),` for one call (op_plugin's tests): positional arguments up to the last
    one given (defaults in between), keyword-only ones by name; wrapped one per line when too long."""
    from .signature import argument_default

    values = example.values
    positional = list(op.schema.positional)
    last_given = max((i for i, a in enumerate(positional) if a.name in values), default=-1)
    args = [value_source(values[a.name], random) if a.name in values else argument_default(op, a)
            for a in positional[: last_given + 1]]
    kwargs = [f"{literal(a.name)}: {value_source(values[a.name], random)}" for a in op.schema.kwarg_only
              if a.name in values]
    args_text = "(" + "".join(a + ", " for a in args).rstrip(" ") + ")" if args else "()"
    line = f"({args_text}, {{{', '.join(kwargs)}}}),"
    if len(line) + 8 <= LINE_LENGTH:
        return [line]
    lines = ["(", "    ("] + [part for arg in args for part in fit(f"        {arg},", 8)]
    if kwargs:
        return lines + ["    ),", "    {"] + [part for kwarg in kwargs for part in fit(f"        {kwarg},", 8)] + [
            "    },", "),"]
    return lines + ["    ),", "    {},", "),"]


def _argument_source(op: OpSpec, name: str, value) -> str:
    if op.input_spec(name) is None or not _random_tensors(value):
        return value_source(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_argument_source(op, name, v) for v in value) + "]"
    if isinstance(value, TensorValue) and value.shape is not None:
        return f"checks.Draw({tuple(value.shape)!r}, torch.{value.dtype})"
    return value_source(value)


def uses_draws(op: OpSpec) -> bool:
    """Some example has a random tensor of an argument with `ops[i].inputs` (a `checks.Draw`)."""
    return any(op.input_spec(name) is not None and _random_tensors(value)
               for example in op.examples for name, value in example.values.items())


def uses_generator(examples) -> bool:
    """Some example has a random tensor (drawn from the generator)."""
    return any(_random_tensors(value) for example in examples for value in example.values.values())


def _random_tensors(value) -> bool:
    if isinstance(value, TensorValue):
        return value.shape is not None
    return isinstance(value, tuple) and any(_random_tensors(v) for v in value)


def value_source(value, random: str = "checks.random_tensor") -> str:
    """An example value as Python source; `random(shape, dtype, g)` draws a random tensor."""
    if isinstance(value, TensorValue):
        if value.shape is not None:
            return f"{random}({tuple(value.shape)!r}, torch.{value.dtype}, g)"
        return f"torch.tensor({_numbers(value.values)}, dtype=torch.{value.dtype})"
    if isinstance(value, tuple):
        return "[" + ", ".join(value_source(v, random) for v in value) + "]"
    if isinstance(value, EnumWord):
        return f"torch.{value.word}"
    if isinstance(value, str):
        return literal(value)
    return _numbers(value)


# --- the two-sizes tier -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TwoSizes:
    """Two calls that differ only in tensor sizes: two of the spec's examples (`pair`), or example 0 and a copy
    opgen made with the last size doubled (`lines`, `derived`)."""

    doc: str
    pair: tuple[int, int] | None = None
    lines: tuple[str, ...] = ()
    derived: bool = False
    uses_generator: bool = False


def two_sizes(op: OpSpec) -> TwoSizes | None:
    """Two examples that differ only in tensor sizes, else example 0 and a copy with its last size D doubled
    (opgen.spec.two_sizes chooses, for `opgen check` too); None when neither exists."""
    found = choose_two_sizes([example.values for example in op.examples])
    if found is None:
        return None
    if found.pair is not None:
        a, b = found.pair
        return TwoSizes(doc=f"ops[{op.index}].examples[{a}] and [{b}]", pair=(a, b))
    lines = tuple(line for example in (op.examples[0], Example(found.doubled)) for line in call_lines(op, example))
    tensors = [t for value in op.examples[0].values.values() for t in tensor_values(value)]
    return TwoSizes(doc=f"ops[{op.index}].examples[0], and it with last size {found.last} doubled (by opgen)",
                    lines=lines, derived=True, uses_generator=any(t.shape is not None for t in tensors))


# --- expect: ------------------------------------------------------------------------------------------


def expected_lines(op: OpSpec) -> list[str]:
    """One `checks.Expected(...)` per `expect:` entry of the examples (see opgen.testing.Expected), wrapped to the line
    length (they stand in a module-level tuple, 4 columns in)."""
    lines = []
    for number, example in enumerate(op.examples):
        for item in example.expect:
            parts = [f"example={number}", f"name={literal(item.name)}"]
            if item.rows is None:
                parts.append(f"values={_numbers(item.values)}")
            else:
                parts.append("rows={" + ", ".join(f"{row}: {_numbers(values)}" for row, values in item.rows) + "}")
            parts += [f"{key}={value!r}" for key, value in (("rtol", item.rtol), ("atol", item.atol),
                                                            ("element", item.element), ("length", item.length))
                      if value is not None]
            line = "checks.Expected(" + ", ".join(parts) + "),"
            if len(line) + 4 <= LINE_LENGTH:
                lines.append(line)
                continue
            lines.append("checks.Expected(")
            for part in parts:
                key, value = part.split("=", 1)
                wrapped = wrap_value(value + ",", 8 + len(key) + 1)
                lines += [f"    {key}={wrapped[0]}"] + [f"    {line}" for line in wrapped[1:]]
            lines.append("),")
    return lines


def _numbers(values) -> str:
    """Numbers (nested lists of them: tensor values, expected values) as Python source, nan and inf spelled as
    float(...)."""
    if isinstance(values, tuple):
        return "[" + ", ".join(_numbers(v) for v in values) + "]"
    if isinstance(values, float) and not math.isfinite(values):
        return f'float("{values}")'
    return repr(values)
