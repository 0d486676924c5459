"""The real-code patterns of issue 11: each a minimal reproduction written here (not copied), what
opgen lint says about it, and what torch does with it (run here; torch is the oracle).

Every op lives in its own `t11_*` namespace: the registrations stay in this process.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forked_python import run_python

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths
from opgen.schema import SchemaError, parse_schema

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def lint(tmp_path: Path, files: dict[str, str], select=()) -> list[tuple[str, int, str, str]]:
    write(tmp_path, files)
    result = lint_paths([str(tmp_path)], LintConfig(root=str(tmp_path)), select=select)
    return [(Path(d.path).relative_to(tmp_path).as_posix(), d.line, d.code, d.message) for d in result.diagnostics]


def codes(found) -> list[tuple[str, int, str]]:
    return [(path, line, code) for path, line, code, _ in found]


def run_module(tmp_path: Path, name: str) -> dict:
    return runpy.run_path(str(tmp_path / name))


# -- OPG305: torch passes positional arguments by position, and omits trailing defaults -----------------

RENAMED = """
    import torch
    from torch.library import Library

    lib = Library("t11_rename", "FRAGMENT")
    lib.define("scale(Tensor x, float s=2.0) -> Tensor")
    lib.impl("scale", lambda x, s=2.0: x * s, "CPU")


    @torch.library.register_fake("t11_rename::scale")
    def _(inp, factor=5.0):
        return torch.empty_like(inp)
"""


def test_renamed_fake_parameters_are_fine_for_torch_and_for_lint(tmp_path):
    assert lint(tmp_path, {"ops.py": RENAMED}) == []
    run_module(tmp_path, "ops.py")
    op = torch.ops.t11_rename.scale.default
    torch.library.opcheck(op, (torch.ones(3), 3.0))
    torch.library.opcheck(op, (torch.ones(3),), {"s": 3.0})  # a keyword call reaches the fake by position
    compiled = torch.compile(lambda x: op(x, s=3.0) + 1, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 4.0))


def test_a_fake_missing_a_parameter_or_a_default_is_reported_and_raises_in_torch(tmp_path):
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_sig::pad", mutates_args=())
        def pad(x: torch.Tensor, n: int, flip: bool = False) -> torch.Tensor:
            return x.clone()


        @pad.register_fake
        def _(x, n, flip):
            return torch.empty_like(x)
    """})
    assert codes(found) == [("ops.py", 10, "OPG305")]
    assert "no default" in found[0][3]
    run_module(tmp_path, "ops.py")
    with FakeTensorMode(), pytest.raises(TypeError, match="flip"):
        torch.ops.t11_sig.pad(torch.ones(2), 1, False)  # equal to the default: torch leaves it out
    with FakeTensorMode():
        torch.ops.t11_sig.pad(torch.ones(2), 1, True)

    found = lint(tmp_path, {"ops.py": """
        import torch
        from torch.library import Library

        lib = Library("t11_sig2", "FRAGMENT")
        lib.define("attn(Tensor q, Tensor? b=None, float p=0.0) -> Tensor")


        @torch.library.impl("t11_sig2::attn", "Meta")
        def attn_meta(q):
            return q.new_empty(q.shape)
    """})
    assert codes(found) == [("ops.py", 9, "OPG305")]
    assert "missing parameters 'b' and 'p'" in found[0][3]
    run_module(tmp_path, "ops.py")
    q = torch.ones(2, device="meta")
    torch.ops.t11_sig2.attn(q)  # defaults omitted: the short Meta kernel works...
    with pytest.raises(TypeError):
        torch.ops.t11_sig2.attn(q, None, 0.5)  # ...until a caller passes p


# -- OPG001: `Tensor!` is torch's anonymous alias set --------------------------------------------------

