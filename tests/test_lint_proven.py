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
    # a branch torch never takes when it calls the kernel (only while exporting to ONNX) is not judged
    "onnx-export-branch": ("OPG308", """
        @torch.library.custom_op("t4::act", mutates_args=())
        def act(x: torch.Tensor) -> torch.Tensor:
            if x.dim() == 0:
                return x
            return x.relu()


        @act.register_fake
        def _(x):
            return torch.empty_like(x)
    """, """
        @torch.library.custom_op("t4::act", mutates_args=())
        def act(x: torch.Tensor) -> torch.Tensor:
            if torch.onnx.is_in_onnx_export():
                return x
            if not torch.jit.is_scripting():
                return x.relu()
            else:
                return x


        @act.register_fake
        def _(x):
            return torch.empty_like(x)
    """),
    # an aten op in the in-place convention writes its first argument and returns it (torch's own ops)
    "aten-in-place-op": ("OPG301", """
        @torch.library.custom_op("t4::inplace_div", mutates_args=())
        def inplace_div(x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
            div = torch.ops.aten.div.Tensor(x, other)
            copy = torch.ops.aten.copy_.default(x, div)
            return copy
    """, """
        @torch.library.custom_op("t4::inplace_div", mutates_args=("x",))
        def inplace_div(x: torch.Tensor, other: torch.Tensor) -> None:
            div = torch.ops.aten.div.Tensor(x, other)
            torch.ops.aten.copy_.default(x, div)
    """),
}

# Messages that state exactly what the code does: (code, source, the message's words)
MESSAGES = {
    "fake-missing-two-parameters": ("OPG305", """
        lib = torch.library.Library("t4", "FRAGMENT")
        lib.define("mm(Tensor x, Tensor a, Tensor b, Tensor c) -> Tensor")


        @torch.library.register_fake("t4::mm")
        def _(x, b):
            return torch.empty_like(x)
    """, "is missing parameters 'a' and 'c' (torch passes 4 arguments by position: every call raises TypeError)"),
    "fake-returns-buffer-of-void-op": ("OPG303", """
        lib = torch.library.Library("t4", "FRAGMENT")
        lib.define("fill(Tensor x, Tensor(a!) out) -> ()")


        @torch.library.impl(lib, "fill", "CUDA")
        def fill(x, out):
            out.copy_(x)


        @torch.library.register_fake("t4::fill")
        def _(x, out):
            return out
    """, "returns its input 'out', but the op returns nothing (its schema returns `()`"),
    "kernel-and-fake-return-the-out-buffer": ("OPG303", """
        lib = torch.library.Library("t4", "FRAGMENT")
        lib.define("fill(Tensor x, Tensor(a!) out) -> Tensor")


        @torch.library.impl(lib, "fill", "CUDA")
        def fill(x, out):
            out.copy_(x)
            return out


        @torch.library.register_fake("t4::fill")
        def _(x, out):
            return out
    """, ("and so does its kernel, but the schema declares no alias: compiled graphs and opcheck assume a new tensor; "
         "return a new tensor from both, or declare the alias in the schema (`Tensor(a!) out -> Tensor(a!)`)")),
}


def test_a_use_dependent_finding_is_not_reported_for_an_op_a_test_module_defines(tmp_path, run_opgen):
    # OPG208 (no fake) and a Library kernel's OPG308 (torch.compile's aliasing check) harm only compiled callers;
    # an op a test module defines may only have its schema read: reported in ops.py, not in test_ops.py.
    source = HEAD + textwrap.dedent("""\
        lib = torch.library.Library("t4", "FRAGMENT")
        lib.define("ident(Tensor x) -> Tensor")
        lib.impl("ident", lambda x: x, "CPU")
    """)
    for name in ("src/ops.py", "tests/test_ops.py"):
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(source, encoding="utf-8")
    found = run_opgen("lint", "--select", "OPG208,OPG308", str(tmp_path / "src"))
    assert "OPG208" in found.stdout and "OPG308" in found.stdout, found.stdout
    quiet = run_opgen("lint", "--select", "OPG208,OPG308", str(tmp_path / "tests"))
    assert quiet.returncode == 0, quiet.stdout


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_the_message_says_what_the_code_does(tmp_path, run_opgen, name):
    code, source, words = MESSAGES[name]
    path = tmp_path / "ops.py"
    path.write_text(HEAD + textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    found = run_opgen("lint", "--select", code, str(path))
    assert words in found.stdout, found.stdout


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
