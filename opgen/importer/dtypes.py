"""Each output's dtype rule, from the package's fake run with the floating inputs in each dtype the op takes: the
dtype of one input (`x.dtype`), of two promoted (`promote(x, w)`), or a fixed one (`float32`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

FLOATING = (torch.float16, torch.bfloat16, torch.float32)


def trials(call: dict) -> list[dict]:
    """The call as given, with every floating input in each dtype, then with one floating input moved at a time."""
    floating = [name for name, value in call.items() if any(t.is_floating_point() for t in _tensors(value))]
    found = [call]
    found += [_retyped(call, floating, dtype) for dtype in FLOATING]
    found += [_retyped(call, [name], dtype) for name in floating for dtype in FLOATING
              if dtype != _tensors(call[name])[0].dtype]
    return found


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return []


def _retyped(call: dict, names: list[str], dtype: torch.dtype) -> dict:
    def retyped(value):
        if isinstance(value, torch.Tensor):
            return value.to(dtype) if value.is_floating_point() else value
        return [retyped(v) for v in value]
    return {name: retyped(value) if name in names else value for name, value in call.items()}


def input_dtypes(call: dict) -> dict:
    """{"x": dtype, "xs[0]": dtype}: what a dtype rule may name."""
    found = {}
    for name, value in call.items():
        if isinstance(value, torch.Tensor):
            found[name] = value.dtype
        elif _tensors(value):
            found[f"{name}[0]"] = value[0].dtype
    return found


def dtype_rules(run: Callable[[dict], list], call: dict, count: int) -> list[tuple[str | None, str]]:
    """Per output, (its dtype rule or None, the reason when None). `run` gives the fake's output tensors."""
    seen: list[tuple[dict, list]] = []
    for trial in trials(call):
        try:
            outputs = run(trial)
        except Exception:  # noqa: BLE001, S112  (a dtype the fake refuses: the op does not take it)
            continue
        seen.append((input_dtypes(trial), [getattr(out, "dtype", None) for out in outputs]))
    if not seen:
        return [(None, "the fake refused every dtype tried")] * count
    return [_rule([(inputs, outs[index]) for inputs, outs in seen if index < len(outs)]) for index in range(count)]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _rule(seen: list[tuple[dict, torch.dtype]]) -> tuple[str | None, str]:
    names = list(seen[0][0])
    results = {out for _, out in seen}
    followed = [name for name in names if all(inputs.get(name) == out for inputs, out in seen)]
    floating = [name for name in followed if seen[0][0][name].is_floating_point]
    if len(results) > 1 or (floating and len(results) == 1 and any(
            seen[0][0][n].is_floating_point for n in names) and _never_moved(seen, floating[0])):
        if floating or followed:
            return f"{(floating or followed)[0]}.dtype", ""
        for first in names:
            for second in names[names.index(first) + 1:]:
                if all(torch.promote_types(inputs[first], inputs[second]) == out for inputs, out in seen
                       if first in inputs and second in inputs):
                    return f"promote({first}, {second})", ""
        return None, "the output dtype follows no input dtype (nor two promoted) over the dtypes tried"
    (only,) = results
    if only is None:
        return None, "the fake returned no tensor there"
    return dtype_name(only), ""


def _never_moved(seen: list[tuple[dict, torch.dtype]], name: str) -> bool:
    """The fake took `name` in one dtype only: a fixed output dtype and `name.dtype` cannot be told apart; the
    input's is the likelier reading."""
    return len({inputs[name] for inputs, _ in seen}) == 1