@pytest.mark.parametrize("text", [
    "f(Tensor! out) -> ()", "f(Tensor x, *, Tensor! out, Tensor! b) -> Tensor!", "f(Tensor!? o) -> ()",
    "f(Tensor[]! o) -> ()", "f(int! x) -> ()", "f(Tensor ! x) -> ()", "f(Tensor? ! x) -> ()",
    "f(Tensor!(a) x) -> ()", "f(Tensor(a)! x) -> ()", "f(Tensor!! x) -> ()",
])
def test_bang_shorthand_is_accepted_exactly_where_torch_accepts_it(text):
    try:
        torch_schema = torch._C.parse_schema(text)
    except RuntimeError:
        with pytest.raises(SchemaError):
            parse_schema(text)
        return
    ours = parse_schema(text)
    assert str(torch._C.parse_schema(str(ours))) == str(torch_schema)  # the canonical text parses back
    theirs = [a.alias_info.is_write if a.alias_info else False for a in torch_schema.arguments]
    assert [a.is_write for a in ours.arguments] == theirs
    assert [sorted(a.alias_info.before_set) for a in torch_schema.arguments if a.alias_info] == \
        [list(a.alias.before) for a in ours.arguments if a.alias]  # the same names: $0, $1, ...


def test_bang_shorthand_lints_clean_and_explain_says_what_it_means(tmp_path, run_opgen):
    assert lint(tmp_path, {"ops.py": """
        import torch

        torch.library.define("t11_bang::dequant.out", "(Tensor A, int n, *, Tensor! out) -> ()")
    """}) == []
    result = run_opgen("explain", "dequant.out(Tensor A, *, Tensor! out) -> ()")
    assert result.returncode == 0, result.stderr
    assert "out: Tensor!  [mutated, keyword-only]" in result.stdout
    assert result.stdout.splitlines()[0] == "dequant.out(Tensor A, *, Tensor! out) -> ()"  # prints back as torch parses
    assert "shorthand for a written alias set of its own" in result.stdout


# -- imports: kernels and fakes resolved through the package ----------------------------------------

PACKAGE = {
    "pkg/__init__.py": "",
    "pkg/kern/__init__.py": "from .impl import scale_kernel, scale_fake\n",
    "pkg/kern/impl.py": """
        import torch


        def scale_kernel(x: torch.Tensor, s: float) -> torch.Tensor:
            return x * s


        def scale_fake(x, s):
            return torch.empty_like(x)


        def bad_fake(x):
            return torch.empty_like(x)
    """,
    "pkg/utils.py": """
        def direct_register_custom_op(op_name, op_func, mutates_args, fake_impl=None, target_lib=None):
            pass
    """,
    "pkg/ops.py": """
        from torch.library import Library

        from pkg.kern import scale_kernel, scale_fake
        from .kern.impl import bad_fake
        from .utils import direct_register_custom_op

        lib = Library("t11_pkg", "FRAGMENT")
        direct_register_custom_op(op_name="scale", op_func=scale_kernel, mutates_args=["x"], fake_impl=scale_fake,
                                  target_lib=lib)
        direct_register_custom_op(op_name="twice", op_func=scale_kernel, mutates_args=[], fake_impl=bad_fake,
                                  target_lib=lib)
    """,
}


def test_kernels_and_fakes_imported_through_the_package_are_read(tmp_path):
    # absolute import of a re-export in __init__, and a relative import of the module itself:
    # `scale` is right (no OPG305/OPG206 "no parameters"), `twice`'s fake lacks `s`, reported in its file
    found = lint(tmp_path, PACKAGE)
    assert codes(found) == [("pkg/kern/impl.py", 12, "OPG305")]
    assert "t11_pkg::twice" in found[0][3] and "missing parameter 's'" in found[0][3]


# -- OPG204: torch_npu renames PrivateUse1 to npu --------------------------------------------------

def test_npu_key_is_a_key_in_files_that_import_torch_npu(tmp_path):
    source = 'from torch.library import Library\n\nlib = Library("t11_npu", "IMPL", "NPU")\n'
    assert codes(lint(tmp_path, {"plain.py": source})) == [("plain.py", 3, "OPG204")]
    assert lint(tmp_path, {"plain.py": "import torch_npu  # noqa: F401\n" + source}) == []
    # what torch_npu does at import, and torch's answer before and after (a fresh process: it is global)
    probe = textwrap.dedent("""
        import torch
        try:
            torch.library.Library("t11_npu_a", "IMPL", "NPU")
        except RuntimeError as error:
            print("before:", error)
        torch.utils.rename_privateuse1_backend("npu")
        torch.library.Library("t11_npu_b", "IMPL", "NPU")
        print("after: ok")
    """)
    done = run_python(["-c", probe], timeout=120)
    assert "before: could not parse dispatch key: NPU" in done.stdout, done.stderr
    assert "after: ok" in done.stdout


