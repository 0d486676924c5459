"""`ops[i].examples`: the calls the generated tests make, and the `expect:` values they check, read from the
YAML nodes with `file:line:col` on every error. Also `opgen check --inputs` files, in the same syntax."""

from __future__ import annotations

import difflib
import math
import re

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..schema.model import BaseType, EnumWord, ListType, OptionalType, Schema, base_name, strip_alias
from .model import DTYPES, Example, Expected, TensorValue
from .nodes import _data, _kind, _mapping, _scalar, _Source, _string, compose
from .tensor_limits import INTEGER_RANGES, MAX_DIMS, dtype_problem, shape_problem, values_problem

TENSOR_KEYS = ("shape", "dtype", "values")
EXPECT_KEYS = ("values", "rows", "rtol", "atol")
# the dtype names a hint lists: the common ones (the table has every torch dtype, docs/spec.md lists them)
_COMMON_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32", "int8",
                  "uint8", "bool")


def examples(source: _Source, node: Node | None, schema: Schema, where: str, *, random: bool = False,
             limits: dict[str, tuple[int, int, str]] | None = None) -> tuple[Example, ...]:
    """The examples of one op (a made-up one when the spec gives none and opgen can guess one). `random`: the
    op draws random numbers, so no value can be expected of it. `limits`: argument -> (lowest, highest, what it
    is) for the int arguments the shape rules turn into sizes (rule_bounds.argument_limits)."""
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
    found = []
    for number, item in enumerate(node.value):
        field = f"{where}.examples[{number}]"
        entries = _mapping(source, item, field, allowed) if names or isinstance(item, MappingNode) else {}
        values: dict = {}
        for arg in schema.arguments:
            if arg.name in entries:
                values[arg.name] = example_value(source, entries[arg.name][1], arg.type, f"{field}.{arg.name}")
                if limits and arg.name in limits:
                    _within(source, entries[arg.name][1], values[arg.name], limits[arg.name], f"{field}.{arg.name}")
            elif not arg.has_default:
                raise source.error(item, f"{field} gives no value for {arg.name!r}, which has no default",
                                   f"add `{arg.name}: ...` ({_value_hint(arg.type)})")
        expect = ()
        if expect_key in entries:
            if random:
                raise source.error(entries[expect_key][0], f"{field}.expect: the op is tagged "
                                   "torch.Tag.nondeterministic_seeded, so its values are random draws that no "
                                   "independent value can match", "remove `expect:`; check a property of the "
                                   "draws (a mean, a range) in a test of your own")
            expect = _expect(source, entries[expect_key][1], schema, f"{field}.expect")
        found.append(Example(values, expect=expect))
    return tuple(found)


def _within(source: _Source, node: Node, value, limit: tuple[int, int, str], field: str) -> None:
    low, high, role = limit
    numbers = value if isinstance(value, tuple) else (value,)
    for number in numbers:
        if isinstance(number, int) and not isinstance(number, bool) and not low <= number <= high:
            raise source.error(node, f"{field}: {number:,} is outside {low}..{high:,}: the argument is {role}",
                               f"give a value in {low}..{high:,}; the generated tests build what the rule makes of it")
    if isinstance(value, tuple) and len(value) > MAX_DIMS:
        raise source.error(node, f"{field} has {len(value)} sizes: the argument is {role}, and a shape has at most "
                           f"{MAX_DIMS} dims", f"give at most {MAX_DIMS}")


# --- expect ---------------------------------------------------------------------------------------


