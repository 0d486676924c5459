"""`torch.compiler.is_compiling()` (and `torch._dynamo.is_compiling()`) in kernels and fakes: lint reads each
function as torch runs it. A kernel runs with it false (in eager mode and inside a compiled graph: torch calls
kernels after compiling); a fake runs with it true while torch.compile traces. A planted bug on the side torch
takes is found; the same code on the side it never takes is not (each with torch 2.13's verdict)."""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

torch = pytest.importorskip("torch")

KERNELS = """
    import torch

    lib = torch.library.Library("t36c_k", "DEF")
    lib.define("bump(Tensor x) -> Tensor")
    lib.define("bump_dead(Tensor x) -> Tensor")


    def bump(x):
        if not torch.compiler.is_compiling():
            x.add_(1)
        return x + 0


    def bump_dead(x):
        if torch.compiler.is_compiling():
            x.add_(1)
        return x + 0


    lib.impl("bump", bump, "CPU")
    lib.impl("bump_dead", bump_dead, "CPU")


    @torch.library.register_fake("t36c_k::bump")
    def _(x):
        return torch.empty_like(x)


    @torch.library.register_fake("t36c_k::bump_dead")
    def _(x):
        return torch.empty_like(x)
"""
FAKES = """
    import torch
    from torch._dynamo import is_compiling


    @torch.library.custom_op("t36c_f::rows", mutates_args=())
    def rows(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:n].clone()


    @rows.register_fake
    def _(x, n):
        if is_compiling():
            n = int(x.sum().item())
        return x.new_empty(n, *x.shape[1:])


    @torch.library.custom_op("t36c_f::rows_eager_check", mutates_args=())
    def rows_eager_check(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[:n].clone()


    @rows_eager_check.register_fake
    def _(x, n):
        if not is_compiling():
            torch._check(x.sum().item() >= 0)
        return x.new_empty(n, *x.shape[1:])
"""


def _lint(root: Path, name: str, text: str) -> tuple[Path, list[tuple[int, str]]]:
    path = root / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    result = lint_paths([str(path)], LintConfig(root=str(root)))
    assert not result.internal_errors
    return path, sorted((d.line, d.code) for d in result.diagnostics)


def test_a_kernel_is_read_with_is_compiling_false(tmp_path):
    path, found = _lint(tmp_path, "kernels.py", KERNELS)
    assert found == [(10, "OPG301")]  # bump's write runs; bump_dead's never does
    runpy.run_path(str(path))
    for compiled in (False, True):
        call = torch.compile(torch.ops.t36c_k.bump_dead, backend="aot_eager") if compiled else torch.ops.t36c_k.bump_dead
        x = torch.zeros(3)
        call(x)
        assert torch.equal(x, torch.zeros(3)), "a kernel ran its is_compiling() branch"
    x = torch.zeros(3)
    torch.compile(torch.ops.t36c_k.bump, backend="aot_eager")(x)
    assert torch.equal(x, torch.ones(3)), "the compiled graph's kernel runs with is_compiling() false"


def test_a_fake_is_read_as_torch_compile_runs_it(tmp_path):
    path, found = _lint(tmp_path, "fakes.py", FAKES)
    assert found == [(13, "OPG302")]  # the data read torch.compile runs; not the eager-only check
    runpy.run_path(str(path))
    x = torch.ones(4, 2)
    with pytest.raises(Exception, match="data-dependent|DataDependent|item|Could not guard|unbacked"):
        torch.compile(lambda t: torch.ops.t36c_f.rows(t, 2), fullgraph=True, backend="eager")(x)
    compiled = torch.compile(lambda t: torch.ops.t36c_f.rows_eager_check(t, 2), fullgraph=True, backend="eager")
    assert compiled(x).shape == (2, 2)
