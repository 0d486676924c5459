"""Issue 28: lint on a monorepo and on code never seen. Rule state is per op, never per run: a finding
about op A depends only on what the linted paths say about A, so linting trees together gives exactly the
union of their findings alone; every registration form torch accepts is read. Each case is a minimal
reproduction written here, what opgen lint says about it, what torch 2.13 does with it (the oracle), and a
correct look-alike. Every op lives in its own `t28_*` namespace; torch runs in subprocesses.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

torch = pytest.importorskip("torch")


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def lint(root: Path, paths=None, select=()) -> set[tuple[str, int, str]]:
    targets = [str(root / p) for p in paths] if paths else [str(root)]
    result = lint_paths(targets, LintConfig(root=str(root)), select=select)
    assert not result.internal_errors
    return {(Path(d.path).relative_to(root).as_posix(), d.line, d.code) for d in result.diagnostics}


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


# -- item 1: trees linted together give the union of their findings alone ----------------------------------

TREES = {
    # a: fakes registered in a loop (names read at run time), and ops marked side-effecting the same way
    "pkg_a/__init__.py": "",
    "pkg_a/ops.py": """
        import torch
        from torch.fx.node import has_side_effect

        lib = torch.library.Library("t28_a", "FRAGMENT")
        lib.define("scale(Tensor x) -> Tensor")
        lib.define("shift(Tensor x) -> Tensor")
        lib.define("log(Tensor x) -> ()")
        lib.impl("scale", lambda x: x * 2, "CPU")
        lib.impl("shift", lambda x: x + 1, "CPU")
        lib.impl("log", lambda x: None, "CPU")


        def _fake(x):
            return torch.empty_like(x)


        for name in ("scale", "shift"):
            torch.library.register_fake(f"t28_a::{name}")(_fake)
        for op in (torch.ops.t28_a.log.default,):
            has_side_effect(op)
    """,
    # b: an op with a CPU kernel and no fake (OPG208), a side-effect-only op (OPG104), and look-alikes
    "pkg_b/__init__.py": "",
    "pkg_b/ops.py": """
        import torch

        lib = torch.library.Library("t28_b", "FRAGMENT")
        lib.define("rows(Tensor x) -> Tensor")
        lib.impl("rows", lambda x: x[: int(x.sum())].clone(), "CPU")
        lib.define("cols(Tensor x) -> Tensor")
        lib.impl("cols", lambda x: x.sum(0), "CPU")
        lib.define("log(Tensor x) -> ()")
        lib.impl("log", lambda x: None, "CPU")


        @torch.library.register_fake("t28_b::cols")
        def _(x):
            return x.new_empty(x.shape[1:])
    """,
    # c defines only the .out overload of t28_c::norm; d (another package) registers a kernel for the
    # default overload, which its own package does not define (torch's C++ would): not a lost overload
    "pkg_c/__init__.py": "",
    "pkg_c/ops.py": """
        import torch

        lib = torch.library.Library("t28_c", "FRAGMENT")
        lib.define("norm.out(Tensor x, *, Tensor(a!) out) -> ()")
        lib.impl("norm.out", lambda x, *, out: out.copy_(x / x.norm()), "CPU")
    """,
    "pkg_d/__init__.py": "",
    "pkg_d/patch.py": """
        import torch

        lib = torch.library.Library("t28_c", "IMPL")
        lib.impl("norm", lambda x: x / x.norm(), "CPU")
    """,
}
EXPECTED_ALONE = {"pkg_a": set(), "pkg_b": {("pkg_b/ops.py", 4, "OPG208"), ("pkg_b/ops.py", 8, "OPG208"),
                                           ("pkg_b/ops.py", 8, "OPG104")},
                  "pkg_c": set(), "pkg_d": set()}


def test_trees_linted_together_give_the_union_of_their_findings_alone(tmp_path):
    write(tmp_path, TREES)
    alone = {tree: lint(tmp_path, [tree]) for tree in EXPECTED_ALONE}
    assert alone == EXPECTED_ALONE
    assert lint(tmp_path) == set().union(*alone.values())
    # before: pkg_a's dynamic names turned OPG208 and OPG104 off for every op of the run, and pkg_c's
    # definition made pkg_d's registration an OPG203 "overload lost"
    done = python("""
        import torch
        import pkg_a.ops, pkg_b.ops
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            x = torch.ones(2, 3)
            print(torch.ops.t28_a.scale(x).shape == x.shape, torch.ops.t28_b.cols(x).shape[0])
            try:
                torch.ops.t28_b.rows(x)
                print("ran")
            except Exception as error:
                print(type(error).__name__)
    """, tmp_path)
    assert done.stdout.split() == ["True", "3", "UnsupportedOperatorException"], done.stdout + done.stderr[-2000:]


def test_an_unreadable_name_makes_only_the_ops_it_may_name_unknown(tmp_path):
    write(tmp_path, {"pkg/__init__.py": "", "pkg/ops.py": """
        import torch

        lib = torch.library.Library("t28_u", "FRAGMENT")
        lib.define("fwd_a(Tensor x) -> Tensor")
        lib.define("bwd_a(Tensor x) -> Tensor")
        lib.impl("fwd_a", lambda x: x * 2, "CPU")
        lib.impl("bwd_a", lambda x: x * 2, "CPU")
        for kind in ("a",):
            torch.library.register_fake(f"t28_u::fwd_{kind}")(lambda x: torch.empty_like(x))
    """})
    # the fake may be fwd_a's, never bwd_a's: bwd_a has no fake
    assert lint(tmp_path) == {("pkg/ops.py", 5, "OPG208")}