def _expect(source: _Source, node: Node, schema: Schema, field: str) -> tuple[Expected, ...]:
    """`expect: {<return or mutated argument>: VALUES | {values: VALUES, rtol:, atol:} | {rows: {i: VALUES}}}`;
    a `Tensor[]` one takes a list with one of these (or null: not checked) per tensor."""
    targets = _expect_targets(schema)
    if not isinstance(node, MappingNode) or not node.value:
        names = list(targets)
        raise source.error(node, f"{field} must map outputs or mutated arguments to their expected values",
                           f"e.g. `expect: {{{(names or ['out0'])[0]}: [[1.0, 2.0]]}}`; "
                           f"can be checked: {', '.join(names) or 'nothing (the op returns and mutates nothing)'}")
    found: list[Expected] = []
    for key_node, value_node in node.value:
        key = _scalar(key_node)
        if key not in targets:
            close = difflib.get_close_matches(str(key), list(targets), n=1, cutoff=0.5)
            raise source.error(key_node, f"{field}: {key!r} is neither a return nor a mutated argument of "
                               f"{schema.qualified_name}", (f"did you mean {close[0]!r}? " if close else "")
                               + f"can be checked: {', '.join(targets) or 'nothing'} (unnamed returns are out0, out1, ...)")
        if any(e.name == key for e in found):
            raise source.error(key_node, f"{field}: {key!r} is given twice", "keep one")
        output, argument, kind = targets[key]
        where = f"{field}.{key}"
        if kind == "other":
            raise source.error(key_node, f"{where}: only Tensor and Tensor[] returns can be checked, not "
                               f"'{schema.returns[output or 0].type}'", "remove this entry")
        if kind == "list":
            found += _expected_list(source, value_node, key, output, argument, where)
        else:
            found.append(_expected_tensor(source, value_node, key, output, argument, where))
    return tuple(found)


def _expect_targets(schema: Schema) -> dict[str, tuple[int | None, int | str | None, str]]:
    """What `expect:` may name: return name -> (return index (None: the only, untupled return), None, kind),
    mutated argument -> (None, position or keyword name, kind); kind is "tensor", "list" or "other"."""
    untupled = len(schema.returns) == 1 and not schema.returns_tuple

    def kind(t) -> str:
        t = strip_alias(t)
        if t == BaseType("Tensor"):
            return "tensor"
        return "list" if t == ListType(BaseType("Tensor")) else "other"

    targets = {name: (None if untupled else index, None, kind(ret.type))
               for index, (name, ret) in enumerate(zip(list(schema.return_names), schema.returns))}
    for position, arg in enumerate(schema.arguments):
        if arg.is_write and arg.name not in targets:
            targets[arg.name] = (None, arg.name if arg.kwarg_only else position, kind(arg.type))
    return targets


def _expected_list(source: _Source, node: Node, name: str, output, argument, where: str) -> list[Expected]:
    """One entry per tensor of a list (null: that tensor is not checked); the list must have as many tensors."""
    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{where} is a list of tensors: give a list with the values of each tensor (null "
                           "for one not checked)", "e.g. [[1.0, 2.0], null, {values: [3.0], atol: 1.0e-3}]")
    length = len(node.value)
    found = []
    for element, item in enumerate(node.value):
        if isinstance(item, ScalarNode) and _scalar(item) is None:
            continue
        entry = _expected_tensor(source, item, name, output, argument, f"{where}[{element}]")
        found.append(Expected(**{**entry.__dict__, "element": element, "length": length}))
    if not found:
        raise source.error(node, f"{where} checks none of the tensors", "give the values of one, or remove it")
    return found


def _expected_tensor(source: _Source, node: Node, name: str, output, argument, where: str) -> Expected:
    if not isinstance(node, MappingNode):
        return Expected(name, output, argument, values=_numbers(source, node, where))
    entries = _mapping(source, node, where, EXPECT_KEYS)
    if ("values" in entries) == ("rows" in entries):
        raise source.error(node, f"{where} needs exactly one of `values` (the whole tensor) or `rows` "
                           "(some rows along dim 0)", "e.g. {rows: {7: [1.0, 2.0]}, atol: 1.0e-3}")
    rtol = tolerance(source, entries["rtol"][1], f"{where}.rtol") if "rtol" in entries else None
    atol = tolerance(source, entries["atol"][1], f"{where}.atol") if "atol" in entries else None
    if "values" in entries:
        return Expected(name, output, argument, values=_numbers(source, entries["values"][1], f"{where}.values"),
                        rtol=rtol, atol=atol)
    return Expected(name, output, argument, rows=_rows(source, entries["rows"][1], where), rtol=rtol, atol=atol)


