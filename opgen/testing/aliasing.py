"""Memory shared where the schema promises none: an output that is an input or a view of one, and `out=` arguments
given an input's memory or a wrong size (opgen.testing; torch).

custom_op's kernel wrapper refuses an output that aliases an input; a `Library.impl` kernel runs unguarded, so an
identity fast path (`return x` when there is nothing to do, `x.to(dtype)` of a tensor already in that dtype, a
`reshape` that is a view) passes every value check there and corrupts the caller's tensor once either is written.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from .input_variants import out_arguments
from .op import Call, Op
from .values import clone, tensors


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    """The bytes `t` can touch, [start, end); None for an empty tensor."""
    if not t.numel():
        return None
    start = t.data_ptr()
    last = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    return start, start + (last + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def _declared(op: Op, index: int) -> bool:
    """Output `index` may be an input's memory: a torch.Tag.inplace/out return, or an aliased return `Tensor(a)`."""
    returns = op.overload._schema.returns
    return index < len(op.returned) or (index < len(returns) and returns[index].alias_info is not None)


def aliased_outputs(op: Op, call: Call, result) -> list[str]:
    """How the outputs of `result` share memory the schema does not declare shared: with an argument of `call` (the
    call's own tensors, as the kernel got them) or with another output. One line per output at fault."""
    outputs = tensors(result)
    found = []
    for index, out in enumerate(outputs):
        if _declared(op, index):
            continue
        shared = next((name for name, value in call.items() if any(_overlap(out, t) for t in tensors(value))), None)
        if shared is not None:
            found.append(f"{op.output_field(index)} is argument {shared!r} or a view of it (shares its memory)")
            continue
        other = next((j for j in range(index) if not _declared(op, j) and _overlap(out, outputs[j])), None)
        if other is not None:
            found.append(f"{op.output_field(index)} shares memory with {op.output_field(other)}")
    return found


ALIAS_FIX = ("the schema promises new tensors, so a caller (or a compiled graph, which reuses buffers) writing one "
             "changes the other: return a new tensor (`.clone()` on the fast path; `.to(dtype, copy=True)`), or "
             "declare the alias in the schema")


OUT_FIXES = {"out-alias": "an out= that is an input: compute into a new tensor, then copy it into out",
             "out-size": "an out= of the wrong size: resize it (out.resize_) or refuse it (torch._check)"}


def out_calls(op: Op, call: Call) -> list[tuple[str, str, Call, tuple[str, str] | None]]:
    """(kind, label, call, (out, input) made one tensor) of `call` with an `out=` argument given an input's memory
    ("out-alias": each tensor input of its shape and dtype, the very tensor) or a wrong size ("out-size": one more,
    and one fewer, in its first dim)."""
    found = []
    for name in out_arguments(op):
        out = call.get(name)
        if not isinstance(out, torch.Tensor):
            continue
        for other, value in call.items():
            if (other not in op.written and isinstance(value, torch.Tensor) and value.shape == out.shape
                    and value.dtype == out.dtype and value.numel()):
                found.append(("out-alias", f"with {name} given {other} itself", call, (name, other)))
        if out.dim():
            for size in dict.fromkeys((out.shape[0] + 1, out.shape[0] - 1)):
                if size >= 1:
                    wrong = torch.zeros((size, *out.shape[1:]), dtype=out.dtype)
                    label = f"with {name} of shape {tuple(wrong.shape)}"
                    found.append(("out-size", label, {**call, name: wrong}, None))
    return found


def out_problems(op: Op, reference: Callable, call: Call, where: str,
                 compare: Callable[[str, list, list], list[str]], results: Callable) -> list[tuple[str, str, str]]:
    """What is wrong with the kernel on each `out=` call derived from `call` (`out_calls`): given an input's memory it
    must give the reference's values (computed on separate tensors) or refuse; given a wrong size it must resize the
    caller's tensor to the right one or refuse. Writing silently into the wrong memory or size fails. (kind, label,
    the first difference) of each call that fails."""
    problems = []
    for kind, label, derived, alias in out_calls(op, call):
        reference_call, kernel_call = clone(derived), clone(derived)
        expected = _outcome(reference, reference_call)
        if expected is _RAISED:  # not an input of the op
            continue
        if alias is not None:
            kernel_call[alias[0]] = kernel_call[alias[1]]
        actual = _outcome(op, kernel_call)
        if actual is _RAISED:  # refusing an out= it does not take is the op's right
            continue
        found = compare(f"{where} {label}", results(op, actual, kernel_call), results(op, expected, reference_call))
        problems += [(kind, label, f"{problem} ({OUT_FIXES[kind]})") for problem in found[:1]]
    return problems


_RAISED = object()


def _outcome(fn: Callable, call: Call):
    """`fn(call)`, or _RAISED; ATen's warning for an out= resized is not shown."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(call)
    except Exception:  # noqa: BLE001  (a refusal, judged by the caller)
        return _RAISED
