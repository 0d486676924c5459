"""Tier 2: the CPU kernel gives the values of `expect:` and writes exactly the arguments the schema marks written.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .aliasing import ALIAS_FIX, aliased_outputs
from .failures import CheckFailed
from .op import SENTINEL, TOLERANCES, Call, Expected, Op
from .values import _example, clone, mismatch, run, same, tensor_map, tensors


def assert_expected(op: Op, calls: Sequence[Call], expected: Sequence[Expected]) -> None:
    """`expect:` of the examples against the CPU kernel (the only check independent of the kernel)."""
    problems, results = [], {}
    for item in expected:
        if item.example not in results:
            call = clone(calls[item.example])
            results[item.example] = (run(op, call, _example(op, item.example)), call)
        result, call = results[item.example]
        actual = _named_value(op, item.name, result, call)
        where = op.spec(f".examples[{item.example}].expect.{item.name}")
        if item.element is not None:
            if not isinstance(actual, (list, tuple)) or len(actual) != item.length:
                count = f"{len(actual)} tensors" if isinstance(actual, (list, tuple)) else type(actual).__name__
                problems.append(f"{where}: {count}, the spec expects {item.length}")
                continue
            actual, where = actual[item.element], f"{where}[{item.element}]"
        default = TOLERANCES.get(getattr(actual, "dtype", None), (0.0, 0.0))
        tolerance = (default[0] if item.rtol is None else item.rtol, default[1] if item.atol is None else item.atol)
        for row, want in (item.rows.items() if item.rows is not None else [(None, item.values)]):
            part = actual
            if row is not None:
                if not isinstance(actual, torch.Tensor) or actual.dim() == 0 or not -len(actual) <= row < len(actual):
                    problems.append(f"{where}.rows.{row}: no such row (shape {tuple(getattr(actual, 'shape', ()))})")
                    continue
                part = actual[row]
            problem = mismatch(part, torch.tensor(want, dtype=torch.float64), tolerance)
            if problem:
                problems.append(where + ("" if row is None else f".rows.{row}") + ": " + problem)
    if problems:
        raise CheckFailed(f"the CPU kernel ({op.kernel}) disagrees with expected values:\n" + "\n".join(problems),
                          "wrong-values")



def _named_value(op: Op, name: str, result, call: Call):
    """An output (by name) of `result`, or an argument of `call` after it."""
    if name in op.outputs and name not in call:
        index = op.outputs.index(name)
        return result if len(op.overload._schema.returns) == 1 else result[index]
    return call[name]



def assert_writes(op: Op, calls: Sequence[Call]) -> None:
    """Every argument the schema marks written is changed on some example, judged on the caller's own data and on
    its buffer filled with SENTINEL first (so that any write shows, and a write that only rearranges the buffer's
    own values shows on real data), in its own memory (no `set_` to other storage); no other tensor argument is ever
    changed, not even and back (its version counter stays); no output shares an argument's memory where the schema
    declares no alias (aliasing)."""
    written, changed = op.written, set()
    for number, call in enumerate(calls):
        for sentinel in (True, False):
            call_copy = clone(call)
            if sentinel:
                for name in written:
                    tensor_map(lambda t: t.fill_(SENTINEL if t.dtype != torch.bool else True), call_copy[name])
            changed |= _written_in(op, number, call_copy, sentinel)
    never = [op.describe_argument(name) for name in written if name not in changed]
    if never:
        raise CheckFailed(
            f"{op.field}.schema in opgen.yaml marks {', '.join(never)} written (Tensor(a!)), but {op.kernel} changed "
            f"it on no example ({len(calls)} tried, on their own values and with the buffer filled with {SENTINEL}): "
            "the kernel misses the write, or the schema over-declares the mutation", "missing-write")



def _written_in(op: Op, number: int, call: Call, sentinel: bool) -> set[str]:
    """Run the op on `call`; the names of the written arguments it changed (an undeclared write fails)."""
    written = op.written
    before = clone(call)
    memory = {name: [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors(call[name])]
              for name in written}
    versions = {name: [t._version for t in tensors(value)] for name, value in call.items() if name not in written}
    result = run(op, call, _example(op, number, f" (written arguments filled with {SENTINEL})" if sentinel else ""))
    changed = set()
    for name, value in call.items():
        if all(same(a, b) for a, b in zip(tensors(value), tensors(before[name]), strict=True)):
            continue
        if name not in written:
            raise CheckFailed(
                f"{op.kernel} changed argument {name!r} in {op.field}.examples[{number}], but {op.field}.schema in "
                f"opgen.yaml does not mark it written: declare it `Tensor(a!) {name}`, or make the kernel leave "
                "it alone", "undeclared-mutation")
        changed.add(name)
    _assert_same_memory(op, number, call, memory, versions)
    aliased = aliased_outputs(op, call, result)  # after the writes: an undeclared write is the cause to name first
    if aliased:
        raise CheckFailed(f"{op.kernel} on {op.field}.examples[{number}]: {aliased[0]}: {ALIAS_FIX}", "view-return")
    return changed



def _assert_same_memory(op: Op, number: int, call: Call, memory: dict, versions: dict) -> None:
    for name, places in memory.items():
        now = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors(call[name])]
        if now != places:
            raise CheckFailed(f"{op.kernel} swapped the memory of {name!r} in {op.field}.examples[{number}] (set_, or "
                              "resize_ of the caller's tensor): the caller's buffer is not written, and a captured "
                              "graph keeps the old address; write into it in place", "storage-swapped")
    for name, before in versions.items():
        if [t._version for t in tensors(call[name])] != before:
            raise CheckFailed(f"{op.kernel} wrote argument {name!r} in {op.field}.examples[{number}] in place (and "
                              f"maybe restored it), but {op.field}.schema in opgen.yaml does not mark it written: "
                              f"declare it `Tensor(a!) {name}`, or compute on a copy", "undeclared-mutation")