def _rows(source: _Source, node: Node, where: str) -> tuple[tuple[int, object], ...]:
    if not isinstance(node, MappingNode) or not node.value:
        raise source.error(node, f"{where}.rows must map row indices to values", "e.g. {7: [1.0, 2.0]}")
    rows = []
    for row_key, row_value in node.value:
        row = _scalar(row_key)
        if not isinstance(row, int) or isinstance(row, bool):
            raise source.error(row_key, f"{where}.rows: {row!r} is not a row index (an integer)",
                               "e.g. {rows: {0: [1.0, 2.0], -1: [3.0, 4.0]}}")
        if any(r == row for r, _ in rows):
            raise source.error(row_key, f"{where}.rows: row {row} is given twice", "keep one")
        rows.append((row, _numbers(source, row_value, f"{where}.rows.{row}")))
    return tuple(rows)


def _numbers(source: _Source, node: Node, field: str):
    """A number or a (nested, rectangular) list of numbers, as nested tuples."""
    values = _data(source, node, field) if not isinstance(node, ScalarNode) else _scalar(node)
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


def tolerance(source: _Source, node: Node, field: str) -> float:
    value = _number(_scalar(node)) if isinstance(node, ScalarNode) else None
    if value is None or value < 0:
        raise source.error(node, f"{field} must be a number >= 0", "e.g. 1.0e-3")
    return value


# --- argument values ------------------------------------------------------------------------------


def _value_hint(t) -> str:
    name = base_name(t)
    if name == "Tensor":
        if isinstance(strip_alias(t), ListType):
            return "a list of {shape: [...], dtype: ...}"
        return "{shape: [4, 8], dtype: float32} or {values: [...], dtype: int64}"
    return {"int": "an integer", "SymInt": "an integer", "float": "a number", "bool": "true or false",
            "str": "a string", "ScalarType": "a dtype name such as float32", "Scalar": "a number"}.get(name, "a value")


def example_value(source: _Source, node: Node, t, field: str):
    """The value of one argument of type `t` in an example."""
    t = strip_alias(t)
    if isinstance(t, OptionalType):
        if isinstance(node, ScalarNode) and _scalar(node) is None:
            return None
        return example_value(source, node, t.elem, field)
    if isinstance(t, ListType):
        if not isinstance(node, SequenceNode):
            raise source.error(node, f"{field} must be a list ({_value_hint(t)}), not {_kind(node)}",
                               "write the items in brackets: [...]")
        # `int[2]`'s size is a hint torch does not enforce: any length is accepted, as by torch
        return tuple(example_value(source, item, t.elem, f"{field}[{i}]") for i, item in enumerate(node.value))
    name = t.name if isinstance(t, BaseType) else None
    if name == "Tensor":
        return _tensor_value(source, node, field)
    if name not in _SCALARS:
        raise source.error(node, f"{field}: examples cannot give a value of type '{t}' yet",
                           "leave the argument out to use its default")
    value = _SCALARS[name](_scalar(node) if isinstance(node, ScalarNode) else node)
    if value is None:
        raise source.error(node, f"{field} must be {_value_hint(t)}, not {_kind(node)}",
                           f"the argument is '{t}' in the schema")
    if name == "ScalarType":
        return EnumWord(DTYPES[_dtype_word(source, node, field, value)])
    low, high = INTEGER_RANGES["int64"][0]
    if name in ("int", "SymInt") and not low <= value <= high:
        raise source.error(node, f"{field}: {_digits(value)} does not fit in an '{name}', a 64-bit integer "
                           f"({low}..{high})", "give a value in that range, as torch would take it")
    return value


def _digits(value: int) -> str:
    text = str(value)
    return text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} digits)"


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _scalar_number(value):
    number = _number(value)
    return None if number is None else int(number) if isinstance(value, int) else number


