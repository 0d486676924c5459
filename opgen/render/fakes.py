"""Code printed from the semantics IR: the fake function's body (ops.py), and for the tests the same rules on
real inputs (`<op>_semantics`: (shape, dtype) of each output) and the bounds of each `dynamic` size."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..schema.model import BaseType, ListType, strip_alias
from ..schema.types import python_annotation
from ..spec.model import OpSpec
from .pyformat import LINE_LENGTH, call, define
from .signature import python_default


@dataclass(frozen=True)
class RuleCode:
    """The fake's body, and the tests' semantics function (its `def` line and body; empty when the op has no
    semantics to print)."""

    fake_lines: tuple[str, ...] = ()
    semantics_def: str = ""
    semantics_lines: tuple[str, ...] = ()
    bounds_def: str = ""
    bounds_lines: tuple[str, ...] = ()


def rule_code(op: OpSpec, stem: str) -> RuleCode:
    if op.missing_semantics:
        return RuleCode()
    if op.tags:  # torch generates the fake; the outputs are the returned arguments
        body = ["return [" + ", ".join(f"({out.returns_argument}.shape, {out.returns_argument}.dtype)"
                                       for out in op.outputs) + "]"]
        return RuleCode(semantics_def=_keyword_def(op, f"{stem}_semantics", body), semantics_lines=tuple(body))
    fake, semantics = _fake_and_semantics(op)
    bounds = _bounds_lines(op)
    return RuleCode(tuple(fake), _keyword_def(op, f"{stem}_semantics", semantics), tuple(semantics),
                    _keyword_def(op, f"{stem}_bounds", bounds) if bounds else "", tuple(bounds))


def _keyword_def(op: OpSpec, name: str, body: list[str]) -> str:
    """`def name(*, <the arguments the body reads>, **_) -> list:`, called with a call's arguments by name."""
    read = {node.id for node in ast.walk(ast.parse("\n".join(body))) if isinstance(node, ast.Name)}
    params = ["*"] if any(a.name in read for a in op.schema.arguments) else []
    for arg in op.schema.arguments:
        if arg.name in read:
            text = f"{arg.name}: {python_annotation(arg.type) or 'object'}"
            params.append(text + (f" = {python_default(arg.type, arg.default)}" if arg.has_default else ""))
    return define(name, [*params, "**_"], "list")


def fake_body(op: OpSpec) -> list[str]:
    """The fake (Meta) function's body from the op's semantics (also op_plugin's Meta functions)."""
    return _fake_and_semantics(op)[0]


def _fake_and_semantics(op: OpSpec) -> tuple[list[str], list[str]]:
    """The fake function's body from the semantics, and the semantics function's: the same rules on real
    inputs, outputs as meta tensors (None where a size is data-dependent and so unknown)."""
    from ..spec.semantics_ir import PyContext

    reserved = {a.name for a in op.schema.arguments} | {"torch"}
    variables = {out.name: out.name if out.name not in reserved else f"{out.name}_" for out in op.outputs}
    ctx = PyContext(names=variables, reserved=reserved)
    expected_ctx = PyContext(names=variables, reserved=reserved)
    device = _device_expr(op)
    body: list[str] = []
    expected_body: list[str] = []
    expected_items = []
    unknown: set[str] = set()  # outputs whose size the test cannot know in advance
    for out in op.outputs:
        var = variables[out.name]
        statements, shape = out.shape_rule.python(ctx)
        dtype = out.dtype_rule.python(ctx)
        body.extend(statements)
        if out.like:  # the input's layout (strides) too, as a kernel computing elementwise from it keeps it
            body.append(f"{var} = torch.empty_like({out.like})")
        else:
            body.append(call(f"{var} = torch.empty", [shape, f"dtype={dtype}", f"device={device}"], "    "))
        shape_unknown = out.shape_rule.is_dynamic or bool(out.shape_rule.uses_outputs & unknown)
        dtype_unknown = bool(out.dtype_rule.uses_outputs & unknown)
        if shape_unknown:
            unknown.add(out.name)
            expected_dtype = "None" if dtype_unknown else out.dtype_rule.python(expected_ctx)
            expected_items.append(f"(None, {expected_dtype})")
            continue
        more, expected_shape = out.shape_rule.python(expected_ctx)
        expected_body.extend(more)
        expected_body.append(call(f"{var} = torch.empty", [expected_shape, f"dtype={out.dtype_rule.python(expected_ctx)}",
                                                            'device="meta"'], "    "))
        expected_items.append(f"({var}.shape, {var}.dtype)")
    names = list(variables.values())
    if not names:
        body.append("return None")
    elif len(names) == 1 and not op.schema.returns_tuple:
        body.append(f"return {names[0]}")
    else:
        body.append("return " + ", ".join(names) + ("," if len(names) == 1 else ""))
    line = "return [" + ", ".join(expected_items) + "]"
    if len(line) + 4 > LINE_LENGTH:
        line = "return [\n" + "".join(f"        {item},\n" for item in expected_items) + "    ]"
    expected_body.append(line)
    return body, expected_body


def _device_expr(op: OpSpec) -> str:
    """Where fake outputs live: the device of the first tensor input."""
    for arg in op.schema.arguments:
        t = strip_alias(arg.type)
        if t == BaseType("Tensor"):
            return f"{arg.name}.device"
        if isinstance(t, ListType) and t.elem == BaseType("Tensor"):
            return f"{arg.name}[0].device"
    return "'cpu'"


def _bounds_lines(op: OpSpec) -> list[str]:
    """`return [(min, max), ...]` of every `dynamic` size in the op's shape rules (in the order the fake
    function creates them), None where the spec gives no bound or the bound reads another output."""
    from ..spec.semantics_ir import Dynamic, PyContext, _Py

    items = []
    printer = _Py(PyContext(reserved={a.name for a in op.schema.arguments}))
    for out in op.outputs:
        pending = [out.shape_rule.node]
        while pending:
            node = pending.pop(0)
            if node is None:
                continue
            if isinstance(node, Dynamic):
                bounds = [None if bound is None or out.shape_rule.uses_outputs else printer.at(bound, 0)
                          for bound in (node.lower, node.upper)]
                items.append(f"({bounds[0]}, {bounds[1]})")
            elif hasattr(node, "children"):
                pending[:0] = [child for child in node.children() if child is not None]
    if not items or printer.statements:
        return []
    return ["return [" + ", ".join(items) + "]"]
