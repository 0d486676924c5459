"""Two calls of an op that differ only in tensor sizes (one graph must serve both under `dynamic=True`): the one
rule the generated tests' `compiles_once_for_two_sizes` / `capture_limit` tiers (through opgen/render/examples.py)
and `opgen check`'s capture_limit rung (opgen/check/worker.py) choose them by. Torch-free: it reads the spec's
example values (TensorValue: random with a shape, or exact values)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .model import TensorValue


@dataclass(frozen=True)
class TwoSizeCalls:
    """Two of the given calls (`pair`), or the first one with its last size `last` doubled (`doubled`)."""

    pair: tuple[int, int] | None = None
    doubled: dict | None = None
    last: int | None = None


def choose_two_sizes(calls: Sequence[dict]) -> TwoSizeCalls | None:
    """Two calls that differ only in tensor sizes (the same dtypes, ranks and scalars; no differing size 0 or 1, which
    torch.compile specialises), else the first with the last size D of its highest-rank random tensor (else of an
    exact one) doubled in every tensor whose last size is D (exact values repeated); None when neither exists."""
    structure = [_structure(values) for values in calls]
    for a in range(len(calls)):
        for b in range(a + 1, len(calls)):
            if structure[a] == structure[b] and calls[a] != calls[b] and not _specialised(calls[a], calls[b]):
                return TwoSizeCalls(pair=(a, b))
    if not calls:
        return None
    values = calls[0]
    tensors = [t for value in values.values() for t in tensor_values(value)]
    random = [t for t in tensors if t.shape]
    first = max(random, key=lambda t: len(t.shape)) if random else next((t for t in tensors if _last(t)), None)
    last = _last(first) if first is not None else None
    if not last or last < 2:
        return None
    return TwoSizeCalls(doubled={name: _doubled(value, last) for name, value in values.items()}, last=last)


def tensor_values(value) -> list:
    """The tensors of an example value (a tensor, or a Tensor[] list of them)."""
    if isinstance(value, TensorValue):
        return [value]
    if isinstance(value, tuple):
        return [t for v in value for t in tensor_values(v)]
    return []


def _specialised(a: dict, b: dict) -> bool:
    """A size that differs between the two calls is 0 or 1 in one of them: torch.compile specialises 0 and 1, so
    the pair would compile twice whatever the fake function does."""
    for name, value in a.items():
        for x, y in zip(tensor_values(value), tensor_values(b[name]), strict=True):
            sizes = zip(_shape(x), _shape(y), strict=False)
            if any(m != n and min(m, n) <= 1 for m, n in sizes):
                return True
    return False


def _shape(tensor: TensorValue) -> tuple[int, ...]:
    if tensor.shape is not None:
        return tuple(tensor.shape)
    shape, values = [], tensor.values
    while isinstance(values, tuple):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)


def _structure(values: dict) -> tuple:
    """What must be equal for two calls to share one dynamic graph: everything but tensor sizes."""
    def key(value):
        if isinstance(value, TensorValue):
            return ("tensor", value.dtype, len(value.shape) if value.shape is not None else _rank(value.values))
        if isinstance(value, tuple):
            return tuple(key(v) for v in value)
        return value
    return tuple(sorted((name, repr(key(value))) for name, value in values.items()))


def _rank(values) -> int:
    return 1 + _rank(values[0]) if isinstance(values, tuple) and values else int(isinstance(values, tuple))


def _last(tensor: TensorValue) -> int | None:
    if tensor.shape is not None:
        return tensor.shape[-1] if tensor.shape else None
    values = tensor.values
    if not isinstance(values, tuple):
        return None
    while values and isinstance(values[0], tuple):
        values = values[0]
    return len(values)


def _doubled(value, last: int):
    if isinstance(value, tuple):
        return tuple(_doubled(v, last) for v in value)
    if not isinstance(value, TensorValue) or _last(value) != last:
        return value
    if value.shape is not None:
        return replace(value, shape=(*value.shape[:-1], 2 * last))

    def repeat(values):
        return values + values if not values or not isinstance(values[0], tuple) else tuple(repeat(v) for v in values)
    return replace(value, values=repeat(value.values))
