"""The derived rules against the package's fake and its CPU kernel, on the input variants the generated tests use
(opgen.testing.input_variants): where two of the three disagree, which is likelier wrong.

- the rules and the fake disagree: the rules were derived from the fake on one example, so either they do not
  generalise to this input (a derivation limit: the kernel agrees with the fake) or the fake is wrong there (the
  kernel agrees with the rules);
- the rules and the fake agree, the kernel differs: the fake is likelier wrong (a kernel runs the math; a fake is a
  hand-written guess), and the rules carry its bug;
- the fake raises on an input the kernel takes: a fake bug."""

from __future__ import annotations

import math
import numbers

import torch

from ..testing.values import clone
from . import examples
from .fakes import raised, run_fake

MOST_VARIANTS = 40
MOST_REPORTED = 6


def disagreements(overload, record: dict, found: list) -> list[dict]:
    semantics = _semantics(record)
    reported: list[dict] = []
    seen: set = set()
    for label, call in _calls(overload, found):
        kernel = _kernel(overload, call)
        try:
            fake = [_meta(v) for v in run_fake(overload, clone(call))[0]]
        except Exception as error:  # noqa: BLE001
            if kernel is not None:
                _add(reported, seen, ("fake-raised",), label, raised("the fake raises", error)
                     + ", where the package's CPU kernel takes the input", "fake bug")
            continue
        want = _want(semantics, call)
        for index, name in enumerate(record["outputs"]):
            got = fake[index] if index < len(fake) else None
            rule = want[index] if want is not None and index < len(want) else None
            ran = kernel[index] if kernel is not None and index < len(kernel) else None
            _judge(reported, seen, label, name["name"], rule, got, ran)
        if len(reported) >= MOST_REPORTED:
            break
    return reported


def _judge(reported: list, seen: set, label: str, name: str, rule, fake, kernel) -> None:
    if rule is not None and fake is not None and not _same(rule, fake):
        if kernel is not None and _same(kernel, rule):
            likelier = "fake bug"
            why = "the package's CPU kernel agrees with the derived rule"
        else:
            likelier = "derivation limit"
            why = ("the package's CPU kernel agrees with the fake" if kernel is not None else "no CPU kernel to ask") \
                + ": the rule derived on examples[0] does not hold here; edit it in the spec"
        _add(reported, seen, (name, "rule"), label, f"{name}: the derived rule gives {_show(rule)}, the fake "
             f"{_show(fake)} ({why})", likelier)
    elif fake is not None and kernel is not None and not _same(fake, kernel):
        _add(reported, seen, (name, "kernel"), label, f"{name}: the fake gives {_show(fake)}, the package's CPU kernel "
             f"{_show(kernel)}; the derived rule follows the fake: fix the fake (or write the rule from the kernel)",
             "fake bug")


def _add(reported: list, seen: set, key: tuple, label: str, message: str, likelier: str) -> None:
    if key in seen:
        return
    seen.add(key)
    reported.append({"variant": label, "message": message, "likelier": likelier})


def _calls(overload, found: list) -> list[tuple[str, dict]]:
    from ..testing import Op
    from ..testing.input_variants import variants

    def calls(seed: int) -> list[dict]:
        return [examples.make_call(example, seed) for example in found]

    try:
        return [(variant.label, variant.call) for variant in variants(Op(overload), calls)[:MOST_VARIANTS]]
    except Exception:  # noqa: BLE001  (an op the variants cannot vary: its examples alone)
        return [(f"examples[{i}]", call) for i, call in enumerate(calls(0))]


def _kernel(overload, call: dict) -> list | None:
    try:
        result = overload(**clone(call))
    except Exception:  # noqa: BLE001  (no CPU kernel, or one that refuses this input: nothing to compare with)
        return None
    values = [result] if len(overload._schema.returns) == 1 else list(result or ())
    return [_meta(v) for v in values]


def _meta(value):
    """(shape, dtype), a data-dependent size as None."""
    if isinstance(value, torch.Tensor):
        return (tuple(None if isinstance(size, torch.SymInt) else int(size) for size in value.shape), value.dtype)
    return None


def _same(a, b) -> bool:
    if a is None or b is None:
        return True
    shape_a, dtype_a = a
    shape_b, dtype_b = b
    if dtype_a != dtype_b:
        return False
    if shape_a is None or shape_b is None:
        return True
    return len(shape_a) == len(shape_b) and all(a is None or b is None or a == b for a, b in zip(shape_a, shape_b))


def _show(meta) -> str:
    shape, dtype = meta
    shown = [size if size is not None else "?" for size in shape] if shape is not None else "a data-dependent shape"
    return f"{shown} {str(dtype).removeprefix('torch.')}"


def _semantics(record: dict):
    """The tests' semantics function for the derived rules (opgen.render.fakes), or None without complete rules."""
    from ..errors import OpgenError
    from ..render.fakes import rule_code
    from ..spec.load import load_spec_text
    from .spec_text import spec_text

    try:
        spec = load_spec_text(spec_text(record["namespace"], "library", "cpu", [record], "-"), "<derived>")
    except OpgenError:
        return None
    code = rule_code(spec.ops[0], "derived")
    if not code.semantics_def:
        return None
    scope = {"torch": torch, "Number": numbers.Number, "math": math}
    exec("\n    ".join([code.semantics_def, *code.semantics_lines]), scope)  # noqa: S102  (opgen's own printed rules)
    return scope["derived_semantics"]


def _want(semantics, call: dict) -> list | None:
    if semantics is None:
        return None
    try:
        return [(tuple(int(size) for size in shape) if shape is not None else None, dtype)
                for shape, dtype in semantics(**clone(call))]
    except Exception:  # noqa: BLE001  (the rules do not apply to this input: nothing to compare)
        return None


