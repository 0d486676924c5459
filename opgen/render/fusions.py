"""The code of `<package>/patterns.py` for one op with `fusion:`: per form, the composite models write, the pattern
traced from it, the replacement calling the op, the conditions and the inputs of the first traces, and the
`Fusion` record that `register_fusions()` and the generated tests read; then the op's tuple of its forms.

A composite that writes buffers in place is traced functionalized (patterns.py's `trace`): the pattern then returns
the buffers' new values as well, and the replacement is the op under `auto_functionalized`, returning the same
values, which npugraph_ex and Inductor then re-inplace onto the caller's buffers as for a direct call of the op.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import op_stem
from ..schema.model import OptionalType, strip_alias
from ..spec.autograd import body_lines
from ..spec.model import FLOATING_DTYPES, FusionForm, OpSpec, ProjectSpec, TensorValue
from .examples import value_source
from .pyformat import LINE_LENGTH, call, comment_lines, define, docstring, literal, tuple_text
from .signature import python_default, signature

FLOAT_MAGIC = 1.2345e-05  # the value a float input is traced with (scalar_workaround): the pattern's wildcard


@dataclass(frozen=True)
class FusionCode:
    """patterns.py's part for one op, and what its tests name ("" and () without `fusion:`)."""

    constant: str  # the op's tuple of its forms' records: ADD_RMS_NORM_FORMS
    records: tuple[str, ...]  # each form's `Fusion` record: ADD_RMS_NORM, or RMS_NORM_LLAMA, RMS_NORM_OLMO2
    code: str  # the forms' functions and records, then the tuple
    # the fusion tests take the `patterns` fixture (the module imported on first use) and, when the op has several
    # forms, are parametrized over their indices in `constant` (`form`); else they name the one record
    parametrize: str = ""
    argument: str = ""
    parameter: str = "patterns"
    models: tuple[str, ...] = ()  # `fusion.models`: (architecture, config[, cache]) literals, the models test's parameters
    models_parametrize: str = ""  # the models test's decorators: each model, under each route, in each dtype


def fusion_code(spec: ProjectSpec, op: OpSpec) -> FusionCode:
    if op.fusion is None:
        return FusionCode("", (), "")
    stem = op_stem(op.schema)
    overload = f"torch.ops.{spec.namespace}.{op.schema.name}.{op.schema.overload_or_default}"
    forms = op.fusion.forms
    stems = [stem if len(forms) == 1 and not form.name else f"{stem}_{form.name or f'form{number}'}"
             for number, form in enumerate(forms)]
    parts = []
    for form, form_stem in zip(forms, stems, strict=True):
        parts += [_composite(op, form, form_stem), _search(op, form, form_stem),
                  _replacement(op, form, form_stem, overload), _dtypes(form, form_stem), _applies(op, form, form_stem),
                  _example_inputs(op, form, form_stem), _record(op, form, form_stem, overload)]
    records = tuple(s.upper() for s in stems)
    constant = f"{stem.upper()}_FORMS"
    parts.append(f"{constant} = {tuple_text(list(records))}")
    models = tuple(f"({literal(m.architecture)}, {{{', '.join(f'{literal(k)}: {value_source(v)}' for k, v in m.config)}}}"
                   + (f", {literal(m.cache)})" if m.cache else ")") for m in op.fusion.models)
    several = len(forms) > 1
    ids = tuple_text([literal(form.name or f"form{number}") for number, form in enumerate(forms)])
    return FusionCode(constant, records, "\n\n\n".join(parts),
                      f'@pytest.mark.parametrize("form", range({len(forms)}), ids={ids})' if several else "",
                      f"patterns.{constant}[form]" if several else f"patterns.{records[0]}",
                      "patterns, form" if several else "patterns",
                      models, _models_parametrize(op, models) if models else "")


def _broken(check: str) -> str:
    """A condition of `_applies` at 8 spaces, broken before its last `==` when too long (inside the parentheses)."""
    if len(f"        and {check}") <= LINE_LENGTH or " == " not in check:
        return check
    head, tail = check.rsplit(" == ", 1)
    return f"{head}\n        == {tail}"



def _model_lines(model: str, spec) -> str:
    """A model's (architecture, config[, cache]) literal at 8 spaces, its config one item a line when too long."""
    if len(f"        {model},") <= LINE_LENGTH:
        return model
    items = "".join(f"                {literal(k)}: {value_source(v)},\n" for k, v in spec.config)
    cache = f"            {literal(spec.cache)},\n" if spec.cache else ""
    return f"(\n            {literal(spec.architecture)},\n            {{\n{items}            }},\n{cache}        )"



