"""The older registration APIs torch 2.13 still runs (`torch._custom_ops`, `torch._custom_op.impl`,
`torch.library.impl_abstract`): lint reads them as torch runs them. Each planted case is run under torch too:
opcheck fails on it and passes on its twin, so the finding is what torch says."""

from __future__ import annotations

import textwrap

import pytest
from forked_python import run_python

NEW_STYLE_IMPORTS = "import torch\nfrom torch._custom_ops import custom_op, impl, impl_abstract\n"
OLD_STYLE_IMPORTS = "import torch\nfrom torch._custom_op.impl import custom_op\n"

# (name, source with {write} where the planted kernel writes its input, expected code)
CASES = {
    "custom_ops": NEW_STYLE_IMPORTS + textwrap.dedent("""

        @custom_op("legacy::scale")
        def scale(x: torch.Tensor, bias: torch.Tensor = None) -> torch.Tensor:
            raise NotImplementedError


        @impl("legacy::scale", device_types="cpu")
        def scale_cpu(x, bias=None):
            {write}
            return x * 2


        @impl_abstract("legacy::scale")
        def scale_fake(x, bias=None):
            return torch.empty_like(x)
    """),
    "custom_op_object": OLD_STYLE_IMPORTS + textwrap.dedent("""

        @custom_op("legacy::norm")
        def norm(x: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError


        @norm.impl("cpu")
        def norm_cpu(x):
            {write}
            return x * 2


        @norm.impl_abstract()
        def norm_fake(x):
            return torch.empty_like(x)
    """),
    "library_impl_abstract": textwrap.dedent("""\
        import torch

        torch.library.define("legacy::shift", "(Tensor x) -> Tensor")


        @torch.library.impl("legacy::shift", "cpu")
        def shift_cpu(x):
            {write}
            return x * 2


        torch.library.impl_abstract(qualname="legacy::shift", func=lambda x: torch.empty_like(x))
    """),
}


def _write(tmp_path, name: str, planted: bool):
    path = tmp_path / ("planted" if planted else "twin") / f"{name}_ops.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(CASES[name].format(write="x.add_(1)" if planted else "pass"), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_older_api_kernel_writing_its_input_is_an_undeclared_write(tmp_path, run_opgen, name):
    planted = run_opgen("lint", str(_write(tmp_path, name, True)))
    assert "OPG301" in planted.stdout and "calls .add_() on 'x'" in planted.stdout, planted.stdout
    assert "OPG208" not in planted.stdout, planted.stdout  # the older fake registration is read
    twin = run_opgen("lint", str(_write(tmp_path, name, False)))
    assert twin.returncode == 0, twin.stdout


@pytest.mark.slow  # torch imported six times
@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_runs_the_older_api_and_opcheck_agrees(tmp_path, name):
    pytest.importorskip("torch")
    for planted in (True, False):
        path = _write(tmp_path, name, planted)
        op = name.split("_")[0]
        script = textwrap.dedent(f"""\
            import sys, warnings
            warnings.simplefilter("ignore")
            sys.path.insert(0, {str(path.parent)!r})
            import torch
            import {path.stem}
            op = next(getattr(torch.ops.legacy, n) for n in ("scale", "norm", "shift") if hasattr(torch.ops.legacy, n))
            torch.library.opcheck(op.default, (torch.ones(3),))
        """)
        ran = run_python(["-c", script], timeout=300)
        if planted:
            assert "is not defined as mutable but was mutated" in ran.stderr, (op, ran.stderr[-2000:])
        else:
            assert ran.returncode == 0, (op, ran.stderr[-2000:])


def test_the_older_custom_op_infers_the_schema_of_its_prototype(tmp_path, run_opgen):
    # Planted: the fake returns its input, which the inferred schema (functional, as torch infers it with
    # mutates_args=()) does not allow: OPG303 (an unreadable schema would have kept every schema rule quiet).
    source = CASES["custom_ops"].format(write="pass").replace("return torch.empty_like(x)", "return x")
    path = tmp_path / "ops.py"
    path.write_text(source, encoding="utf-8")
    found = run_opgen("lint", str(path))
    assert "OPG303 the fake of legacy::scale returns its input 'x'" in found.stdout, found.stdout