# -- OPG307: tensors on the host by construction ----------------------------------------------------

def test_item_on_a_host_named_tensor_is_no_capture_sync(tmp_path):
    """On the CPU torch cannot show a capture failure; what is tested is that a tensor named as living
    on the host (`cpu_*`, `*_host`) is not reported, and the same read of a device tensor still is."""
    template = """
        import torch
        from torch.library import Library

        lib = Library("t11_host", "FRAGMENT")
        lib.define("pick(Tensor x, Tensor {name}) -> Tensor")


        def pick(x, {name}):
            n = {name}.item()
            return x[:n].clone()


        lib.impl("pick", pick, "CUDA")
        lib.impl("pick", lambda x, {name}: x.new_empty(x.shape), "Meta")
    """
    assert lint(tmp_path, {"ops.py": template.format(name="cpu_index")}) == []
    assert lint(tmp_path, {"ops.py": template.format(name="lens_host")}) == []
    assert codes(lint(tmp_path, {"ops.py": template.format(name="index")})) == [("ops.py", 9, "OPG307")]
    documented = template.format(name="index").replace(
        "            n = index.item()", '            """index: a CPU tensor."""\n            n = index.item()')
    assert lint(tmp_path, {"ops.py": documented}) == []  # the docstring says where it lives


# -- OPG304: the device of what a fake allocates -------------------------------------------------------

