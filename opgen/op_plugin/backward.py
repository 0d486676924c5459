"""The functions a derivatives.yaml formula calls must exist: torchnpugen pastes the formula into C++ as it is,
so `npu_x_backward(grad, ...)` naming an op that is nowhere fails only when torch_npu is compiled (or, for a
name that happens to resolve, calls something else). A called name must be an op of the spec, an op of the
checkout's op_plugin_functions.yaml, an ATen op or a helper torch's own formulas call (torchgen's
native_functions.yaml and derivatives.yaml, read as data when torchgen is installed)."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

from ..errors import OpgenError

# a call of a plain name: not a method (`grad.sum(`), not qualified (`at::x(`), not a C++ keyword or cast
_CALL = re.compile(r"(?<![\w.:>])([A-Za-z_]\w*)\s*\(")
_CPP_WORDS = {"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "sizeof", "decltype", "if", "return"}


def called_names(formula: str) -> list[tuple[str, int]]:
    """(name, 0-based offset) of each plain function call in a formula."""
    return [(m.group(1), m.start(1)) for m in _CALL.finditer(formula) if m.group(1) not in _CPP_WORDS]


def yaml_ops(text: str) -> set[str]:
    """The base names of every `func:` in an op_plugin_functions.yaml (any section)."""
    return {m.group(1).split(".")[0] for m in re.finditer(r"func:\s*['\"]?([A-Za-z_][\w.]*)\s*\(", text)}


@functools.lru_cache(maxsize=1)
def torch_names() -> frozenset[str]:
    """ATen op names and the helpers torch's own derivative formulas call (empty without torchgen)."""
    spec = importlib.util.find_spec("torchgen")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    packaged = Path(next(iter(spec.submodule_search_locations))) / "packaged"
    names: set[str] = set()
    native = packaged / "ATen" / "native" / "native_functions.yaml"
    if native.is_file():
        names |= yaml_ops(native.read_text(encoding="utf-8"))
    derivatives = packaged / "autograd" / "derivatives.yaml"
    if derivatives.is_file():
        for line in derivatives.read_text(encoding="utf-8").splitlines():
            if ":" in line and not line.lstrip().startswith(("- name:", "#")):
                names |= {name for name, _ in called_names(line.split(":", 1)[1])}
    return frozenset(names)


def check_formulas(spec, entries, checkout_ops: set[str]) -> None:
    """Refuse, at the formula's line and column in the spec, a call of a function known nowhere."""
    from .model import _Locator

    known = checkout_ops | {entry.schema.name for entry in entries} | torch_names()
    locate = None
    for op in spec.ops:
        config = op.op_plugin
        for number, (key, formula) in enumerate(config.backward if config else ()):
            for name, offset in called_names(formula):
                if name in known:
                    continue
                locate = locate or _Locator(spec)
                raise locate.formula_error(
                    op.index, number, offset, OpgenError(
                        f"{name!r} is neither an op of the spec nor of the checkout's op_plugin_functions.yaml "
                        f"(nor an ATen op or autograd helper): the backward of {op.schema.op_name} for {key} "
                        "would not compile", hint=f"add {name} to the spec (an op of its own), or call an op that "
                        "exists"))
