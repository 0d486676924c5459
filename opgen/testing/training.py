"""Fusion tier: training through the fused op runs its backward, gradients equal eager's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch._functorch.aot_autograd import make_boxed_func

from .capture import npugraph_ex_cpu
from .failures import CheckFailed, skip
from .fusion import (
    FusedGraphs,
    _fusion_backend,
    _fusion_model,
    _route_unavailable,
    _snapshots,
    _split,
    fusion_call,
    fusion_refusal,
)
from .layouts import _layout_fix, _layout_problem
from .non_contiguous import layouts
from .op import Call, Op
from .values import mismatch, tensors


def _strict_backward(gm: torch.fx.GraphModule, example_inputs) -> Callable:
    """A backward that checks its inputs' sizes and strides against those it was traced with, as Inductor's and
    npugraph_ex's compiled graphs do (assert_size_stride): a saved forward output laid out otherwise fails."""
    expected = [(tuple(t.shape), tuple(t.stride())) if isinstance(t, torch.Tensor) else None for t in example_inputs]

    def run(*args):
        for index, (arg, want) in enumerate(zip(args, expected, strict=True)):
            if want is not None and isinstance(arg, torch.Tensor) and (tuple(arg.shape), tuple(arg.stride())) != want:
                raise AssertionError(f"backward input {index}: expected size {want[0]}, stride {want[1]}, got size "
                                     f"{tuple(arg.shape)}, stride {tuple(arg.stride())}")
        return gm(*args)
    return make_boxed_func(run)



def _loss_model(fusion, closure: Call) -> Callable:
    """The composite as a model trains it: its floating outputs squared and summed into one loss."""
    model = _fusion_model(fusion, closure)

    def loss(**tensor_args):
        return sum((t.float() ** 2).sum() for t in tensors(model(**tensor_args)) if t.is_floating_point())
    return loss



def _trainable(op: Op, fusion, call: Call) -> Call | None:
    """The call's tensors in the transposed layout (q and k are transposed views in attention) where the fusion
    applies to it (else as they are), its first floating
    input taking a gradient (the activation: a norm's x, attention's q, not a weight or cos/sin, whose gradients
    would make the backward save values inside the composite); None when the op writes buffers or reads no float."""
    if op.written:
        return None
    strided = next((changed for label, changed, _ in layouts(op, call) if label == "transposed"), call)
    tensor_args = _split(strided if not fusion_refusal(fusion, strided) else call)[0]
    first = next((name for name in fusion.tensors if tensor_args[name].is_floating_point()), None)
    if first is None:
        return None
    return {name: t.detach().clone().requires_grad_(name == first) for name, t in tensor_args.items()}



def assert_fusion_trains(op: Op, fusion, register: Callable, make_call: Callable[[int], Call], route: str) -> None:
    """The composite trained under `route` (npugraph_ex's backend, or Inductor's pattern pass with a backward that
    checks strides as Inductor's does), its inputs transposed: where the op replaces the composite in the forward
    graph, the backward (compiled for the composite's outputs) runs and the gradients equal eager's."""
    call = fusion_call(fusion, make_call(0))
    refusal = fusion_refusal(fusion, call)
    reason = _route_unavailable(route, fusion) or (refusal and f"{op.field}.examples[0]: {refusal}")
    trainable = None if reason else _trainable(op, fusion, call)
    if reason or trainable is None:
        skip(reason or f"{op.qualname} writes buffers or takes no floating input: no backward to run through it")
    model = _loss_model(fusion, _split(call)[1])
    eager = {name: t.detach().clone().requires_grad_(t.requires_grad) for name, t in trainable.items()}
    model(**eager).backward()
    seen = FusedGraphs()
    torch.compiler.reset()
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(npugraph_ex_cpu().Session()) if route == "npugraph_ex" else None
        backend = _fusion_backend(route, register, *_snapshots(fusion, seen), session, bw_compiler=_strict_backward)
        try:
            model_compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
            model_compiled(**trainable).backward()
        except Exception as error:  # the backward refusing the fused forward's outputs: a finding
            if not (seen.after and seen.after[0]["op"]):
                raise
            layout = _layout_problem(op, fusion, {**call, **{n: t.detach() for n, t in trainable.items()}})
            raise CheckFailed(f"{fusion.field} under {route}: training through {op.qualname} in place of the composite "
                              f"fails, {type(error).__name__}: {str(error).splitlines()[0]}"
                              + (f"; {layout}; " + _layout_fix(op, fusion) if layout else ""),
                              "fusion-changes-layout" if layout else "fusion-breaks-training") from error
    if not seen.after or not seen.after[0]["op"]:
        skip(f"{fusion.field} does not fire in the training graph under {route} (the backward saves values inside the "
             "composite, which the pattern then cannot replace): nothing to check")
    for name, t in trainable.items():
        if t.requires_grad:
            problem = mismatch(t.grad, eager[name].grad, op.tolerance(t.dtype))
            if problem:
                raise CheckFailed(f"{fusion.field} under {route}: the gradient of {name!r} through {op.qualname} "
                                  f"differs from eager's through the composite: {problem}", "fusion-breaks-training")