def test_fake_allocating_like_its_kernel_on_the_default_device_is_fine(tmp_path):
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_dev::host_ids", mutates_args=())
        def host_ids(x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(3, dtype=torch.int64)


        @host_ids.register_fake
        def _(x):
            return torch.zeros(3, dtype=torch.int64)
    """})
    assert found == []
    run_module(tmp_path, "ops.py")
    torch.library.opcheck(torch.ops.t11_dev.host_ids.default, (torch.ones(2),))


def test_fake_allocating_on_a_hard_coded_other_device_is_reported_and_opcheck_fails(tmp_path):
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_dev2::rows", mutates_args=(), device_types="cpu")
        def rows(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @rows.register_fake
        def _(x):
            return torch.empty(x.shape, dtype=x.dtype, device="meta")
    """})
    assert codes(found) == [("ops.py", 11, "OPG304")]
    assert "wrong device" in found[0][3]
    run_module(tmp_path, "ops.py")
    with pytest.raises(Exception, match="Devices cpu and meta are not equal"):
        torch.library.opcheck(torch.ops.t11_dev2.rows.default, (torch.ones(3),))
    # a Meta kernel (not a fake) computes on meta tensors: device="meta" is right there, and torch agrees
    found = lint(tmp_path, {"ops.py": """
        import torch
        from torch.library import Library

        lib = Library("t11_dev4", "FRAGMENT")
        lib.define("rows(Tensor x) -> Tensor")
        lib.impl("rows", lambda x: x * 2, "CPU")


        def rows_meta(x):
            return torch.empty(x.shape, dtype=x.dtype, device="meta")


        lib.impl("rows", rows_meta, "Meta")
    """})
    assert found == []
    run_module(tmp_path, "ops.py")
    torch.library.opcheck(torch.ops.t11_dev4.rows.default, (torch.ones(3),))
    # the CUDA/NPU form (a CUDA op whose fake says device="cpu" or torch.device("cpu")) is the same rule
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_dev3::rows", mutates_args=(), device_types="cuda")
        def rows(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @rows.register_fake
        def _(x):
            return torch.empty(x.shape, dtype=x.dtype, device=torch.device("cpu"))
    """})
    assert codes(found) == [("ops.py", 11, "OPG304")]


# -- OPG208: ops that need no separate fake, or whose fake is bound through a name ---------------------

def test_triton_op_needs_no_fake(tmp_path):
    assert lint(tmp_path, {"ops.py": """
        import torch
        from torch.library import triton_op


        @triton_op("t11_triton::add", mutates_args=())
        def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)
    """}) == []
    run_module(tmp_path, "ops.py")
    with FakeTensorMode():  # torch traces the body itself on fake tensors
        assert torch.ops.t11_triton.add(torch.ones(2), torch.ones(2)).shape == (2,)


def test_custom_op_assigned_to_a_name_then_register_fake_on_it(tmp_path):
    assert lint(tmp_path, {"ops.py": """
        import torch


        def _double(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        double = torch.library.custom_op("t11_assign::double", _double, mutates_args=())


        @double.register_fake
        def _(x):
            return torch.empty_like(x)
    """}) == []
    run_module(tmp_path, "ops.py")
    torch.library.opcheck(torch.ops.t11_assign.double.default, (torch.ones(2),))


# -- OPG303: who returns the input ---------------------------------------------------------------------

def test_fake_returning_input_says_whether_the_kernel_does_too(tmp_path):
    source = """
        import torch
        from torch.library import Library

        lib = Library("t11_ret{n}", "FRAGMENT")
        lib.define("wait(Tensor x) -> Tensor")


        def wait(x):
            return {kernel}


        lib.impl("wait", wait, "CPU")


        @torch.library.register_fake("t11_ret{n}::wait")
        def _(x):
            return x
    """
    only_fake = lint(tmp_path, {"ops.py": source.format(n=1, kernel="x.clone()")})
    assert codes(only_fake) == [("ops.py", 17, "OPG303")]
    assert "while the kernel returns a new tensor" in only_fake[0][3]
    both = lint(tmp_path, {"ops.py": source.format(n=2, kernel="x")})
    assert codes(both) == [("ops.py", 17, "OPG303")]
    assert "and so does its kernel" in both[0][3] and "declare the alias in the schema" in both[0][3]
    run_module(tmp_path, "ops.py")
    with pytest.raises(Exception, match="alias"):  # the contract is broken: torch says so too
        torch.library.opcheck(torch.ops.t11_ret2.wait.default, (torch.ones(2),))


# -- OPG207: legal, a cost, opt-in ---------------------------------------------------------------------

def test_mutates_args_unknown_is_legal_in_torch_and_only_reported_when_selected(tmp_path):
    source = {"ops.py": """
        import torch


        @torch.library.custom_op("t11_unknown::touch", mutates_args="unknown")
        def touch(x: torch.Tensor) -> torch.Tensor:
            return x + 1


        @touch.register_fake
        def _(x):
            return torch.empty_like(x)
    """}
    assert lint(tmp_path, source) == []
    found = lint(tmp_path, source, select=("OPG207",))
    assert codes(found) == [("ops.py", 4, "OPG207")] and "copies each one back" in found[0][3]
    run_module(tmp_path, "ops.py")
    assert torch.equal(torch.ops.t11_unknown.touch(torch.ones(2)), torch.full((2,), 2.0))


# -- the misses -----------------------------------------------------------------------------------------

def test_inplace_custom_op_returning_its_mutated_input_is_reported_and_torch_raises(tmp_path):
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_inplace::add_one_", mutates_args=("x",))
        def add_one_(x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x


        @add_one_.register_fake
        def _(x):
            return torch.empty_like(x)
    """})
    assert codes(found) == [("ops.py", 7, "OPG308")]
    run_module(tmp_path, "ops.py")
    with pytest.raises(RuntimeError, match="must not also be an input"):
        torch.ops.t11_inplace.add_one_(torch.ones(2))


def test_op_defined_twice_in_one_file_or_two_is_reported_and_torch_refuses(tmp_path):
    header = 'from torch.library import Library\n\nlib = Library("t11_dup", "FRAGMENT")\n'
    define = 'lib.define("f(Tensor x) -> Tensor")\n'
    found = lint(tmp_path, {"one.py": header + define + define})
    assert codes(found) == [("one.py", 5, "OPG210")]
    (tmp_path / "one.py").unlink()
    found = lint(tmp_path, {"a.py": header + define, "b.py": header + define})
    assert codes(found) == [("b.py", 4, "OPG210")]
    guarded = header + 'if not hasattr(__import__("torch").ops.t11_dup, "f"):\n    ' + define
    found = lint(tmp_path, {"a.py": header + define, "b.py": guarded})
    assert found == []  # a definition under a guard runs only when the op is missing
    write(tmp_path, {"one.py": header + define + define})
    with pytest.raises(RuntimeError, match="same name and overload name multiple times"):
        run_module(tmp_path, "one.py")


