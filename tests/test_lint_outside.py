"""Issue 22: the false-positive and miss classes found on code opgen lint was never tuned on. Each is a
minimal reproduction written here (not copied), what opgen lint says, what torch 2.13 does with it (the
oracle), and a correct look-alike. Every op lives in its own `t22_*` namespace; processes that rename
PrivateUse1 or import two conflicting modules run in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forked_python import run_python

from opgen.lint import dispatch_keys
from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def lint(root: Path, files: dict[str, str], paths=None, select=()) -> list[tuple[str, int, str]]:
    write(root, files)
    targets = [str(root / p) for p in paths] if paths else [str(root)]
    result = lint_paths(targets, LintConfig(root=str(root)), select=select)
    assert not result.internal_errors
    return [(Path(d.path).relative_to(root).as_posix(), d.line, d.code) for d in result.diagnostics]


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_python(["-c", textwrap.dedent(code)], cwd=cwd, timeout=300)


# -- torch's own lists ---------------------------------------------------------------------------------

def test_dispatch_keys_and_device_types_are_torchs_own():
    assert set(torch._C.DispatchKey.__members__) == dispatch_keys.TORCH_KEYS
    for device_type, key in dispatch_keys.DEVICE_TYPE_KEYS.items():
        if device_type != "default":
            assert str(torch._C._dispatch_key_for_device(device_type)).split(".")[-1] == key, device_type
    assert dispatch_keys.is_backend_key("TPU") and dispatch_keys.is_backend_key("QuantizedCUDA")
    assert not dispatch_keys.is_backend_key("AutogradNPU") and not dispatch_keys.is_backend_key("BackendSelect")


# -- YAML: op references are not schemas -----------------------------------------------------------------

def test_yaml_func_entries_naming_an_op_are_references_not_schemas(tmp_path):
    found = lint(tmp_path, {"edge.yaml": """
        - func: aten::add.Tensor
          namespace: edge
          inherits: aten::add.Tensor
        - func: clone
    """, "custom_functions.yaml": """
        - func: npu_foo(Tensor self, int k=1, Tensor other) -> Tensor
        - func: npu_bar(Tensor self) -> Tensor
    """})
    # torch refuses a reference as a schema (it is none); the broken schema next to them is still reported
    for reference in ("aten::add.Tensor", "clone"):
        with pytest.raises(RuntimeError):
            torch._C.parse_schema(reference)
    with pytest.raises(RuntimeError):
        torch._C.parse_schema("npu_foo(Tensor self, int k=1, Tensor other) -> Tensor")
    assert found == [("custom_functions.yaml", 1, "OPG001")]


# -- a list without a default after a defaulted argument ---------------------------------------------------

def test_a_list_may_follow_a_defaulted_argument_as_torch_allows(tmp_path):
    accepted = "conv(Tensor x, Tensor? bias=None, int[] stride, int[] padding) -> Tensor"
    torch._C.parse_schema(accepted)
    with pytest.raises(RuntimeError, match="Non-default positional argument"):
        torch._C.parse_schema("conv(Tensor x, Tensor? bias=None, int groups) -> Tensor")
    found = lint(tmp_path, {"ops.py": f"""
        from torch.library import Library

        lib = Library("t22_list", "FRAGMENT")
        lib.define("{accepted}")
        lib.define("conv2(Tensor x, Tensor? bias=None, int groups) -> Tensor")
    """})
    assert found == [("ops.py", 5, "OPG001")]


# -- ATen's out convention in a Python define ------------------------------------------------------------

OUT_OP = """
    import torch
    from torch.library import Library

    lib = Library("{ns}", "FRAGMENT")
    lib.define("scale.out(Tensor x, float s, *, Tensor(a!) out) -> Tensor(a!)"{tags})


    def scale_out(x, s, *, out):
        out.copy_(x * s)
        return out


    lib.impl("scale.out", scale_out, "CompositeExplicitAutograd")
