"""The code of `<package>/patterns.py` for one op with `fusion:`: the composite models write, the pattern traced from
it, the replacement calling the op, the conditions and the inputs of the first traces, and the `Fusion` record that
`register_fusions()` and the generated tests read.

A composite that writes buffers in place is traced functionalized (patterns.py's `trace`): the pattern then returns
the buffers' new values as well, and the replacement is the op under `auto_functionalized`, returning the same
values, which npugraph_ex and Inductor then re-inplace onto the caller's buffers as for a direct call of the op.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import op_stem
from ..schema.model import OptionalType, strip_alias
from ..spec.autograd import body_lines
from ..spec.model import OpSpec, ProjectSpec, TensorValue
from .examples import value_source
from .pyformat import call, define, docstring, literal, tuple_text
from .signature import python_default, signature

FLOAT_MAGIC = 1.2345e-05  # the value a float input is traced with (scalar_workaround): the pattern's wildcard
MAX_TRACES = 4  # initial traces per fusion: one per distinct (dtype, rank) of the examples' inputs


@dataclass(frozen=True)
class FusionCode:
    """patterns.py's part for one op ("" fields without `fusion:`)."""

    constant: str  # the module-level `Fusion` record: ADD_RMS_NORM
    code: str  # the op's functions and its record


def fusion_code(spec: ProjectSpec, op: OpSpec) -> FusionCode:
    if op.fusion is None:
        return FusionCode("", "")
    stem = op_stem(op.schema)
    constant = stem.upper()
    overload = f"torch.ops.{spec.namespace}.{op.schema.name}.{op.schema.overload_or_default}"
    parts = [_composite(op, stem), _search(op, stem), _replacement(op, stem, overload), _applies(op, stem),
             _example_inputs(op, stem), _record(op, stem, constant, overload)]
    return FusionCode(constant, "\n\n\n".join(parts))


def _constants(op: OpSpec) -> list[tuple[str, str]]:
    """(argument, Python literal) of each constant of the pattern."""
    found = []
    for name, value in op.fusion.constants:
        arg = op.schema.argument(name)
        source = python_default(arg.type, value) if arg.has_default and value == arg.default else value_source(value)
        found.append((name, source))
    return found


def _typed(op: OpSpec, names) -> list[str]:
    """The parameters of the op's signature for `names`, in schema order (defaults dropped)."""
    by_name = {a.name: p for a, p in zip(op.schema.arguments, (p for p in signature(op).parameters if p != "*"),
                                         strict=True)}
    return [by_name[name].split(" = ")[0] for name in names]


def _composite(op: OpSpec, stem: str) -> str:
    sig = signature(op)
    field = f"ops[{op.index}].reference" if op.fusion.from_reference else f"ops[{op.index}].fusion.pattern"
    doc = docstring(f"What models write instead of calling {op.schema.qualified_name} ({field} in opgen.yaml).")
    return "\n".join([define(f"{stem}_composite", list(sig.parameters), sig.returns), f"    {doc}",
                      *body_lines(op.fusion.body)])


def _result_name(op: OpSpec) -> str:
    names = {a.name for a in op.schema.arguments}
    return next(name for name in ("result", "result_", "result__") if name not in names)


def _arguments(op: OpSpec) -> list[str]:
    """The op's arguments in schema order, each an input by name or a constant as its literal (a constant may come
    before an input: `softmax(x, int dim=-1, float scale)` with `scale` matched)."""
    inputs, constants = set(op.fusion.inputs), dict(_constants(op))
    args = [a.name if a.name in inputs else constants[a.name] for a in op.schema.positional]
    return args + [f"{a.name}={a.name if a.name in inputs else constants[a.name]}" for a in op.schema.kwarg_only]


def _search(op: OpSpec, stem: str) -> str:
    inputs = list(op.fusion.inputs)
    args = _arguments(op)
    written = [a.name for a in op.schema.mutated_args]
    head = define(f"_{stem}_search", _typed(op, inputs), "object")
    composite = call(f"{stem}_composite", args, "    ")
    if not written:
        return "\n".join([head, '    """The pattern: the composite with its constants."""', f"    return {composite}"])
    result = _result_name(op)
    lines = [head, '    """The pattern: the composite with its constants, and the new values of the buffers it writes."""']
    if not op.schema.returns:
        lines += [f"    {composite}", f"    return {', '.join(written)}"]
    elif len(op.schema.returns) == 1:
        lines += [f"    {result} = {composite}", f"    return {result}, {', '.join(written)}"]
    else:
        lines += [f"    {result} = {composite}", f"    return (*{result}, {', '.join(written)})"]
    return "\n".join(lines)