def test_augmented_assignment_is_a_write(tmp_path):
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_aug::acc", mutates_args=())
        def acc(out: torch.Tensor, x: torch.Tensor) -> None:
            out += x
    """})
    assert ("ops.py", 6, "OPG301") in codes(found)
    assert "OPG104" not in {code for _, _, code, _ in found}, "it writes `out`: 'mutates nothing' is wrong"
    out = torch.zeros(2)
    pointer = out.data_ptr()
    alias = out
    out += torch.ones(2)  # Tensor.__iadd__ writes in place: the caller's tensor changes
    assert out.data_ptr() == pointer and torch.equal(alias, torch.ones(2))


def test_register_fake_typo_on_a_custom_op_namespace(tmp_path):
    found = lint(tmp_path, {"ops.py": """
        import torch


        @torch.library.custom_op("t11_typo::scale", mutates_args=())
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @scale.register_fake
        def _(x):
            return torch.empty_like(x)


        @torch.library.register_fake("t11_typo::sclae")
        def _(x):
            return torch.empty_like(x)
    """})
    assert codes(found) == [("ops.py", 14, "OPG202")] and "did you mean 'scale'" in found[0][3]
    with pytest.raises(RuntimeError, match="t11_typo::sclae does not exist"):
        run_module(tmp_path, "ops.py")


def test_namespace_less_ops_of_two_packages_are_kept_apart(tmp_path):
    """Two packages linted in one run, each registering `rows` through a helper whose namespace the
    code does not show: each fake is matched to its own package's op, so both findings stay."""
    package = {
        "__init__.py": "",
        "ops.py": """
            import torch

            from .helpers import direct_register_custom_op


            def rows(x: torch.Tensor) -> torch.Tensor:
                return x.clone()


            def rows_fake(x):
                return x


            direct_register_custom_op(op_name="rows", op_func=rows, mutates_args=[], fake_impl=rows_fake)
        """,
        "helpers.py": "def direct_register_custom_op(**kwargs):\n    pass\n",
    }
    files = {f"{name}/{path}": text for name in ("pkg_a", "pkg_b") for path, text in package.items()}
    found = lint(tmp_path, files)
    assert codes(found) == [("pkg_a/ops.py", 11, "OPG303"), ("pkg_b/ops.py", 11, "OPG303")]


def test_fix_summary_counts_what_was_fixed_and_what_remains(tmp_path, run_opgen):
    write(tmp_path, {"ops.py": """
        from torch.library import Library

        lib = Library("t11_fix", "FRAGMENT")
        lib.define("f(Tensor x) -> Tensor")
        lib.define("f(Tensor x) -> Tensor")
        lib.impl("f", lambda x: x.clone(), "npu")
        lib.impl("f", lambda x: torch.empty_like(x), "Meta")
    """})
    result = run_opgen("lint", "--fix", "ops.py", cwd=str(tmp_path), env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 1
    assert result.stdout.strip().splitlines()[-1] == "Fixed 1 problem, 1 remaining."
    assert '"PrivateUse1"' in (tmp_path / "ops.py").read_text()


def test_corpus_verdicts_are_well_formed():
    """Every verdict of benchmarks/lint_verdicts.yaml names a package of the corpus, a line and a code,
    says true/false/debatable and why (the benchmark itself needs the downloaded corpus)."""
    import re

    import yaml

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_lint_corpus import PACKAGES, VERDICTS
    finally:
        sys.path.pop(0)
    verdicts = yaml.safe_load(VERDICTS.read_text())
    packages = {name for name, _ in PACKAGES}
    assert verdicts
    for key, verdict in verdicts.items():
        assert re.fullmatch(r"[\w.-]+/.+\.(?:py|ya?ml):\d+:OPG\d{3}", key), key
        assert key.split("/", 1)[0] in packages, key
        assert verdict["verdict"] in ("true", "false", "debatable"), key
        assert len(verdict["reason"]) > 20, key


def test_corpus_harness_fails_on_unclassified_and_lost_findings(tmp_path):
    """bench_lint_corpus on a planted tree (the cache already holds it, so nothing is downloaded)."""
    tree = tmp_path / "cache" / "trees" / "xformers-0.0.35" / "xformers"
    tree.mkdir(parents=True)
    (tree.parent / ".opgen-extracted-v2").write_text("")  # as the harness leaves an extracted tree
    (tree / "ops.py").write_text(textwrap.dedent("""
        import torch
        from torch.library import Library

        lib = Library("t11_bench", "FRAGMENT")
        lib.define("rows(Tensor x) -> Tensor")


        def rows_cpu(x):
            return x.clone()


        lib.impl("rows", rows_cpu, "CPU")


        @torch.library.register_fake("t11_bench::rows")
        def _(x):
            return x
    """).lstrip("\n"))
    verdicts = tmp_path / "verdicts.yaml"
    key = "xformers/xformers/ops.py:17:OPG303"

    def bench() -> subprocess.CompletedProcess:
        env = dict(os.environ, OPGEN_BENCH_CACHE=str(tmp_path / "cache"), OPGEN_BENCH_VERDICTS=str(verdicts))
        return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_lint_corpus.py"), "--offline",
                               "--only", "xformers"], capture_output=True, text=True, env=env, check=False,
                              timeout=300)

    verdicts.write_text("")
    done = bench()
    assert done.returncode == 1 and f"{key}: the fake" in done.stdout, done.stdout + done.stderr
    verdicts.write_text(f'"{key}":\n  verdict: "true"\n  reason: the fake returns its input, the kernel a copy\n')
    done = bench()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OPG303          1     1      0     0      100%" in done.stdout and "crashes: 0" in done.stdout
    verdicts.write_text(verdicts.read_text() + '"xformers/xformers/ops.py:3:OPG204":\n  verdict: "true"\n'
                        "  reason: a catch opgen no longer makes\n")
    done = bench()
    assert done.returncode == 1 and "lost true findings" in done.stdout