"""


def test_out_convention_is_not_an_aliased_return_and_opt_in_says_to_tag_it(tmp_path):
    untagged = {"ops.py": OUT_OP.format(ns="t22_out", tags="")}
    assert lint(tmp_path, untagged) == []
    assert lint(tmp_path, untagged, select=("OPG211",)) == [("ops.py", 5, "OPG211")]
    tagged = OUT_OP.format(ns="t22_out_tag", tags=", tags=(torch.Tag.out,)")
    assert lint(tmp_path, {"tagged.py": tagged}, paths=["tagged.py"], select=("OPG", "OPG211")) == []
    # torch: the untagged overload works eagerly; compiling a caller fails; tagged, the caller compiles
    done = python("""
        import runpy, torch
        kept = runpy.run_path("ops.py")  # the Library lives as long as its module's globals
        op = torch.ops.t22_out.scale.out
        out = torch.empty(3)
        assert torch.equal(op(torch.ones(3), 2.0, out=out), torch.full((3,), 2.0))
        try:
            torch.compile(lambda x, o: op(x, 2.0, out=o), backend="aot_eager", fullgraph=True)(torch.ones(3), out)
            print("compiled")
        except Exception as error:
            print("refused", "alias annotations" in str(error))
    """, tmp_path)
    assert done.stdout.split() == ["refused", "True"], done.stderr[-2000:]
    done = python("""
        import runpy, torch
        kept = runpy.run_path("tagged.py")
        op = torch.ops.t22_out_tag.scale.out
        f = torch.compile(lambda x, o: op(x, 2.0, out=o) + 1, backend="aot_eager", fullgraph=True)
        print(f(torch.ones(3), torch.empty(3)).tolist())
    """, tmp_path)
    assert done.stdout.strip() == "[3.0, 3.0, 3.0]", done.stderr[-2000:]


def test_a_return_aliasing_no_written_argument_is_still_opg102(tmp_path):
    assert lint(tmp_path, {"ops.py": """
        from torch.library import Library

        lib = Library("t22_nop", "FRAGMENT")
        lib.define("cat_nop(Tensor[] xs) -> Tensor(a!)")
    """}, select=("OPG", "OPG211")) == [("ops.py", 4, "OPG102")]


# -- OPG205 / OPG210 only where both modules can meet in one process --------------------------------------

SCRIPT = """
    from torch.library import Library

    lib = Library("t22_dup", "DEF")
    lib.define("f(Tensor x) -> Tensor")
    {main}
