"""Fusion tier: the op keeps the output layouts (strides) of the composite it replaces.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .failures import CheckFailed, skip
from .fusion import fusion_call, fusion_refusal
from .non_contiguous import _significant_strides, layouts
from .op import Call, Op
from .oracle import _REFUSED, _reference_result
from .values import clone, tensor_map, tensors


def _sliced(t: torch.Tensor) -> torch.Tensor:
    """The same values in every other column of a wider tensor (not dense: a slice of a model's fused projection)."""
    if not t.dim() or not t.numel():
        return t
    wide = t.new_zeros((*t.shape[:-1], 2 * t.shape[-1]))
    wide[..., ::2] = t
    return wide[..., ::2]



def fusion_layouts(op: Op, call: Call) -> list[tuple[str, Call]]:
    """(label, call): the call as it is, in each layout of `layouts`, and sliced (its read inputs every other column
    of a wider tensor)."""
    sliced = {name: value if name in op.written else tensor_map(_sliced, value) for name, value in call.items()}
    return [("contiguous", call), *((label, strided) for label, strided, _ in layouts(op, call)), ("sliced", sliced)]



def _layout_problem(op: Op, fusion, call: Call) -> str | None:
    """How the op's outputs (its fake function's, which a compiled graph plans with) are laid out otherwise than the
    composite's on `call`; None when they agree (or the composite refuses the call)."""
    expected = _reference_result(lambda c: fusion.composite(**c), clone(call))
    if expected is _REFUSED or op.dynamic:
        return None
    with FakeTensorMode() as mode:
        predicted = op(tensor_map(mode.from_tensor, call))
    for index, (fake, real) in enumerate(zip(tensors(predicted), tensors(expected), strict=True)):
        if fake.numel() and _significant_strides(fake) != _significant_strides(real):
            return (f"{op.output_field(index)}: the op's fake gives strides {fake.stride()}, the composite "
                    f"{real.stride()} (shape {tuple(real.shape)})")
    return None



def _layout_fix(op: Op, fusion) -> str:
    return (f"declare the layout the composite keeps in opgen.yaml (`like: <input>` in {op.field}.outputs keeps that "
            f"input's strides; without it an output is contiguous), or keep the fusion to the layouts the op "
            f"matches with a condition in {fusion.field}.when (e.g. \"x.is_contiguous()\")")



def assert_fusion_keeps_layouts(op: Op, fusion, examples: Callable[[int], list[Call]]) -> None:
    """Where `fusion` applies, on each example in each layout of `fusion_layouts`, the op's outputs have the strides
    the composite's outputs have: the rest of a compiled graph (a backward saved for training, a view of the
    output) was planned with the composite's, and npugraph_ex's or Inductor's checks fail on other strides."""
    checked = 0
    for number, base in enumerate(examples(0)):
        for label, call in fusion_layouts(op, fusion_call(fusion, base)):
            if fusion_refusal(fusion, call):
                continue
            checked += 1
            problem = _layout_problem(op, fusion, call)
            if problem:
                raise CheckFailed(f"{fusion.field} would replace its composite by {op.qualname} on {op.field}.examples"
                                  f"[{number}] in {label} layout, and change the layout of its outputs: {problem}; "
                                  + _layout_fix(op, fusion), "fusion-changes-layout")
    if not checked:
        skip(f"{fusion.field} applies to no example in any layout: no layout to compare")
