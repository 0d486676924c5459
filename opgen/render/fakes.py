"""Code printed from the semantics IR: the fake function's body (ops.py), and for the tests the same rules on
real inputs (`<op>_semantics`: (shape, dtype) of each output) and the bounds of each `dynamic` size."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..schema.model import BaseType, ListType, OptionalType, strip_alias
from ..schema.types import python_annotation
from ..spec.model import OpSpec, OutputSpec
from ..spec.semantics import binding_statements
from ..spec.semantics_ir import PyContext
from .pyformat import call, define, string_value, wrap
from .signature import argument_default


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
    if op.aliasing_tag:  # torch generates the fake; the outputs are the returned arguments
        body = ["return [" + ", ".join(f"({out.returns_argument}.shape, {out.returns_argument}.dtype)"
                                       for out in op.outputs) + "]"]
        return RuleCode(semantics_def=_keyword_def(op, f"{stem}_semantics", body), semantics_lines=tuple(body))
    fake, semantics = fake_and_expected(op)
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
            params.append(text + (f" = {argument_default(op, arg)}" if arg.has_default else ""))
    return define(name, [*params, "**_"], "list")


def fake_body(op: OpSpec, sizes=None) -> list[str]:
    """The fake (Meta) function's body from the op's semantics (also op_plugin's Meta functions). `sizes(rule, var,
    ctx)`: statements computing a shape rule in a variable and its name, or None for the printer's expression (a
    target's own way of writing sizes)."""
    body = _Body(op, fake=True)
    body.sizes = sizes
    return body.lines()


def fake_and_expected(op: OpSpec) -> tuple[list[str], list[str]]:
    """The fake function's body from the semantics, and the test's `expected` body: the same rules on
    real inputs, each output's (shape, dtype) (None where a size is data-dependent and so unknown); a
    Tensor[] output gives a list of them, one per tensor."""
    return _Body(op, fake=True).lines(), _Body(op, fake=False).lines()


def contiguity_checks(op: OpSpec) -> list[str]:
    """`torch._check(cache.is_contiguous(), ...)` for each written argument `ops[i].contiguous` lists: the kernel
    writes it as one dense block, so the op refuses another layout (the registration and the fake both check it).
    Statements of a function body 4 columns in (later lines carry their own indentation)."""
    lines = []
    for arg in op.schema.mutated_args:
        if arg.name not in op.contiguous:
            continue
        message = (f"{op.schema.qualified_name} writes {arg.name} in place as one dense block: it must be contiguous "
                   f"(ops[{op.index}].contiguous in opgen.yaml)")
        test = f"{arg.name}.is_contiguous()"
        if isinstance(strip_alias(arg.type), OptionalType):
            test = f"{arg.name} is None or {test}"
        lines.append(call("torch._check", [test, "lambda: " + string_value(message, "        ", "lambda: ", ",")],
                          "    "))
    return lines


def device_expr(op: OpSpec) -> str:
    """Where fake outputs live: the device of the first tensor input."""
    for arg in op.schema.arguments:
        t = strip_alias(arg.type)
        if t == BaseType("Tensor"):
            return f"{arg.name}.device"
        if isinstance(t, ListType) and t.elem == BaseType("Tensor"):
            return f"{arg.name}[0].device"
    return "'cpu'"


class _Body:
    """One function body; `fake`: allocate the outputs (else: the expected (shape, dtype) of each)."""

    def __init__(self, op: OpSpec, fake: bool) -> None:
        self.op, self.fake = op, fake
        reserved = {a.name for a in op.schema.arguments} | {"torch"} | {b.name for b in op.bindings}
        self.variables = {out.name: out.name if out.name not in reserved else f"{out.name}_" for out in op.outputs}
        self.ctx = PyContext(names=self.variables, reserved=reserved)
        self.body: list[str] = []
        self.unknown: set[str] = set()  # outputs whose size the test cannot know in advance
        self.expected: list[str] = []
        self.sizes = None  # fake_body's `sizes`
        self.computed: dict[str, str] = {}  # a shape rule -> the variable `sizes` computed it in

    def lines(self) -> list[str]:
        if self.fake:
            self.body += contiguity_checks(self.op)
        shown = [out for out in self.op.outputs if self._shown(out)]
        read = [rule for out in self.op.outputs for rule in (out.rules if out in shown else (out.dtype_rule,))]
        checked = self.op.checks if self.fake else ()
        self.body += binding_statements(self.op.bindings, [*read, *checked], self.ctx)
        for number, rule in enumerate(checked):
            statements, test = rule.python_with_statements(self.ctx)
            message = (f"{self.op.schema.qualified_name}: ops[{self.op.index}].checks[{number}] in opgen.yaml does not "
                       f"hold: {rule.text}")
            self.body += [*statements, call("torch._check", [test, "lambda: " + string_value(message, "        ",
                                                                                             "lambda: ", ",")], "    ")]
        for out in self.op.outputs:
            if out not in shown:
                dtype = "None" if out.dtype_rule.uses_outputs & self.unknown else self._expr(out.dtype_rule)
                self.expected.append(f"(None, {dtype})")
            elif out.is_list:
                self._list_output(out)
            else:
                self._tensor_output(out)
        return [_fit("", line) if "\n" not in line else line for line in self.body + self._end()]

    def _shown(self, out: OutputSpec) -> bool:
        """The expected function leaves out the shape of an output whose size is data-dependent (called once per
        output, in order: an output whose shape reads an unknown one is unknown too)."""
        if self.fake:
            return True
        unknown = out.shape_rule.is_dynamic or bool(out.shape_rule.uses_outputs & self.unknown)
        if unknown:
            self.unknown.add(out.name)
        return not unknown

    def _expr(self, rule) -> str:
        statements, text = rule.python_with_statements(self.ctx)
        self.body.extend(statements)
        return text

    def _shape(self, out: OutputSpec) -> str:
        if self.sizes is not None and not out.is_list:
            if out.shape_rule.text in self.computed:  # an earlier output's sizes: computed once
                return self.computed[out.shape_rule.text]
            found = self.sizes(out.shape_rule, f"{self.variables[out.name]}_size", self.ctx)
            if found is not None:
                self.body.extend(found[0])
                self.computed[out.shape_rule.text] = found[1]
                return found[1]
        statements, text = out.shape_rule.python(self.ctx)
        self.body.extend(statements)
        return text

    def _allocation(self, out: OutputSpec, device: str) -> str:
        """`torch.empty(shape, dtype=..., device=...)`, or `torch.empty_like(x)` for `like: x`."""
        if out.like is not None and self.fake:  # (the expected function only reads shapes and dtypes)
            extra = [f"dtype={self._expr(out.dtype_rule)}"] if out.like_dtype else []
            return _call("torch.empty_like", [self._expr(out.like), *extra])
        shape = self._shape(out)
        return _call("torch.empty", [shape, f"dtype={self._expr(out.dtype_rule)}", f"device={device}"])

    def _tensor_output(self, out: OutputSpec) -> None:
        var = self.variables[out.name]
        device = device_expr(self.op) if self.fake else '"meta"'
        self.body.append(f"{var} = {self._allocation(out, device)}")
        self.expected.append(f"({var}.shape, {var}.dtype)")

    def _list_output(self, out: OutputSpec) -> None:
        """A Tensor[] return: one allocation per element, `out.element_index` running over `length`."""
        var, index = self.variables[out.name], out.element_index
        device = device_expr(self.op) if self.fake else '"meta"'
        item = self._allocation(out, device)
        loop = f"for {index} in range({self._expr(out.length_rule)})"
        self.body.append(f"{var} = [{item} {loop}]")
        element = "t" if "t" not in self.ctx.reserved else "t_"
        self.expected.append(f"[({element}.shape, {element}.dtype) for {element} in {var}]")

    def _end(self) -> list[str]:
        if not self.fake:
            return ["return [" + ", ".join(self.expected) + "]"]
        names = list(self.variables.values())
        if not names:  # a body of its own checks needs no return (ruff RET501), an empty one does
            return [] if self.body else ["return None"]
        if len(names) == 1 and not self.op.schema.returns_tuple:
            return [f"return {names[0]}"]
        return ["return " + ", ".join(names) + ("," if len(names) == 1 else "")]


def _call(head: str, args: list[str]) -> str:
    return f"{head}({', '.join(args)})"


def _fit(prefix: str, call: str) -> str:
    """One statement of a function body, wrapped when too long (its later lines carry their own indentation)."""
    return "\n".join(wrap(prefix + call, 4))[4:]


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