# Scalar schema type -> the value an example gives for it (None: not a value of that type).
_SCALARS = {
    "int": _int, "SymInt": _int, "float": lambda value: _number(value), "Scalar": _scalar_number,
    "bool": lambda value: value if isinstance(value, bool) else None,
    "str": lambda value: value if isinstance(value, str) else None,
    "ScalarType": lambda value: value if isinstance(value, str) else None,
}


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


def _dtype_word(source: _Source, node: Node, field: str, word: str) -> str:
    """A dtype name of the spec (torch's, aliases included), or an error with the closest one."""
    if word not in DTYPES:
        close = difflib.get_close_matches(word, DTYPES, n=1)
        raise source.error(node, f"{field}: unknown dtype {word!r}", (f"did you mean {close[0]!r}? " if close else "")
                           + f"torch's dtype names: {', '.join(_COMMON_DTYPES)}, ... (docs/spec.md)")
    return word


def _tensor_value(source: _Source, node: Node, field: str) -> TensorValue:
    entries = _mapping(source, node, field, TENSOR_KEYS)
    if ("shape" in entries) == ("values" in entries):
        raise source.error(node, f"{field} needs exactly one of `shape` (random values) or `values` (exact values)",
                           "e.g. {shape: [4, 8], dtype: float16} or {values: [0, 2], dtype: int64}")
    dtype = None
    if "dtype" in entries:
        word = _string(source, entries["dtype"][1], f"{field}.dtype")
        dtype = DTYPES[_dtype_word(source, entries["dtype"][1], f"{field}.dtype", word)]
    if dtype is not None and dtype_problem(dtype):
        raise source.error(entries["dtype"][1], f"{field}.dtype: {dtype_problem(dtype)[0]}", dtype_problem(dtype)[1])
    if "shape" in entries:
        shape = _shape(source, entries["shape"][1], field)
        if shape_problem(shape):
            raise source.error(entries["shape"][1], f"{field}.shape: {shape_problem(shape)[0]}", shape_problem(shape)[1])
        return TensorValue(dtype or "float32", shape=shape)
    values = _data(source, entries["values"][1], f"{field}.values")
    flat = list(_flatten(values))
    if not flat and not isinstance(values, list) or any(isinstance(v, (str, type(None), dict)) for v in flat):
        raise source.error(entries["values"][1], f"{field}.values must be a number or (nested) list of numbers",
                           "e.g. {values: [[1.0, 2.0], [3.0, 4.0]]}")
    if dtype is None:
        dtype = "bool" if all(isinstance(v, bool) for v in flat) and flat else (
            "int64" if all(isinstance(v, int) for v in flat) else "float32")
    problem = values_problem(_freeze(values), dtype)
    if problem is not None:
        raise source.error(entries["values"][1], f"{field}.values: {problem[0]}", problem[1])
    return TensorValue(dtype, values=_freeze(values))


def _shape(source: _Source, node: Node, field: str) -> tuple[int, ...]:
    items = node.value if isinstance(node, SequenceNode) else None
    dims = [_scalar(item) if isinstance(item, ScalarNode) else None for item in (items or [])]
    if items is None or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise source.error(node, f"{field}.shape must be a list of sizes >= 0, such as [4, 8]",
                           "a 0-dim tensor has shape []")
    return tuple(dims)


def _flatten(value):
    if isinstance(value, list):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _freeze(value):
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


# --- a made-up example ----------------------------------------------------------------------------

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


def describe_value(value) -> str:
    if isinstance(value, TensorValue):
        shape = list(value.shape) if value.shape is not None else list(value.values)
        return f"{value.dtype}{shape}" if value.shape is not None else f"{value.dtype} {shape}"
    if isinstance(value, tuple):
        return "[" + ", ".join(describe_value(item) for item in value) + "]"
    return repr(value)


# --- opgen check --inputs -------------------------------------------------------------------------


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


