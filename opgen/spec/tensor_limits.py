"""What an example tensor may be: the generated tests build each one with torch (`torch.tensor(values, dtype=)`
or random values of a shape), many times over; a tensor torch cannot build would fail every test, so the spec
is refused where it gives it. The bounds follow torch where torch has one; the size bound is opgen's.
"""

from __future__ import annotations

import math

# torch's: reductions and permutations refuse tensors of more dims ("only tensors with up to 64 dims").
MAX_DIMS = 64
# opgen's: the tests run every example over dtypes, seeds, layouts and compiled backends, and hold a few dozen
# tensors of its size at once (measured on torch 2.13, CPU: the generated tests of one op peak at 409 MiB RSS with a
# [2, 3] example, 902 MiB with 1 Mi float32 elements, 5.7 GiB with 16 Mi). 1 Mi elements is a 4 MiB float32 tensor.
MAX_ELEMENTS = 1 << 20
# dtypes torch cannot fill with values or random numbers (quantized, bit-packed, sub-byte): fine in a dtype
# rule, impossible as an example input
UNFILLABLE = frozenset({
    "float4_e2m1fn_x2", "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2",
    "bits8", "bits16", *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)),
})
# The values torch.tensor(..., dtype=) accepts for an integer dtype: (ints, floats); measured on torch 2.13
INTEGER_RANGES = {
    "int8": ((-(2**7), 2**7 - 1), (-(2**7), 2**7 - 1)),
    "int16": ((-(2**15), 2**15 - 1), (-(2**15), 2**15 - 1)),
    "int32": ((-(2**31), 2**31 - 1), (-(2**31), 2**31 - 1)),
    "int64": ((-(2**63), 2**63 - 1), (-(2**63), 2**63 - 1)),
    "uint8": ((-(2**8 - 1), 2**8 - 1), (0, 2**8 - 1)),
    "uint16": ((-(2**16 - 1), 2**16 - 1), (0, 2**16 - 1)),
    "uint32": ((-(2**32 - 1), 2**32 - 1), (0, 2**32 - 1)),
    "uint64": ((0, 2**64 - 1), None),  # torch.tensor makes no uint64 tensor from a float at all
}


def dtype_problem(dtype: str) -> tuple[str, str] | None:
    if dtype in UNFILLABLE:
        return (f"an example tensor cannot be of dtype {dtype}: torch can neither fill it with values nor with "
                "random numbers"), "give the example a dtype the kernel converts from (e.g. uint8 or int8)"
    return None


def shape_problem(shape: tuple[int, ...]) -> tuple[str, str] | None:
    """(why, hint) when the generated tests cannot make a tensor of `shape`."""
    if len(shape) > MAX_DIMS:
        return (f"the shape has {len(shape)} dims; torch handles tensors of up to {MAX_DIMS}",
                "use fewer dims (the tests also permute and reduce each example)")
    numel = math.prod(shape)
    if numel > MAX_ELEMENTS or any(size > MAX_ELEMENTS for size in shape):
        return (f"the shape {_short(shape)} has {numel:,} elements; opgen's examples have at most {MAX_ELEMENTS:,}",
                ("the generated tests run every example over dtypes, seeds and layouts: use small sizes (they show "
                "a bug as well as large ones)"))
    return None


def values_problem(values, dtype: str) -> tuple[str, str] | None:
    """(why, hint) when torch.tensor(values, dtype=) fails: ragged lists, too many dims or elements, a number out
    of the dtype's range, nan or inf in an integer tensor. `values`: nested tuples of numbers."""
    shape = _rectangular(values)
    if shape is None:
        return ("`values` must be a rectangular (nested) list of numbers: every row of a level has the same length",
                "e.g. [[1.0, 2.0], [3.0, 4.0]]")
    problem = shape_problem(shape)
    if problem is not None:
        return problem
    ranges = INTEGER_RANGES.get(dtype)
    floating = dtype.startswith(("float", "bfloat", "complex"))
    for number in _flat(values):
        if isinstance(number, bool):
            continue
        if ranges is not None:
            if isinstance(number, float) and not math.isfinite(number):
                return f"{number} cannot be a {dtype} value", "nan and inf exist in floating dtypes only"
            if ranges[isinstance(number, float)] is None:
                return f"{number} is a float: torch.tensor makes {dtype} tensors from integers only", \
                    f"write {int(number)}" if number.is_integer() else "write integers"
            low, high = ranges[isinstance(number, float)]
            if not low <= number <= high:
                return (f"{_short_number(number)} does not fit in {dtype} (torch.tensor accepts {low}..{high})",
                        "give a value in range, or a wider dtype")
        elif floating and isinstance(number, int) and abs(number) > 2**1023:
            return f"{_short_number(number)} is beyond every floating dtype", "write a float such as 1e300 or .inf"
    return None


def _rectangular(values) -> tuple[int, ...] | None:
    """The shape of nested tuples of numbers (() for a number), None when ragged (found without recursion)."""
    shape: list[int] = []
    level = [values]
    while True:
        if all(not isinstance(item, tuple) for item in level):
            return tuple(shape)
        if not all(isinstance(item, tuple) for item in level) or len({len(item) for item in level}) != 1:
            return None
        shape.append(len(level[0]))
        level = [child for item in level for child in item]
        if not level:
            return tuple(shape)


def _flat(values):
    pending = [values]
    while pending:
        item = pending.pop()
        if isinstance(item, tuple):
            pending.extend(item)
        else:
            yield item


def _short(shape: tuple[int, ...]) -> str:
    text = str(list(shape))
    return text if len(text) <= 60 else text[:57] + "..."


def _short_number(number) -> str:
    text = repr(number)
    return text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} digits)"