"""


def test_two_scripts_defining_one_namespace_are_fine_two_modules_are_not(tmp_path):
    main = 'if __name__ == "__main__":\n        print("ran")'
    scripts = {"example_1.py": SCRIPT.format(main=main), "example_2.py": SCRIPT.format(main=main)}
    assert lint(tmp_path / "s", scripts) == []
    for name in scripts:  # torch: each script runs on its own
        done = subprocess.run([sys.executable, name], cwd=tmp_path / "s", capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.stdout.strip() == "ran", done.stderr[-2000:]
    modules = {"pkg/__init__.py": "", "pkg/a.py": SCRIPT.format(main=""), "pkg/b.py": SCRIPT.format(main="")}
    assert lint(tmp_path / "m", modules) == [("pkg/b.py", 3, "OPG205"), ("pkg/b.py", 4, "OPG210")]
    done = python("import pkg.a, pkg.b", tmp_path / "m")  # torch: imported together, the second refuses
    assert "Only a single TORCH_LIBRARY" in done.stderr


# -- the matcher drops nothing ----------------------------------------------------------------------------

DEFINED_TWICE = """
    import torch
    from helpers import direct_register_custom_op


    def gather(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        return buf


    def gather_fake(x, buf):
        return buf


    if torch.version.hip:
        direct_register_custom_op(op_name="t22_gather", op_func=gather, mutates_args=[], fake_impl=gather_fake)
    else:
        direct_register_custom_op(op_name="t22_gather", op_func=gather, mutates_args=[], fake_impl=gather_fake)
"""


def test_an_op_defined_twice_keeps_each_definitions_kernel_and_fake(tmp_path):
    found = lint(tmp_path, {"ops.py": DEFINED_TWICE, "helpers.py": """
        import torch

        lib = torch.library.Library("t22_twice", "FRAGMENT")


        def direct_register_custom_op(op_name, op_func, mutates_args, fake_impl):
            schema = torch.library.infer_schema(op_func, mutates_args=mutates_args)
            lib.define(op_name + schema)
            lib.impl(op_name, op_func, "CPU")
            lib._register_fake(op_name, fake_impl)
    """})
    # before: two candidates for one name, every registration dropped, nothing reported
    assert found == [("ops.py", 10, "OPG303")]
    done = python("""
        import torch, ops
        x, buf = torch.ones(2), torch.zeros(2)
        print(torch.ops.t22_twice.t22_gather(x, buf) is buf)
        result = torch.library.opcheck(torch.ops.t22_twice.t22_gather.default, (x, buf), raise_exception=False)
        print(result["test_schema"] != "SUCCESS")
    """, tmp_path)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]  # the output aliases an input


def test_a_fake_of_an_op_defined_in_cpp_is_judged_without_its_schema(tmp_path):
    files = {"fakes.py": """
        import torch


        @torch.library.register_fake("t22_cpp::rows")
        def _(x):
            n = int(x.sum().item())
            return x.new_empty(n)


        @torch.library.register_fake("t22_cpp::cols")
        def _(x):
            return x.new_empty(x.shape[1])
    """, "cpp_stand_in.py": """
        import torch

        lib = torch.library.Library("t22_cpp", "DEF")
        lib.define("rows(Tensor x) -> Tensor")
        lib.define("cols(Tensor x) -> Tensor")
    """}
    # the definition is not linted (it stands in for TORCH_LIBRARY in C++): before, the fake was dropped
    assert lint(tmp_path, files, paths=["fakes.py"]) == [("fakes.py", 6, "OPG302")]
    done = python("""
        import torch, cpp_stand_in, fakes
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            x = torch.ones(2, 3)
            print(torch.ops.t22_cpp.cols(x).shape[0])
            try:
                torch.ops.t22_cpp.rows(x)
                print("ran")
            except Exception as error:
                print(type(error).__name__)
    """, tmp_path)
    assert done.stdout.split()[0] == "3" and done.stdout.split()[1] != "ran", done.stdout + done.stderr[-2000:]


# -- registration wrappers, one level ----------------------------------------------------------------------

def test_fakes_registered_through_local_wrappers_are_read(tmp_path):
    files = {"ops.py": """
        import functools

        import torch

        lib = torch.library.Library("t22_wrap", "DEF")
        lib.define("rows(Tensor x) -> Tensor")
        lib.define("cols(Tensor x) -> Tensor")


        def rows_meta(x):
            return x.new_empty(int(x.sum().item()))


        def _setup():
            def impl_abstract(op_name, fn):
                torch.library.register_fake(op_name, fn)

            impl_abstract("t22_wrap::rows", rows_meta)


        @functools.lru_cache(None)
        def get_meta_lib():
            return torch.library.Library("t22_wrap", "IMPL", "Meta")


        def register_meta(op_name, overload_name="default"):
            def wrapper(fn):
                get_meta_lib().impl(getattr(getattr(torch.ops.t22_wrap, op_name), overload_name), fn)
                return fn

            return wrapper


        @register_meta("cols")
        def cols_meta(x):
            return x.new_empty(x.shape[1])


        _setup()
    """}
    # before, neither wrapper was followed and nothing was read; the correct look-alike (cols_meta) is quiet
    assert lint(tmp_path, files) == [("ops.py", 11, "OPG302")]
    done = python("""
        import torch, ops
        from torch._subclasses.fake_tensor import FakeTensorMode
        print(torch._C._dispatch_has_kernel_for_dispatch_key("t22_wrap::cols", "Meta"))
        with FakeTensorMode():
            try:
                torch.ops.t22_wrap.rows(torch.ones(2))
                print("ran")
            except Exception as error:
                print(type(error).__name__)
    """, tmp_path)
    assert done.stdout.split()[0] == "True" and done.stdout.split()[1] != "ran", done.stdout + done.stderr[-2000:]


# -- a renamed PrivateUse1 backend (TPU) is a backend --------------------------------------------------

TPU_OP = """
    import torch

    torch.utils.rename_privateuse1_backend("tpu")
    lib = torch.library.Library("t22_tpu", "FRAGMENT")
    lib.define("lookup(Tensor idx, Tensor table) -> Tensor")
    lib.impl("lookup", lambda idx, table: table[idx], "CPU")
    lib.impl("lookup", lambda idx, table: table[idx], "TPU")
    {fake}
"""


def test_cpu_and_tpu_kernels_without_a_fake_are_reported(tmp_path):
    assert lint(tmp_path, {"ops.py": TPU_OP.format(fake="")}) == [("ops.py", 5, "OPG208")]
    done = python("""
        import torch, ops
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            try:
                torch.ops.t22_tpu.lookup(torch.zeros(2, dtype=torch.long), torch.ones(4, 3))
                print("ran")
            except Exception as error:
                print(type(error).__name__)
    """, tmp_path)
    assert done.stdout.strip() not in ("", "ran"), done.stderr[-2000:]  # "TPU" parsed; no fake: refused
    fake = ('torch.library.register_fake("t22_tpu::lookup")(lambda idx, table: '
            'table.new_empty(idx.shape[0], table.shape[1]))')
    assert lint(tmp_path, {"ops.py": TPU_OP.format(fake=fake)}) == []


# -- a .out kernel that re-binds out ----------------------------------------------------------------------

REBIND = """
    import torch
    from torch.library import Library

    lib = Library("{ns}", "FRAGMENT")
    lib.define("double.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", tags=(torch.Tag.out,))


    def double_out(x, *, out):
        {body}
        return out


    lib.impl("double.out", double_out, "CPU")
"""


def test_out_kernel_that_rebinds_out_never_writes_it(tmp_path):
    bad = REBIND.format(ns="t22_rebind", body="out = x * 2")
    assert lint(tmp_path, {"ops.py": bad}) == [("ops.py", 8, "OPG309")]
    good = REBIND.format(ns="t22_rebind_ok", body="out.copy_(x * 2)")
    assert lint(tmp_path, {"ok.py": good}, paths=["ok.py"]) == []
    for name, ns, expected in (("ops.py", "t22_rebind", [0.0, 0.0]), ("ok.py", "t22_rebind_ok", [2.0, 2.0])):
        done = python(f"""
            import runpy, torch
            kept = runpy.run_path("{name}")
            out = torch.zeros(2)
            torch.ops.{ns}.double.out(torch.ones(2), out=out)
            print(out.tolist())
        """, tmp_path)
        assert done.stdout.strip() == str(expected), done.stderr[-2000:]  # the caller's buffer is never written


# -- a fake taking the arguments in another order ------------------------------------------------------------

ORDER = """
    import torch
    from torch.library import Library

    lib = Library("{ns}", "FRAGMENT")
    lib.define("quant(Tensor x, float scale, ScalarType dtype=float) -> Tensor")
    lib.impl("quant", lambda x, scale, dtype=torch.float32: (x * scale).to(dtype), "CPU")


    @torch.library.register_fake("{ns}::quant")
    def _({params}):
        return torch.empty_like(x, dtype=dtype)
"""


def test_fake_with_parameters_in_another_order_gives_a_wrong_result(tmp_path):
    bad = ORDER.format(ns="t22_order", params="x, dtype=torch.float32, scale=1.0")
    assert lint(tmp_path, {"ops.py": bad}) == [("ops.py", 10, "OPG305")]
    renamed = ORDER.format(ns="t22_order_ok", params="x, s, dtype=torch.float32")  # a rename is fine
    assert lint(tmp_path, {"ok.py": renamed}, paths=["ok.py"]) == []
    done = python("""
        import runpy, torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        kept = runpy.run_path("ops.py"), runpy.run_path("ok.py")
        for ns in ("t22_order", "t22_order_ok"):
            x = torch.ones(2)
            real = getattr(torch.ops, ns).quant(x, 2.0, torch.bfloat16).dtype
            with FakeTensorMode() as mode:
                try:
                    fake = getattr(torch.ops, ns).quant(mode.from_tensor(x), 2.0, torch.bfloat16).dtype
                except Exception as error:
                    fake = type(error).__name__
            print(real, fake)
    """, tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0].split()[0] == "torch.bfloat16" and lines[0].split()[1] != "torch.bfloat16", done.stdout + done.stderr
    assert lines[1] == "torch.bfloat16 torch.bfloat16", done.stdout + done.stderr[-2000:]


# -- OPG304: a CPU-only op's fake may allocate on the default device --------------------------------------------

def test_fake_of_a_cpu_only_op_allocating_on_the_default_device_is_fine(tmp_path):
    source = """
        import torch
        from torch.library import Library

        lib = Library("t22_cpu", "FRAGMENT")
        lib.define("tiles(Tensor x, int n) -> Tensor")
        lib.impl("tiles", lambda x, n: x.new_zeros(n, x.shape[0]), "CPU")


        @torch.library.register_fake("t22_cpu::tiles")
        def _(x, n):
            return torch.empty([n, x.shape[0]])
    """
    assert lint(tmp_path, {"ops.py": source}) == []
    write(tmp_path, {"ops.py": source})
    import runpy

    kept = runpy.run_path(str(tmp_path / "ops.py"))  # noqa: F841 (the Library lives as long as its globals)
    x = torch.ones(3)
    with FakeTensorMode() as mode:
        fake = torch.ops.t22_cpu.tiles(mode.from_tensor(x), 2)
    assert fake.device == torch.ops.t22_cpu.tiles(x, 2).device == torch.device("cpu")