def _replacement(op: OpSpec, stem: str, overload: str) -> str:
    inputs = list(op.fusion.inputs)
    constants = dict(_constants(op))
    head = define(f"_{stem}_replacement", _typed(op, inputs), "object")
    written = [a.name for a in op.schema.mutated_args]
    if not written:
        args = _arguments(op)
        return "\n".join([head, f'    """{op.schema.qualified_name} in place of the composite."""',
                          "    return " + call(overload, args, "    ")])
    kwargs = [f"{a.name}={a.name if a.name in inputs else constants[a.name]}" for a in op.schema.arguments]
    count = len(op.schema.returns)
    first = 0 if count else 1  # auto_functionalized gives the op's outputs (None when it has none), then the buffers
    indices = list(range(first, first + count + len(written)))
    result = _result_name(op)
    return "\n".join([
        head,
        (f'    """{op.schema.qualified_name} in place of the composite, functionalized as in a compiled graph: its '
        'outputs,\n    then the new values of the buffers it writes (the compiler writes them in place again)."""'),
        f"    {result} = " + call("torch.ops.higher_order.auto_functionalized", [overload, *kwargs], "    "),
        "    return " + ", ".join(f"{result}[{i}]" for i in indices),
    ])


def _applies(op: OpSpec, stem: str) -> str:
    """When the op may replace the composite: `fusion.when`, and the floating tensors in one of `ops[i].dtypes`."""
    sig = signature(op)
    head = define(f"_{stem}_applies", list(sig.parameters), "bool")
    where = [f"ops[{op.index}].fusion.when"] if op.fusion.conditions else []
    checks, statements = [], []
    for rule in op.fusion.conditions:
        needed, text = rule.python_with_statements()
        statements += [line for line in needed if line not in statements]
        checks.append(f"({text})" if " or " in text or " if " in text else text)
    if op.dtypes:
        where.append(f"ops[{op.index}].dtypes")
        tensors = [a.name for a in op.schema.arguments if a.is_tensor and a.name in op.fusion.inputs]
        dtypes = tuple_text([f"torch.{d}" for d in op.dtypes])
        optional = [n for n in tensors if isinstance(strip_alias(op.schema.argument(n).type), OptionalType)]
        guard = " if t is not None and t.is_floating_point()" if optional else " if t.is_floating_point()"
        checks.append(f"all(t.dtype in {dtypes} for t in {tuple_text(tensors)}{guard})")
    doc = (f"{' and '.join(where)} in opgen.yaml, on the matched values (fake tensors in a graph)." if where else
           "No condition in opgen.yaml: the op replaces every match of the composite.")
    body = [f"    {line}" for line in statements] + ["    return " + (" and ".join(checks) if checks else "True")]
    return "\n".join([head, f"    {docstring(doc, '    ')}", *body])


def _trace_inputs(op: OpSpec) -> list[list[str]]:
    """Per distinct (dtype, rank) of the examples' tensor inputs: the inputs of an initial trace, as source."""
    seen, found = set(), []
    for example in op.examples:
        values = example.values
        if any(values.get(name) is None and op.schema.argument(name).is_tensor for name in op.fusion.inputs):
            continue
        key = tuple((v.dtype, len(v.shape if v.shape is not None else _shape(v.values))) for v in
                    (values[n] for n in op.fusion.inputs if isinstance(values.get(n), TensorValue)))
        if key in seen:
            continue
        seen.add(key)
        row = []
        for number, name in enumerate(op.fusion.inputs):
            value = values.get(name)
            if isinstance(value, TensorValue):
                shape = value.shape if value.shape is not None else _shape(value.values)
                row.append(f"torch.empty({tuple(shape)!r}, dtype=torch.{value.dtype})")
            else:
                row.append(repr(FLOAT_MAGIC * (number + 1)))
        found.append(row)
        if len(found) == MAX_TRACES:
            break
    return found


def _shape(values) -> tuple[int, ...]:
    shape = []
    while isinstance(values, tuple):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)


def _example_inputs(op: OpSpec, stem: str) -> str:
    rows = _trace_inputs(op)
    lines = [define(f"_{stem}_example_inputs", [], "list[tuple]"),
             (f'    """Inputs of the first traces, one per dtype and rank of ops[{op.index}].examples: only their '
             'metadata matters."""'), "    with FakeTensorMode():", "        return ["]
    lines += [f"            {tuple_text(row) if len(row) == 1 else call('', row, '            ')},"
              for row in rows] + ["        ]"]
    return "\n".join(lines)


def _record(op: OpSpec, stem: str, constant: str, overload: str) -> str:
    scalars = [name for name in op.fusion.inputs if not op.schema.argument(name).is_tensor]
    workaround = "{" + ", ".join(f"{literal(name)}: {FLOAT_MAGIC * (op.fusion.inputs.index(name) + 1)!r}"
                                 for name in scalars) + "}"
    fields = [
        f"field={literal(f'ops[{op.index}].fusion')}",
        f"overload={overload}",
        f"composite={stem}_composite",
        f"search=_{stem}_search",
        f"replacement=_{stem}_replacement",
        f"applies=_{stem}_applies",
        f"example_inputs=_{stem}_example_inputs",
        "inputs=" + tuple_text([literal(n) for n in op.fusion.inputs]),
        "constants={" + ", ".join(f"{literal(n)}: {s}" for n, s in _constants(op)) + "}",
        "written=" + tuple_text([literal(a.name) for a in op.schema.mutated_args]),
        f"scalar_workaround={workaround}",
        "targets=" + tuple_text([literal(t) for t in op.fusion.targets]),
    ]
    return f"{constant} = Fusion(\n" + "".join(f"    {f},\n" for f in fields) + ")"
