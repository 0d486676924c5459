"""Tier 2: non-contiguous inputs (transposed, permuted, channels-last, expanded) give the contiguous results, and
the fake's strides are the kernel's.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .compiled import assert_compiled_matches_eager, opcheck
from .failures import CheckFailed
from .op import Call, Op
from .oracle import _differences, _distribution_differences, _results
from .values import clone, tensor_map, tensors


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """The same values, rank >= 2 transposed in memory, rank 1 every other element of a wider tensor."""
    if t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if t.dim() == 1 and t.numel() > 1:
        wide = t.new_zeros(2 * t.numel())
        wide[::2] = t
        return wide[::2]
    return t



def _permuted(t: torch.Tensor) -> torch.Tensor:
    """The same values with every dim of rank >= 3 reversed in memory (not only the last two)."""
    if t.dim() < 3:
        return t
    order = tuple(reversed(range(t.dim())))
    return t.permute(order).contiguous().permute(order)



def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t



def _expanded(t: torch.Tensor) -> torch.Tensor:
    """A stride-0 tensor (row 0 repeated), for a floating input the op only reads."""
    return t[:1].expand(t.shape) if t.is_floating_point() and t.dim() and t.shape[0] > 1 else t



def non_contiguous(call: Call, keep: Sequence[str] = ()) -> Call:
    """The same values in non-contiguous tensors (`_transposed`); `keep`: arguments left as they are."""
    return {name: value if name in keep else tensor_map(_transposed, value) for name, value in call.items()}



WRITTEN_LAYOUTS = (("transposed", _transposed), ("permuted", _permuted), ("channels_last", _channels_last))


def layouts(op: Op, call: Call, refused: Collection[tuple[str, str]] = ()) -> list[tuple[str, Call, Call]]:
    """(label, the call in that layout, the same values contiguous) for each layout some input of `call` can take:
    transposed, permuted (rank >= 3), channels_last (4-D), expanded (stride 0, floating inputs the op only reads).
    out= tensors stay as they are (Dynamo refuses non-contiguous ones), and so do written arguments declared
    contiguous (the op refuses other layouts of them: `assert_refuses_non_contiguous`) and, in the layouts named,
    the (layout, argument) pairs in `refused`."""
    keep = _kept_contiguous(op)
    found = []
    for label, change, only_read in (*((label, change, False) for label, change in WRITTEN_LAYOUTS),
                                     ("expanded", _expanded, True)):
        skipped = keep | {name for layout, name in refused if layout == label}
        skipped |= set(op.written) if only_read else set()
        changed = {name: value if name in skipped else tensor_map(change, value) for name, value in call.items()}
        if any(a is not b for name in call for a, b in zip(tensors(changed[name]), tensors(call[name]), strict=True)):
            dense = tensor_map(lambda t: t.contiguous(), changed)
            found.append((label, changed, dense))
    return found



def _kept_contiguous(op: Op) -> set[str]:
    """Arguments the layout tier leaves contiguous: out= tensors, and written arguments declared contiguous."""
    return set(op.returned if op.tag == "out" else ()) | {name for name in op.contiguous if name in op.written}



def assert_refuses_non_contiguous(op: Op, call: Call) -> None:
    """Each written argument `ops[i].contiguous` lists is refused, with an error saying so, when it is not
    contiguous: the kernel writes its memory as a dense block (a KV cache through `.view(-1, d)`), as real cache
    kernels require, and the registration checks it rather than write the wrong elements."""
    for name in sorted(_kept_contiguous(op) - set(op.returned)):
        strided = {**clone(call), name: tensor_map(_transposed, clone(call[name]))}
        if all(t.is_contiguous() for t in tensors(strided[name])):
            continue
        try:
            op(strided)
        except Exception as error:  # torch._check raises RuntimeError; a kernel may raise others
            if "contiguous" in str(error) and name in str(error):  # not torch's own `view` error, say
                continue
            raise CheckFailed(f"{op.field}.contiguous in opgen.yaml lists {name!r}, which the op writes, so a "
                              f"non-contiguous {name!r} must be refused with an error saying so, but the op raised "
                              f"{type(error).__name__}: {error}", "kernel-needs-contiguous") from error
        raise CheckFailed(f"{op.field}.contiguous in opgen.yaml lists {name!r}, which the op writes, so a "
                          f"non-contiguous {name!r} must be refused, but the op took a transposed one: regenerate "
                          "ops.py (its registration checks it), or make the kernel check it", "kernel-reads-layout")



def assert_non_contiguous_inputs(op: Op, call: Call) -> None:
    """The CPU kernel on inputs in other layouts (same values) gives what it gives on contiguous ones, outputs in
    the strides the fake says (contiguous unless `like:` in opgen.yaml keeps an input's layout); opcheck and
    compiled == eager on the transposed layout. Written arguments declared contiguous must be refused in other
    layouts instead."""
    assert_refuses_non_contiguous(op, call)
    refused = _written_and_refused(op, call)
    for label, strided, dense in layouts(op, call, refused):
        expected_call = clone(dense)
        expected = op.seeded(op)(expected_call)
        actual_call = {name: value if name not in op.written else clone(value) for name, value in strided.items()}
        try:
            actual = op.seeded(op)(actual_call)
        except Exception as error:
            raise CheckFailed(_strided_failure(op, label, strided, dense, error), "kernel-needs-contiguous") from error
        where = f"{op.field}.examples[0] in {label} layout"
        found = _differences(op, where, _results(op, actual, actual_call), _results(op, expected, expected_call),
                             "contiguous inputs")
        if found and op.random:  # draws follow memory order: compare what many draws look like
            found = _distribution_differences(op, where, (op, strided), (op, dense), "contiguous inputs")
        if found:
            raise CheckFailed(f"{op.kernel} gives other values for {label} inputs than for contiguous ones: "
                              f"{found[0]}; it reads memory in storage order (view, data_ptr, as_strided): follow "
                              f"the strides, or declare the inputs it needs contiguous in {op.field}.contiguous",
                              "kernel-reads-layout")
        _assert_fake_strides(op, label, strided, actual)
    kept = _kept_contiguous(op) | {name for layout, name in refused if layout == "transposed"}
    transposed = non_contiguous(clone(call), keep=kept)  # kept ones written: copies
    opcheck(op, [transposed])
    assert_compiled_matches_eager(op, [transposed])



def _written_and_refused(op: Op, call: Call) -> set[tuple[str, str]]:
    """(layout, argument) for the written arguments (not declared contiguous) that the kernel refuses, raising, in
    that layout: a refusal (a KV-cache kernel `.view`s its cache, as real ones require it dense) is no silent
    corruption, so the layout tier keeps them contiguous in that layout and notes, with a warning, the spec key that
    makes the refusal the op's contract. Each layout is tried: a 4-D cache viewed as rows of its last two dims takes
    a transposed cache and refuses a permuted one. Wrong values or a lost write on a strided buffer still fail."""
    found = set()
    for name in sorted(set(op.written) - _kept_contiguous(op)):
        refusals = []
        for label, change in WRITTEN_LAYOUTS:
            strided = {**clone(call), name: tensor_map(change, clone(call[name]))}
            if all(t.is_contiguous() for t in tensors(strided[name])):
                continue
            try:
                op(strided)
            except Exception as error:  # noqa: BLE001  (any loud refusal)
                refusals.append((label, error))
                found.add((label, name))
        if refusals:
            error = refusals[0][1]
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            named = " or ".join(label for label, _ in refusals)
            warnings.warn(f"{op.kernel} refuses a {named} {name!r}, which it writes ({type(error).__name__}: "
                          f"{first}): a refusal, not a wrong write, so the layout tier keeps {name!r} contiguous "
                          f"there; declare `contiguous: [{name}]` in {op.field} of opgen.yaml to make it the op's "
                          "contract (the fake and the registration then check it)", stacklevel=3)
    return found



def _strided_failure(op: Op, label: str, strided: Call, dense: Call, error: Exception) -> str:
    """The kernel raised on a layout: find the one argument to blame, and say both fixes."""
    for name in strided:
        one = {**dense, name: strided[name]}
        try:
            op(clone(one) if name in op.written else one)
        except Exception:  # noqa: BLE001  (this argument alone makes it fail)
            fix = ("write through a contiguous copy and copy_ it back (the caller's tensor must be written)"
                   if name in op.written else f"declare `contiguous: [{name}]` in {op.field} so that the generated "
                   "registration passes it contiguous")
            return (f"{op.kernel} fails on a {label} {name!r} ({type(error).__name__}: {error}): make the kernel take "
                    f"any strides (e.g. .reshape instead of .view), or {fix}")
    return f"{op.kernel} fails on {label} inputs: {type(error).__name__}: {error}"



def _significant_strides(t: torch.Tensor) -> tuple:
    return tuple(stride if size > 1 else None for size, stride in zip(t.shape, t.stride(), strict=True))



def _assert_fake_strides(op: Op, label: str, call: Call, actual) -> None:
    """The fake function's output strides on these inputs are the kernel's (what torch.compile plans with); a
    data-dependent output size has no strides to compare before it runs."""
    if op.dynamic:
        return
    with FakeTensorMode() as mode:
        fakes = tensor_map(mode.from_tensor, call)
        predicted = op(fakes)
    for index, (fake, real) in enumerate(zip(tensors(predicted), tensors(actual), strict=True)):
        if fake.numel() and _significant_strides(fake) != _significant_strides(real):
            where = (f"opgen.yaml: {op.output_field(index)}: on {label} inputs the fake function gives strides "
                     f"{fake.stride()}, the CPU kernel ({op.kernel}) returns {real.stride()}")
            if real.is_contiguous() and not fake.is_contiguous():  # `like:` on an op that does not keep layouts
                fix = ("the spec gives it an input's layout (`like:`), the kernel a contiguous tensor, as ops that do "
                       "not compute element by element (a softmax, a norm, a matmul) return: declare its shape and "
                       "dtype instead (`{shape: \"x.shape\", dtype: x}` for `like: x`), which is contiguous; or make "
                       "the kernel keep the input's layout")
            else:
                fix = ("either declare the layout in the spec (`like: <input>` keeps that input's strides; without it "
                       "the output is contiguous) or make the kernel return the declared layout (.contiguous())")
            raise CheckFailed(f"{where}: {fix}", "fake-wrong-strides")