def _models_parametrize(op: OpSpec, models: tuple[str, ...]) -> str:
    """The models test's parameters: the dtypes each a form is traced in throughout, both routes, the models."""
    dtypes = sorted({combination[0] for form in op.fusion.forms for combination in form.floating_dtypes
                     if combination and len(set(combination)) == 1}, key=FLOATING_DTYPES.index)
    ids = tuple_text([literal(m.architecture) for m in op.fusion.models])
    listed = "[" + ", ".join(models) + "]"
    if len(listed) > LINE_LENGTH - 6:
        listed = "[\n" + "".join(f"        {_model_lines(model, spec)},\n"
                                  for model, spec in zip(models, op.fusion.models, strict=True)) + "    ]"
    return "\n".join([
        call("@pytest.mark.parametrize", ['"dtype"', "[" + ", ".join(f"torch.{d}" for d in dtypes) + "]",
                                          f"ids={tuple_text([literal(d) for d in dtypes])}"]),
        '@pytest.mark.parametrize("route", checks.FUSION_ROUTES)',
        call("@pytest.mark.parametrize", ['"model"', listed, f"ids={ids}"]) if "\n" not in listed else
        '@pytest.mark.parametrize(\n    "model",\n    ' + listed + f",\n    ids={ids},\n)"])


def _constants(op: OpSpec, form: FusionForm) -> list[tuple[str, str]]:
    """(argument, Python literal) of each constant of the pattern."""
    found = []
    for name, value in form.constants:
        arg = op.schema.argument(name)
        source = python_default(arg.type, value) if arg.has_default and value == arg.default else value_source(value)
        found.append((name, source))
    return found


def _typed(op: OpSpec, names) -> list[str]:
    """The parameters of the op's signature for `names`, in schema order (defaults dropped)."""
    by_name = {a.name: p for a, p in zip(op.schema.arguments, (p for p in signature(op).parameters if p != "*"),
                                         strict=True)}
    return [by_name[name].split(" = ")[0] for name in names]


def _composite(op: OpSpec, form: FusionForm, stem: str) -> str:
    sig = signature(op)
    field = f"ops[{op.index}].reference" if form.from_reference else f"{form.field}.pattern"
    doc = docstring("\n".join(comment_lines(f"What models write instead of calling {op.schema.qualified_name} ({field} "
                                            "in opgen.yaml).")), "    ")
    return "\n".join([define(f"{stem}_composite", list(sig.parameters), sig.returns), f"    {doc}",
                      *body_lines(form.body)])


def _result_name(op: OpSpec) -> str:
    names = {a.name for a in op.schema.arguments}
    return next(name for name in ("result", "result_", "result__") if name not in names)


def _arguments(op: OpSpec, form: FusionForm) -> list[str]:
    """The op's arguments in schema order, each an input by name or a constant as its literal (a constant may come
    before an input: `softmax(x, int dim=-1, float scale)` with `scale` matched)."""
    inputs, constants = set(form.inputs), dict(_constants(op, form))
    args = [a.name if a.name in inputs else constants[a.name] for a in op.schema.positional]
    return args + [f"{a.name}={a.name if a.name in inputs else constants[a.name]}" for a in op.schema.kwarg_only]


def _search(op: OpSpec, form: FusionForm, stem: str) -> str:
    head = define(f"_{stem}_search", _typed(op, form.inputs), "object")
    composite = call(f"{stem}_composite", _arguments(op, form), "    ")
    written = [a.name for a in op.schema.mutated_args]
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


def _replacement(op: OpSpec, form: FusionForm, stem: str, overload: str) -> str:
    inputs = list(form.inputs)
    head = define(f"_{stem}_replacement", _typed(op, inputs), "object")
    written = [a.name for a in op.schema.mutated_args]
    if not written:
        return "\n".join([head, f'    """{op.schema.qualified_name} in place of the composite."""',
                          "    return " + call(overload, _arguments(op, form), "    ")])
    constants = dict(_constants(op, form))
    kwargs = [f"{a.name}={a.name if a.name in inputs else constants[a.name]}" for a in op.schema.arguments]
    count = len(op.schema.returns)
    first = 0 if count else 1  # auto_functionalized gives the op's outputs (None when it has none), then the buffers
    indices = list(range(first, first + count + len(written)))
    result = _result_name(op)
    return "\n".join([
        head,
        "    " + docstring("\n".join(comment_lines(
            f"{op.schema.qualified_name} in place of the composite, functionalized as in a compiled graph: its outputs, "
            "then the new values of the buffers it writes (the compiler writes them in place again).")), "    "),
        f"    {result} = " + call("torch.ops.higher_order.auto_functionalized", [overload, *kwargs], "    "),
        "    return " + ", ".join(f"{result}[{i}]" for i in indices),
    ])


def _dtypes(form: FusionForm, stem: str) -> str:
    """The module constant of the floating dtypes of the inputs in each trace: where the form applies."""
    rows = [tuple_text([f"torch.{d}" for d in dtypes]) for dtypes in form.floating_dtypes]
    comment = f"# The dtypes of the floating inputs in each trace of {form.field}: where it applies."
    head = f"{stem.upper()}_DTYPES = "
    inline = head + tuple_text(rows)
    wrapped = head + "(\n" + "".join(f"    {row},\n" for row in rows) + ")"
    return "\n".join([comment, inline if len(inline) <= LINE_LENGTH else wrapped])


