"""OPG311 (tensor-truth-test): `if bias:` on a tensor argument is bool() of its values, not "was it given". Each
planted case is what lint says and what torch 2.13 does with it (the oracle); each twin is the same code on an
argument whose truth is what it means (bool, int, a tensor list) or the `is not None` test, and stays quiet.
Every op lives in its own `t311_*` namespace (the registrations stay in this process)."""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

torch = pytest.importorskip("torch")

LIBRARY_KERNEL = """
    import torch

    lib = torch.library.Library("t311_lib", "DEF")
    lib.define("linear(Tensor x, Tensor w, Tensor? bias=None) -> Tensor")


    def linear(x, w, bias=None):
        y = x @ w.t()
        if bias:
            y = y + bias
        return y


    lib.impl("linear", linear, "CPU")


    @torch.library.register_fake("t311_lib::linear")
    def _(x, w, bias=None):
        return x.new_empty(x.shape[0], w.shape[0])
"""
CUSTOM_OP_AND_FAKE = """
    from typing import Optional

    import torch


    @torch.library.custom_op("t311_co::scale", mutates_args=())
    def scale(x: torch.Tensor, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        return x * weight if weight is not None else x.clone()


    @scale.register_fake
    def _(x, weight=None):
        out = torch.empty_like(x)
        return out if not weight else out * 1
"""
NOT_TENSORS = """
    from typing import Optional

    import torch


    @torch.library.custom_op("t311_ok::linear", mutates_args=())
    def linear(x: torch.Tensor, w: torch.Tensor, bias: bool = False, relu: int = 0,
               extra: Optional[torch.Tensor] = None) -> torch.Tensor:
        y = x @ w.t()
        if bias and relu:
            y = y + 1
        if extra is not None:
            y = y + extra
        return y


    @linear.register_fake
    def _(x, w, bias=False, relu=0, extra=None):
        return x.new_empty(x.shape[0], w.shape[0]) if bias or not relu else x.new_empty(x.shape[0], w.shape[0])


    @torch.library.custom_op("t311_ok::total", mutates_args=())
    def total(xs: list[torch.Tensor]) -> torch.Tensor:
        if not xs:
            raise ValueError("no tensors")
        return torch.stack(xs).sum(0)


    @total.register_fake
    def _(xs):
        return torch.empty_like(xs[0])
"""


def _write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _lint(root: Path, path: Path) -> list[tuple[int, str]]:
    result = lint_paths([str(path)], LintConfig(root=str(root)))
    assert not result.internal_errors
    return sorted((d.line, d.code) for d in result.diagnostics)


def test_a_library_kernel_testing_an_optional_tensor_is_reported_and_torch_refuses_it(tmp_path):
    path = _write(tmp_path, "lib_ops.py", LIBRARY_KERNEL)
    assert _lint(tmp_path, path) == [(9, "OPG311")]
    runpy.run_path(str(path))
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        torch.ops.t311_lib.linear(x, w, torch.ones(4))
    # one element: the branch is taken by its value, a zero bias counts as none (here harmlessly)
    assert torch.equal(torch.ops.t311_lib.linear(x, w, torch.zeros(1)), x @ w.t())


def test_a_fake_testing_an_inferred_optional_tensor_is_reported(tmp_path):
    """`weight: Optional[torch.Tensor] = None` is `Tensor? weight=None` to torch: the fake's `not weight` is
    bool() of a FakeTensor, which torch.compile cannot decide while tracing."""
    path = _write(tmp_path, "co_ops.py", CUSTOM_OP_AND_FAKE)
    assert _lint(tmp_path, path) == [(14, "OPG311")]
    runpy.run_path(str(path))
    with pytest.raises(RuntimeError, match="more than one value is ambiguous|data-dependent|Could not guard"):
        torch.compile(torch.ops.t311_co.scale, fullgraph=True, backend="eager")(torch.ones(3), torch.ones(3))


def test_bool_int_and_list_arguments_and_is_not_none_are_quiet(tmp_path):
    path = _write(tmp_path, "ok_ops.py", NOT_TENSORS)
    assert _lint(tmp_path, path) == []
    runpy.run_path(str(path))
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    assert torch.equal(torch.ops.t311_ok.linear(x, w, True, 1), x @ w.t() + 1)
    assert torch.equal(torch.ops.t311_ok.total([x, x]), 2 * x)