def test_registration_applied_by_a_call_to_an_imported_function(tmp_path):
    """`torch.library.impl(lib, "wait", "Meta")(wait_meta)` with `wait_meta` imported from another module:
    the function is read there (before, only the registration was seen and its body never checked)."""
    files = {
        "pkg/__init__.py": "",
        "pkg/meta.py": """
            def wait_meta(x):
                return x
        """,
        "pkg/ops.py": """
            import torch
            from torch.library import Library

            from .meta import wait_meta

            lib = Library("t11_applied", "FRAGMENT")
            lib.define("wait(Tensor x) -> Tensor")


            def wait_cpu(x):
                return x.clone()


            torch.library.impl(lib, "wait", "CPU")(wait_cpu)
            torch.library.impl(lib, "wait", "Meta")(wait_meta)
        """,
    }
    found = lint(tmp_path, files)
    assert codes(found) == [("pkg/meta.py", 2, "OPG303")]
    write(tmp_path, {"probe.py": textwrap.dedent(files["pkg/ops.py"]).replace("from .meta import wait_meta",
                                                                           "from pkg.meta import wait_meta")})
    sys.path.insert(0, str(tmp_path))
    try:
        run_module(tmp_path, "probe.py")
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(Exception, match="alias"):  # torch: the Meta kernel's output aliases its input
        torch.library.opcheck(torch.ops.t11_applied.wait.default, (torch.ones(2),))


# -- lambdas as kernels and fakes (lint read only `def`s) ----------------------------------------------

LAMBDAS = """
    import torch
    from torch.library import Library

    lib = Library("t12_lam{n}", "FRAGMENT")
    lib.define("bump(Tensor x) -> Tensor")
    lib.impl("bump", lambda x: {kernel}, "CPU")
    torch.library.register_fake("t12_lam{n}::bump")(lambda x: {fake})
    lib.define("scale(Tensor x, float s=2.0) -> Tensor")
    lib.impl("scale", lambda x, s=2.0: x * s, "CPU")
    torch.library.register_fake("t12_lam{n}::scale", lambda {params}: torch.empty_like({first}))
"""
PLANTED_LAMBDAS = {"kernel": "x.add_(1).clone()", "fake": "x", "params": "x, s", "first": "x"}


