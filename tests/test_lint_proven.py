"""Each class of false finding seen on code never linted before, fixed at its root: a planted case the rule
must still report and a correct twin it must pass, run through the real command."""

from __future__ import annotations

import textwrap

import pytest

HEAD = "import torch\n\n\n"

# class -> (code, planted source, twin source)
CASES = {
    # custom_op("ns::conv2d.padding") defines that overload; register_fake of the same name is its fake
    "dotted-custom-op-name": ("OPG208", """
        @torch.library.custom_op("t4::conv2d.padding", mutates_args=())
        def conv2d_padding(x: torch.Tensor) -> torch.Tensor:
            return x.clone()


        @torch.library.register_fake("t4::conv2d")
        def _(x):
            return torch.empty_like(x)
    """, """
        @torch.library.custom_op("t4::conv2d.padding", mutates_args=())
        def conv2d_padding(x: torch.Tensor) -> torch.Tensor:
            return x.clone()


        @torch.library.register_fake("t4::conv2d.padding")
        def _(x):
            return torch.empty_like(x)
    """),
    # a placeholder body (defined so that code naming torch.ops._C.<op> imports) does nothing to lose
    "placeholder-body": ("OPG104", """
        @torch.library.custom_op("t4::touch", mutates_args=())
        def touch(x: torch.Tensor) -> None:
            torch.ops.t4_native.touch(x)
    """, """
        @torch.library.custom_op("t4::touch", mutates_args=())
        def touch(x: torch.Tensor) -> None:
            \"\"\"A stand-in: the real op is registered by the C++ extension.\"\"\"
            pass


        @torch.library.custom_op("t4::touch2", mutates_args=())
        def touch2(x: torch.Tensor) -> None:
            raise NotImplementedError("needs the CUDA extension")


        @torch.library.custom_op("t4::touch3", mutates_args=())
        def touch3(x: torch.Tensor) -> None:
            ...
    """),
    # a kernel making its output with torch.tensor(...) has it on the default device: so may the fake
    "default-device-kernel": ("OPG304", """
        @torch.library.custom_op("t4::counts", mutates_args=(), device_types="cuda")
        def counts(x: torch.Tensor) -> torch.Tensor:
            return torch.full((1,), x.shape[0], dtype=torch.int64, device=x.device)


        @counts.register_fake
        def _(x):
            return torch.empty(1, dtype=torch.int64)
    """, """
        @torch.library.custom_op("t4::counts", mutates_args=(), device_types="cuda")
        def counts(x: torch.Tensor) -> torch.Tensor:
            return torch.tensor([x.shape[0]], dtype=torch.int64)


        @counts.register_fake
        def _(x):
            return torch.empty(1, dtype=torch.int64)
    """),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_planted_case_is_reported_and_its_twin_is_not(tmp_path, run_opgen, name):
    code, planted, twin = CASES[name]
    for kind, source in (("planted", planted), ("twin", twin)):
        path = tmp_path / kind / "ops.py"
        path.parent.mkdir()
        path.write_text(HEAD + textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
        found = run_opgen("lint", "--select", code, str(path))
        if kind == "planted":
            assert code in found.stdout, (name, found.stdout)
        else:
            assert found.returncode == 0, (name, found.stdout)
