"""Comparing and copying the values of calls: tensors in nested outputs, mismatches with tolerances, distributions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .failures import CheckFailed
from .input_variants import at_offset
from .op import TOLERANCES, Call, Op


def tensor_map(fn: Callable[[torch.Tensor], Any], value):
    """`fn` applied to every tensor inside nested tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(tensor_map(fn, item) for item in value)
    if isinstance(value, dict):
        return {key: tensor_map(fn, item) for key, item in value.items()}
    return value



def tensors(value) -> list[torch.Tensor]:
    """Every tensor inside nested tuples, lists and dicts, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    return []



def float8(t: torch.Tensor) -> bool:
    """A floating tensor of one byte an element: float8 (a quantised buffer), which torch only casts to and from."""
    return t.is_floating_point() and t.element_size() == 1



def assert_same_results(actual, expected) -> None:
    """torch.testing.assert_close(actual, expected, equal_nan=True) over nested results, float8 tensors compared bit
    for bit (as uint8): torch 2.6 and 2.7's assert_close raise their own error ("add_stub" not implemented for
    'Float8_e4m3fn') on float8 values that differ, instead of saying where."""
    if not any(float8(t) for t in tensors(actual) + tensors(expected)):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        return
    def as_bits(value):
        return tensor_map(lambda t: t.view(torch.uint8) if float8(t) else t, value)

    torch.testing.assert_close(as_bits(actual), as_bits(expected), equal_nan=True,
                               msg=lambda message: f"{message}\n(float8 values compared as their bits, uint8)")



def clone(value):
    """A copy of every tensor in `value`; a contiguous one at a storage offset keeps its offset (the `offset` input
    variant: an unaligned view into a larger buffer)."""
    return tensor_map(_clone, value)



def _clone(t: torch.Tensor) -> torch.Tensor:
    offset = t.storage_offset()
    if not offset or not t.is_contiguous():
        return t.clone()
    return at_offset(t, offset)




def copy_into(destination, source) -> None:
    """Refill `destination` (a tensor, or a list of them; `Tensor?` entries may be None) with `source`."""
    if isinstance(destination, torch.Tensor):
        destination.copy_(source)
    elif destination is not None:
        for dst, src in zip(destination, source, strict=True):
            copy_into(dst, src)



def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, device and values without a NaN (torch.equal: one pass, no copy; the callers' full comparisons
    allocate and convert, twenty times its cost on a million values): the callers' answer when it holds."""
    if a.dtype != b.dtype or a.device != b.device:
        return False
    try:
        return torch.equal(a, b)
    except (RuntimeError, NotImplementedError):  # a dtype without equality on this torch line: the full comparison
        return False


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN."""
    if a.shape != b.shape:
        return False
    if _identical(a, b):
        return True
    equal = a == b
    if a.is_floating_point():
        equal |= a.isnan() & b.isnan()
    return bool(equal.all())



def same_values(a, b) -> bool:
    """The same tensors inside `a` and `b` (nested), shapes and values, NaN equal to NaN."""
    ta, tb = tensors(a), tensors(b)
    return len(ta) == len(tb) and all(same(x, y) for x, y in zip(ta, tb, strict=True))



def mismatch(actual, expected: torch.Tensor, tolerance: tuple | None = None) -> str | None:
    """None when `actual` is close to `expected`; else a one-line summary (never a tensor dump)."""
    if not isinstance(actual, torch.Tensor):
        return f"got {type(actual).__name__}, expected a tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if _identical(actual, expected):
        return None  # a kernel often computes exactly what its reference does
    rtol, atol = tolerance or TOLERANCES.get(actual.dtype, (0.0, 0.0))
    got, want = actual.detach().cpu().to(torch.float64), expected.detach().cpu().to(torch.float64)
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    worst = float((got - want).abs().nan_to_num(nan=float("inf")).max())
    return (f"{int(bad.sum())} of {bad.numel()} values differ ({actual.dtype}, rtol={rtol:g}, atol={atol:g}), "
            f"max abs diff {worst:.6g}, first at index {list(first)}: got {got[first].item():.6g}, "
            f"expected {want[first].item():.6g}")



RANDOM_SAMPLE = 256  # fewer values than this tell too little about a distribution: not judged



def distribution_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None when two samples of a random op look like one distribution: the same shape, means within five standard
    errors, spreads within a factor of 1.4 (loose: it catches a wrong distribution, not a subtle one). A sample of
    fewer than RANDOM_SAMPLE values is not judged."""
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    got, want = actual.detach().cpu().double().flatten(), expected.detach().cpu().double().flatten()
    if got.numel() < RANDOM_SAMPLE:
        return None
    spread = float(want.std())
    error = 5 * max(spread, float(got.std()), 1e-12) / got.numel() ** 0.5
    if abs(float(got.mean()) - float(want.mean())) > error:
        return f"mean {float(got.mean()):.6g}, not {float(want.mean()):.6g} (+- {error:.3g})"
    if spread > 0 and not 1 / 1.4 <= float(got.std()) / spread <= 1.4:
        return f"standard deviation {float(got.std()):.6g}, not {spread:.6g}"
    return None



def run(op: Op, call: Call, where: str):
    """The op on a CPU call: an error (torch's checks of custom_op included) names the kernel and the example."""
    try:
        return op(call)
    except Exception as error:
        raise CheckFailed(f"{op.kernel} on {where}: {type(error).__name__}: {error}", "kernel-raised") from error



def _example(op: Op, number: int, note: str = "") -> str:
    return f"{op.spec(f'.examples[{number}]')}{note}"


def picks_tied_values(op: Op, name: str, got, want, call: Call) -> bool:
    """Whether index tensor `name`, which `ops[i].ties` says picks along the last dim of scores (a function of the
    call's arguments), picks scores equal to those `want` picks wherever the two differ (a tie broken another way:
    torch.topk leaves that order unspecified), with no index picked twice in a row where `want` picks none twice.
    False when `name` has no `ties:` entry."""
    picked = (op.ties or {}).get(name)
    if picked is None or not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.is_floating_point() or got.is_complex() or got.dim() == 0:
        return False
    source = picked(**call).detach().cpu()
    got, want = got.detach().cpu().long(), want.detach().cpu().long()
    try:
        chosen, expected = source.gather(-1, got), source.gather(-1, want)
    except (RuntimeError, IndexError):  # out of range or shapes gather refuses: not a tie
        return False
    same = (chosen == expected) | (chosen.isnan() & expected.isnan()) if chosen.is_floating_point() else \
        chosen == expected
    return bool(same.all()) and _distinct_rows(want) <= _distinct_rows(got)


def _distinct_rows(indices: torch.Tensor) -> int:
    ordered = indices.sort(dim=-1).values
    return int((ordered.diff(dim=-1) != 0).all(dim=-1).sum()) if indices.shape[-1] > 1 else indices.numel()