def test_lambda_kernels_and_fakes_are_read_like_defs(tmp_path):
    """A lambda's body is its return value: OPG301 reads the writes in it, OPG303 what it returns, OPG305
    its parameters (torch binds them as it binds a def's)."""
    good = LAMBDAS.format(n=2, kernel="x.add(1)", fake="torch.empty_like(x)", params="inp, factor=5.0",
                          first="inp")
    assert lint(tmp_path, {"ops.py": good}) == []
    run_module(tmp_path, "ops.py")
    torch.library.opcheck(torch.ops.t12_lam2.bump.default, (torch.ones(2),))
    torch.library.opcheck(torch.ops.t12_lam2.scale.default, (torch.ones(2),))

    bad = lint(tmp_path, {"ops.py": LAMBDAS.format(n=1, **PLANTED_LAMBDAS)})
    assert codes(bad) == [("ops.py", 6, "OPG301"), ("ops.py", 7, "OPG303"), ("ops.py", 10, "OPG305")]
    assert "kernel <lambda>() calls .add_() on 'x'" in bad[0][3]
    assert "gives 's' no default" in bad[2][3]
    run_module(tmp_path, "ops.py")
    with pytest.raises(Exception, match="mutated|alias"):  # the undeclared write, the aliasing fake
        torch.library.opcheck(torch.ops.t12_lam1.bump.default, (torch.ones(2),))
    with FakeTensorMode(), pytest.raises(TypeError):
        torch.ops.t12_lam1.scale(torch.ones(2))  # s left out (it is the default): the lambda requires it


VLLM_LIKE = {
    "vllm_like/__init__.py": "",
    "vllm_like/helpers.py": """
        import torch
        from torch.library import Library, infer_schema

        lib = Library("t12_vllm{n}", "FRAGMENT")


        def direct_register_custom_op(op_name, op_func, mutates_args=(), fake_impl=None, dispatch_key="CPU"):
            lib.define(op_name + infer_schema(op_func, mutates_args=mutates_args))
            lib.impl(op_name, op_func, dispatch_key)
            if fake_impl is not None:
                lib._register_fake(op_name, fake_impl)
    """,
    "vllm_like/ops.py": """
        import torch

        from vllm_like.helpers import direct_register_custom_op


        def _reduce(x: torch.Tensor, scale: float) -> torch.Tensor:
            return x * scale


        direct_register_custom_op(op_name="reduce", op_func=_reduce, fake_impl={fake})
    """,
}


def test_vllm_style_lambda_fake_returning_its_input(tmp_path):
    """vllm-ascend's `direct_register_custom_op(..., fake_impl=lambda x: x)` (rewritten minimally): the
    fake says the output aliases the input, the kernel returns a new tensor; a compiled caller that
    writes the output also writes the input, eager does not."""
    def files(n: int, fake: str) -> dict[str, str]:
        return {name: text.replace("{n}", str(n)).replace("{fake}", fake) for name, text in VLLM_LIKE.items()}

    assert lint(tmp_path, files(1, "lambda x, scale: torch.empty_like(x)")) == []
    found = lint(tmp_path, files(2, "lambda x, scale: x"))
    assert codes(found) == [("vllm_like/ops.py", 10, "OPG303")]
    assert "while the kernel returns a new tensor" in found[0][3]
    sys.path.insert(0, str(tmp_path))
    try:
        run_module(tmp_path / "vllm_like", "ops.py")
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("vllm_like", "vllm_like.helpers"):
            sys.modules.pop(name, None)

    def caller(x):
        y = torch.ops.t12_vllm2.reduce(x, 2.0)
        y.add_(1)
        return x * 1

    compiled = torch.compile(caller, fullgraph=True, backend="aot_eager")
    assert torch.equal(caller(torch.ones(2)), torch.ones(2))
    assert not torch.equal(compiled(torch.ones(2)), torch.ones(2))  # the aliasing fake changes the result


def test_host_tensor_named_in_a_comment_on_its_own_signature_line(tmp_path):
    """vllm's `num_active_loras: torch.Tensor,  # CPU tensor [1]`: the comment belongs to that parameter
    only when it is alone on its line; a comment shared by two parameters says nothing about either."""
    template = """
        import torch
        from torch.library import Library

        lib = Library("t12_host", "FRAGMENT")
        lib.define("pick(Tensor x, Tensor count) -> Tensor")


        def pick(
            {params}
        ):
            n = count.item()
            return x[:n].clone()


        lib.impl("pick", pick, "CUDA")
        lib.impl("pick", lambda x, count: x.new_empty(x.shape), "Meta")
    """
    alone = "x: torch.Tensor,\n            count: torch.Tensor,  # CPU tensor [1], how many to keep"
    assert lint(tmp_path, {"ops.py": template.format(params=alone)}) == []
    shared = "x: torch.Tensor, count: torch.Tensor,  # on the CPU"
    assert codes(lint(tmp_path, {"ops.py": template.format(params=shared)})) == [("ops.py", 11, "OPG307")]
    other = "x: torch.Tensor,  # CPU tensor\n            count: torch.Tensor,"
    assert codes(lint(tmp_path, {"ops.py": template.format(params=other)})) == [("ops.py", 12, "OPG307")]


