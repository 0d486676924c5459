"""torch.library.opcheck's `test_schema` for a call holding float8 tensors (a quant kernel's `Tensor(a!)` result):
torch's SchemaCheckMode compares every argument before and after the call with `torch.allclose`, which CPU torch does
not implement for float8 (`"mul_cpu_reduced_float" not implemented for 'Float8_e4m3fn'`, torch 2.6 to 2.15 alike:
`torch_compat.schema_check_compares_float8`), so opcheck raises on a correct kernel. The same questions are asked
here, values compared bit for bit (float8 viewed as uint8): no argument the schema does not mark written changes (its
values, strides or memory), and no output is an argument's memory or another output's where the schema declares no
alias (`aliasing.aliased_outputs`).
"""

from __future__ import annotations

import torch

from . import torch_compat
from .aliasing import ALIAS_FIX, aliased_outputs
from .failures import CheckFailed
from .op import Call, Op
from .values import clone, float8, tensors

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}



def needs_own_schema_check(call: Call) -> bool:
    """opcheck's test_schema cannot compare this call's values (a float8 tensor, on a torch that cannot)."""
    return any(float8(t) for t in tensors(call)) and not torch_compat.schema_check_compares_float8()



def _bits(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements as integers of the same size: comparing them compares bits (a NaN equals its own bits)."""
    return t.view(_BITS[t.element_size()]) if t.is_floating_point() and t.element_size() in _BITS else t



def _same_bits(before: torch.Tensor, after: torch.Tensor) -> bool:
    return before.shape == after.shape and bool((_bits(before) == _bits(after)).all())



def _place(t: torch.Tensor) -> tuple:
    """Where and how `t` lies in memory (a copy's strides may differ: an expanded tensor's are not kept)."""
    return t.untyped_storage().data_ptr(), t.storage_offset(), t.stride()



def assert_schema_holds_bitwise(op: Op, call: Call) -> None:
    """test_schema's checks on one call, bit for bit: undeclared writes, then undeclared aliasing."""
    call = clone(call)
    before = clone(call)
    places = {name: [_place(t) for t in tensors(value)] for name, value in call.items()}
    result = op(call)
    for name, value in call.items():
        if name in op.written:
            continue
        now = tensors(value)
        if (not all(_same_bits(a, b) for a, b in zip(tensors(before[name]), now, strict=True))
                or [_place(t) for t in now] != places[name]):
            raise CheckFailed(f"{op.kernel} changed argument {name!r} (compared bit for bit: opcheck's test_schema, "
                              "which torch cannot run on float8 values), but "
                              f"{op.spec('.schema')} does not mark it written: declare it `Tensor(a!) {name}`, or "
                              "make the kernel leave it alone", "undeclared-mutation")
    aliased = aliased_outputs(op, call, result)
    if aliased:
        raise CheckFailed(f"{op.kernel}: {aliased[0]}: {ALIAS_FIX}", "view-return")