def _applies(op: OpSpec, form: FusionForm, stem: str) -> str:
    """When the op may replace the composite: `when:`, and the floating tensors in the dtypes of one of the
    form's traces (a pattern traced in float32 must not bind the float32 middle of a bfloat16 norm)."""
    sig = signature(op)
    head = define(f"_{stem}_applies", list(sig.parameters), "bool")
    checks, statements = [], []
    for rule in form.conditions:
        needed, text = rule.python_with_statements()
        statements += [line for line in needed if line not in statements]
        checks.append(f"({text})" if " or " in text or " if " in text else text)
    tensors = [a.name for a in op.schema.arguments if a.is_tensor and a.name in form.inputs]
    optional = [n for n in tensors if isinstance(strip_alias(op.schema.argument(n).type), OptionalType)]
    guard = "t is not None and t.is_floating_point()" if optional else "t.is_floating_point()"
    statements.append(f"floating = tuple(t.dtype for t in {tuple_text(tensors)} if {guard})")
    checks.append(f"floating in {stem.upper()}_DTYPES")
    when = f"{form.field}.when in opgen.yaml, and the" if form.conditions else "The"
    doc = (f"{when} floating inputs in the dtypes of one of its traces ({stem.upper()}_DTYPES), on the matched "
           "values (fake tensors in a graph).")
    returned = "    return " + " and ".join(checks)
    if len(returned) > LINE_LENGTH:  # one condition a line, a long comparison broken before its operator
        checks = [_broken(check) for check in checks]
        returned = "    return (\n        " + "\n        and ".join(checks) + "\n    )"
    body = [f"    {line}" for line in statements] + [returned]
    return "\n".join([head, f"    {docstring(chr(10).join(comment_lines(doc, LINE_LENGTH - 8)), '    ')}", *body])


def _trace_inputs(op: OpSpec, form: FusionForm) -> list[list[str]]:
    """Per first trace of the form (its dtypes, its rank): the inputs, as source."""
    rows = []
    for trace in form.traces:
        row = []
        for number, name in enumerate(form.inputs):
            value = trace[name]
            if isinstance(value, TensorValue):
                row.append(f"torch.empty({tuple(value.shape)!r}, dtype=torch.{value.dtype})")
            else:
                row.append(repr(FLOAT_MAGIC * (number + 1)))
        rows.append(row)
    return rows


def _example_inputs(op: OpSpec, form: FusionForm, stem: str) -> str:
    rows = _trace_inputs(op, form)
    source = f"ops[{op.index}].examples" + (f" in ops[{op.index}].dtypes" if op.dtypes else "")
    doc = (f"Inputs of the first traces, one per dtype combination (then rank) of {source}: only their metadata "
           "matters.")
    lines = [define(f"_{stem}_example_inputs", [], "list[tuple]"),
             f"    {docstring(chr(10).join(comment_lines(doc, LINE_LENGTH - 8)), '    ')}", "    with FakeTensorMode():",
             "        return ["]
    lines += [f"            {tuple_text(row) if len(row) == 1 else call('', row, '            ')},"
              for row in rows] + ["        ]"]
    return "\n".join(lines)


def _record(op: OpSpec, form: FusionForm, stem: str, overload: str) -> str:
    scalars = [name for name in form.inputs if not op.schema.argument(name).is_tensor]
    workaround = "{" + ", ".join(f"{literal(name)}: {FLOAT_MAGIC * (form.inputs.index(name) + 1)!r}"
                                 for name in scalars) + "}"
    fields = [
        f"field={literal(form.field)}",
        f"name={literal(form.name)}",
        f"overload={overload}",
        f"composite={stem}_composite",
        f"search=_{stem}_search",
        f"replacement=_{stem}_replacement",
        f"applies=_{stem}_applies",
        f"example_inputs=_{stem}_example_inputs",
        f"dtypes={stem.upper()}_DTYPES",
        "inputs=" + tuple_text([literal(n) for n in form.inputs]),
        "constants={" + ", ".join(f"{literal(n)}: {s}" for n, s in _constants(op, form)) + "}",
        "written=" + tuple_text([literal(a.name) for a in op.schema.mutated_args]),
        f"scalar_workaround={workaround}",
        "targets=" + tuple_text([literal(t) for t in op.fusion.targets]),
        "tolerances={" + ", ".join(f"torch.{d}: ({rtol!r}, {atol!r})" for d, rtol, atol in form.tolerances) + "}",
    ]
    return f"{stem.upper()} = Fusion(\n" + "".join(f"    {f},\n" for f in fields) + ")"
