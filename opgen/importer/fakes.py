"""The package's fake (Meta) function run on fake tensors of static sizes, and its errors said in one line."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..check.worker import _error_info


def run_fake(overload, call: dict) -> list:
    """The fake's outputs on `call` (static sizes), one entry per return."""
    with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode:  # a ShapeEnv: dynamic sizes
        fake = {name: _map(lambda t: mode.from_tensor(t, static_shapes=True), value) for name, value in call.items()}
        return returns(overload, overload(**fake)), fake


def raised(what: str, error: BaseException) -> str:
    info = _error_info(error)
    message = info["message"].strip().splitlines()[0] if info["message"].strip() else ""
    return f"{what}: {info['type']}: {message[:200]}" + (f" ({info['where']})" if info.get("where") else "")


def returns(overload, result) -> list:
    if len(overload._schema.returns) == 1:
        return [result]
    return list(result) if isinstance(result, (tuple, list)) else []


def _map(fn, value):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return [_map(fn, v) for v in value]
    return value