def test_return_of_a_parameter_before_it_is_re_bound_returns_the_input(tmp_path):
    """`if not ready: return x` above `x = gather(x)` (vllm-ascend's maybe_all_gather_and_maybe_unpad):
    on that path the op returns its input. A custom_op raises when it does (OPG308); after the re-binding,
    or inside a loop (an earlier pass may have re-bound it), it is not reported."""
    template = """
        import torch


        @torch.library.custom_op("t12_early{n}::gather", mutates_args=())
        def gather(x: torch.Tensor, ready: bool) -> torch.Tensor:
            {body}


        @gather.register_fake
        def _(x, ready):
            return torch.empty_like(x)
    """
    early = "if not ready:\n                return x\n            x = x * 2\n            return x"
    found = lint(tmp_path, {"ops.py": template.format(n=1, body=early)})
    assert codes(found) == [("ops.py", 7, "OPG308")]
    run_module(tmp_path, "ops.py")
    torch.ops.t12_early1.gather(torch.ones(2), True)
    with pytest.raises(RuntimeError, match="must not also be an input"):
        torch.ops.t12_early1.gather(torch.ones(2), False)
    late = "x = x * 2\n            if not ready:\n                return x\n            return x + 1"
    assert lint(tmp_path, {"ops.py": template.format(n=2, body=late)}) == []
    run_module(tmp_path, "ops.py")
    torch.ops.t12_early2.gather(torch.ones(2), False)
    looped = "for step in range(2):\n                if step == 1:\n                    return x\n" \
             "                x = x * 2\n            return x"  # the return runs on the pass after a re-binding
    assert lint(tmp_path, {"ops.py": template.format(n=3, body=looped)}) == []
    run_module(tmp_path, "ops.py")
    torch.ops.t12_early3.gather(torch.ones(2), True)


def test_fake_without_a_trailing_argument_the_kernel_refuses(tmp_path):
    """vllm-ascend's rotary embedding (rewritten minimally): the fake lacks the trailing `offsets=None`,
    and the kernel raises NotImplementedError when offsets is given. torch leaves a None offsets out,
    so every call that works reaches the fake without it: not reported. The same fake for a kernel
    that accepts offsets breaks the compiled call that passes them (TypeError): reported."""
    template = """
        import torch
        from torch.library import Library

        lib = Library("t12_refuse{n}", "FRAGMENT")
        lib.define("rope(Tensor q, int dim, Tensor? offsets=None) -> Tensor")


        def rope(q, dim, offsets=None):
            {guard}
            return q * 2


        lib.impl("rope", rope, "CPU")


        @torch.library.register_fake("t12_refuse{n}::rope")
        def rope_fake(q, dim):
            return torch.empty_like(q)
    """
    refusing = 'if offsets is not None:\n                raise NotImplementedError("offsets")'
    assert lint(tmp_path, {"ops.py": template.format(n=1, guard=refusing)}) == []
    run_module(tmp_path, "ops.py")
    with FakeTensorMode():
        torch.ops.t12_refuse1.rope(torch.ones(2), 1)
    with pytest.raises(NotImplementedError):
        torch.ops.t12_refuse1.rope(torch.ones(2), 1, torch.zeros(2))  # the call the fake never sees

    accepting = "if offsets is not None:\n                q = q + offsets"
    found = lint(tmp_path, {"ops.py": template.format(n=2, guard=accepting)})
    assert codes(found) == [("ops.py", 18, "OPG305")] and "missing parameter 'offsets'" in found[0][3]
    run_module(tmp_path, "ops.py")
    torch.ops.t12_refuse2.rope(torch.ones(2), 1, torch.zeros(2))  # eager: fine
    with FakeTensorMode(), pytest.raises(TypeError):
        torch.ops.t12_refuse2.rope(torch.ones(2), 1, torch.zeros(2))  # the fake cannot take offsets
