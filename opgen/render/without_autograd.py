"""Library style, an op without `autograd:`: the kernels behind functions whose results raise on backward.

custom_op gives every op an Autograd kernel that raises "no autograd formula was registered" on backward. A
Library op gets torch's warn-only fallback instead, and a Python CPU kernel made of torch ops is differentiated
through them while a device kernel is not. A Python Autograd kernel would cost about half a call more on every
call (benchmarks/bench_dispatch.py), so ops.py registers a fallthrough at Autograd (skipped in C++) and each kernel
behind a function printed here: it reads each tensor's `requires_grad` (attribute reads, no call in the usual case)
and only when a gradient could flow hands over to `tied` of the generated <package>/no_autograd.py.
"""

from __future__ import annotations

from ..registration_styles import STYLES
from ..schema.model import ListType, OptionalType, is_tensor_like, strip_alias
from ..spec.model import OpSpec, ProjectSpec
from .pyformat import LINE_LENGTH, call, comment_lines, define, docstring, literal, tuple_text
from .signature import signature


def needs_guard(spec: ProjectSpec, op: OpSpec) -> bool:
    """A Library-style op without a formula that has a tensor a gradient could come from."""
    return (not STYLES[spec.style].infers_schema and op.autograd is None
            and any(is_tensor_like(a.type) for a in op.schema.arguments))


def overload_name(spec: ProjectSpec, op: OpSpec) -> str:
    """`ns.op.default`, as torch's error names the op."""
    return f"{spec.namespace}.{op.schema.name}.{op.schema.overload_or_default}"


def decorator(spec: ProjectSpec, op: OpSpec) -> str:
    """`raising_on_backward(...)` for the fake (run while tracing only: the generic form is cheap enough)."""
    written = [literal(a.name) for a in op.schema.mutated_args]
    return call("raising_on_backward", [literal(overload_name(spec, op))]
                + ([f"written={tuple_text(written)}"] if written else []))


def guarded_name(kernel: str) -> str:
    return f"_{kernel.lstrip('_')}_without_autograd"


def guard_function(spec: ProjectSpec, op: OpSpec, kernel: str) -> str:
    """`def _<kernel>_without_autograd(...)`: `kernel` as is unless grad mode is on and an input requires grad."""
    sig = signature(op)
    tensors = [a for a in op.schema.arguments if is_tensor_like(a.type)]
    tests = [_requires_grad(a.name, strip_alias(a.type)) for a in tensors]
    condition = f"    if ({' or '.join(tests)}) and torch.is_grad_enabled():"
    if len(condition) > LINE_LENGTH:
        condition = "    if (\n" + "".join(_test_line(t, "        ", "or " if i else "") for i, t in enumerate(tests)) + \
            "    ) and torch.is_grad_enabled():"
    written = [a.name for a in op.schema.mutated_args]
    doc = docstring("\n".join(comment_lines(
        f"{kernel}, its results tied to a node whose backward raises when a gradient could flow (ops[{op.index}] "
        "has no autograd:).", 100)), "    ")
    tied = call("return tied", [literal(overload_name(spec, op)), "lambda: " + call(kernel, list(sig.call_args), "            "),
                                _names([a.name for a in tensors]), _names(written)], "        ")
    return "\n".join([define(guarded_name(kernel), list(sig.parameters), sig.returns), f"    {doc}",
                      condition, f"        {tied}",
                      "    " + call(f"return {kernel}", list(sig.call_args), "    ")])


def _names(names: list[str]) -> str:
    """A tuple of names as an argument of `tied(...)`, one name a line where one line would be too long."""
    text = tuple_text(names)
    return text if len(text) <= LINE_LENGTH - 14 else call("", names, "            ")


def _test_line(test: str, indent: str, joint: str) -> str:
    """One `or` operand of the guard's condition, split inside its brackets when it would pass the line length."""
    line = f"{indent}{joint}{test}\n"
    if len(line) <= LINE_LENGTH + 1 or not test.startswith("("):
        return line
    parts = test[1:-1].split(" and ")
    inner = "".join(f"{indent}    {'and ' if i else ''}{part}\n" for i, part in enumerate(parts))
    return f"{indent}{joint}(\n{inner}{indent})\n"


def _requires_grad(name: str, t) -> str:
    if isinstance(t, OptionalType) and isinstance(t.elem, ListType):
        return f"({name} is not None and any(t is not None and t.requires_grad for t in {name}))"
    if isinstance(t, OptionalType):
        return f"({name} is not None and {name}.requires_grad)"
    if isinstance(t, ListType):
        inner = "t is not None and t.requires_grad" if isinstance(t.elem, OptionalType) else "t.requires_grad"
        return f"any({inner} for t in {name})"
    return f"{name}.requires_grad"