def load_inputs_text(text: str, path: str, schemas: dict[str, Schema],
                     ignored: list[str] | None = None) -> dict[str, tuple[Example, ...]]:
    """`opgen check --inputs FILE` (YAML or JSON): examples in the spec's syntax, either one list for every
    op, one example (a mapping of argument names) when one op is checked, or a mapping from op name (`ns::op`,
    `op` or `ns::op.overload`) to a list. Keys of `schemas` are the ops' full names; the result maps each op the
    file gives examples for to them. One file serves several targets: a key naming no checked op is left out
    (appended to `ignored`), unless it is an argument of one (a bare example where it cannot be one)."""
    source = _Source(text, path)
    root = compose(source, "YAML/JSON")
    hint = ("write a list of examples, e.g. `- {x: {shape: [4, 8], dtype: float32}, eps: 1.0e-6}`, or map op "
            "names to such lists")
    if isinstance(root, SequenceNode):
        return {name: examples(source, root, schema, "inputs") for name, schema in schemas.items()}
    if not isinstance(root, MappingNode):
        raise source.error(root, "the inputs file must be a list of examples or a mapping of op names to lists", hint)
    if _is_one_example(root, schemas):  # `{x: {shape: [4, 8]}, eps: 1e-6}`: the one example of the one op
        name, schema = next(iter(schemas.items()))
        single = SequenceNode("tag:yaml.org,2002:seq", [root], root.start_mark, root.end_mark)
        return {name: examples(source, single, schema, "inputs")}
    found: dict[str, tuple[Example, ...]] = {}
    seen: dict[str, Node] = {}
    arguments = {a.name for schema in schemas.values() for a in schema.arguments}
    for key_node, value in root.value:
        key = _string(source, key_node, "an op name")
        if key in seen:
            raise source.error(key_node, f"duplicate key {key!r} in the inputs file",
                               f"the first {key!r} is on line {seen[key].start_mark.line + 1}; keep one")
        seen[key] = key_node
        # the op the key names exactly, else every overload of it (`ns::op` names `ns::op.out` too only where no
        # checked op is `ns::op` itself: its arguments are the default overload's)
        matches = [name for name in schemas if key in (name, name.split("::")[-1])] or [
            name for name in schemas if key in (name.split(".")[0], name.split("::")[-1].split(".")[0])]
        if not matches and key not in arguments and ignored is not None:
            ignored.append(key)  # another target's op
            continue
        if not matches:
            raise source.error(key_node, f"{key!r} is none of the checked ops", _inputs_hint(key, schemas))
        for name in matches:
            found[name] = examples(source, value, schemas[name], f"inputs[{key!r}]")
    return found


TOLERANCE_KEYS = ("rtol", "atol")


def parse_tolerances(source: _Source, node: Node, field: str) -> tuple[tuple[str, float, float], ...]:
    """`tolerances: {float16: {rtol: 1e-2, atol: 1e-3}}` (ops[i].tolerances: the device kernel against the CPU
    reference; a fusion form's: the op against the composite it replaces), sorted by dtype name."""
    if not isinstance(node, MappingNode):
        raise source.error(node, f"{field} must map dtype names to {{rtol, atol}}",
                           "e.g. {float16: {rtol: 1.0e-2, atol: 1.0e-3}}")
    found = []
    for key_node, value_node in node.value:
        word = _scalar(key_node)
        if not isinstance(word, str) or word not in DTYPES:
            close = difflib.get_close_matches(str(word), DTYPES, n=1)
            raise source.error(key_node, f"{field}: unknown dtype {word!r}",
                               (f"did you mean {close[0]!r}? " if close else "") + "write a torch dtype name")
        entries = _mapping(source, value_node, f"{field}.{word}", TOLERANCE_KEYS, required=TOLERANCE_KEYS)
        found.append((DTYPES[word], tolerance(source, entries["rtol"][1], f"{field}.{word}.rtol"),
                      tolerance(source, entries["atol"][1], f"{field}.{word}.atol")))
    return tuple(sorted(found))
