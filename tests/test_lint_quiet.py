"""Correct code that looks suspicious: opgen lint must say nothing (false positives are bugs)."""

from __future__ import annotations

import textwrap

import pytest

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

LIB = "import torch\nfrom torch.library import Library\n\nlib = Library('q', 'FRAGMENT')\n"

QUIET = {
    "composite-explicit-kernel-needs-no-fake": """
        lib.define("double(Tensor x) -> Tensor")
        lib.impl("double", lambda x: x * 2, "CompositeExplicitAutograd")
    """,
    "default-device-type-is-composite": """
        lib.define("double(Tensor x) -> Tensor")

        @torch.library.impl("q::double", "default")
        def double(x):
            return x * 2
    """,
    "mutating-op-returning-nothing-gets-a-trivial-fake": """
        lib.define("fill_(Tensor(a!) x, float v) -> ()")
        lib.impl("fill_", lambda x, v: x.fill_(v), "CPU")
    """,
    "inplace-tagged-op-gets-a-trivial-fake": """
        lib.define("scale_(Tensor(a!) x, float s) -> Tensor(a!)", tags=(torch.Tag.inplace,))
        lib.impl("scale_", lambda x, s: x.mul_(s), "CPU")
    """,
    "kernel-only-in-cpp-is-not-judged": """
        lib.define("from_cpp(Tensor x) -> Tensor")
    """,
    "rebound-parameter-is-not-the-input": """
        lib.define("norm(Tensor x) -> Tensor")

        def norm(x):
            x = x.float()
            x.div_(x.norm())
            return x

        lib.impl("norm", norm, "CPU")
        lib.impl("norm", lambda x: torch.empty_like(x), "Meta")
    """,
    "writes-to-a-fresh-tensor": """
        lib.define("ones(Tensor x) -> Tensor")

        def ones(x):
            out = torch.empty_like(x)
            out.fill_(1)
            out[0] = 2
            torch.add(x, 1, out=out)
            return out

        lib.impl("ones", ones, "CPU")
        lib.impl("ones", lambda x: torch.empty_like(x), "Meta")
    """,
    "requires-grad-underscore-is-not-a-write": """
        lib.define("grad_on(Tensor x) -> Tensor")

        def grad_on(x):
            y = x.detach().clone()
            x.requires_grad_(False)
            return y

        lib.impl("grad_on", grad_on, "CPU")
        lib.impl("grad_on", lambda x: torch.empty_like(x), "Meta")
    """,
    "not-implemented-for-one-case-is-not-a-todo": """
        lib.define("pick(Tensor x, str mode) -> Tensor")

        @torch.library.register_fake("q::pick")
        def _(x, mode):
            if mode not in ("a", "b"):
                raise NotImplementedError(f"mode {mode}")
            return torch.empty_like(x)
    """,
    "device-types-are-not-dispatch-keys": """
        lib.define("f(Tensor x) -> Tensor")
        torch.library.impl("q::f", "cpu", lambda x: x.clone())
        torch.library.register_kernel("q::f", "npu", lambda x: x.clone())
        torch.library.register_fake("q::f", lambda x: torch.empty_like(x))
    """,
    "impl-for-an-op-defined-elsewhere": """
        lib.define("mine(Tensor x) -> Tensor")
        lib.impl("mine", lambda x: torch.empty_like(x), "Meta")
        lib.impl("defined_in_cpp", lambda x: x, "CPU")
    """,
    "unresolvable-schema-is-skipped": """
        def schema():
            return "f(Tensor x, int y=1.5) -> Tensor"

        lib.define(schema())
    """,
    "data-dependent-fake-with-get-ctx": """
        lib.define("nz(Tensor x) -> Tensor")

        @torch.library.register_fake("q::nz")
        def _(x):
            ctx = torch.library.get_ctx()
            n = ctx.new_dynamic_size()
            return x.new_empty(n, x.dim())
    """,
    "fake-reads-shape-not-data": """
        lib.define("rows(Tensor x, int k) -> Tensor")

        @torch.library.register_fake("q::rows")
        def _(x, k):
            n = x.shape[0] * x.size(1) + x.numel() // max(x.dim(), 1)
            return x.new_empty(min(n, k))
    """,
    "custom-op-with-mutates-args-and-schema-agree": """
        @torch.library.custom_op("q::upd", mutates_args=("cache",), schema="(Tensor(a!) cache, Tensor src) -> ()")
        def upd(cache, src):
            cache.copy_(src)
    """,
    "side-effect-op-marked": """
        lib.define("log(Tensor x) -> ()")
        lib.impl("log", lambda x: None, "CPU")
        lib.impl("log", lambda x: None, "Meta")
        torch.fx.node.has_side_effect(torch.ops.q.log.default)
    """,
    "keyword-only-schema-argument-taken-positionally-by-fake": """
        lib.define("cat_into(Tensor[] xs, int dim, *, Tensor(a!) out) -> ()")

        @torch.library.register_fake("q::cat_into")
        def _(xs, dim, out):
            return None
    """,
    "custom-class-types-are-not-judged": """
        lib.define("pg(__torch__.torch.classes.c10d.ProcessGroup pg, Tensor x) -> Tensor")
        lib.impl("pg", lambda pg, x: x.clone(), "CPU")
    """,
}


@pytest.mark.parametrize("name", sorted(QUIET))
def test_no_finding_on_correct_code(tmp_path, name):
    path = tmp_path / "ok.py"
    path.write_text(LIB + textwrap.dedent(QUIET[name]))
    diagnostics = lint_paths([str(path)], LintConfig(root=str(tmp_path))).diagnostics
    assert diagnostics == [], [f"{d.line}:{d.column} {d.code} {d.message}" for d in diagnostics]


def test_aliases_constants_and_fstrings_are_resolved(tmp_path):
    path = tmp_path / "res.py"
    path.write_text(textwrap.dedent("""
        import torch.library as tl
        from torch import library
        from torch.library import Library as L, impl as register

        NS = "r"
        ARGS = "(Tensor x, int k=1.5)"
        a = L(NS, "FRAGMENT")
        a.define(f"first{ARGS} -> Tensor")
        b = library.Library(NS, "IMPL", "npu")
        tl.define(NS + "::second", "(Tensor x) -> Tensor(a!)")
        register(a, "first", "cuda")(lambda x, k=1: x)
    """))
    found = [(d.line, d.column, d.code) for d in lint_paths([str(path)], LintConfig(root=str(tmp_path))).diagnostics]
    assert found == [(9, 10, "OPG001"), (10, 33, "OPG204"), (11, 43, "OPG102"), (12, 22, "OPG204")], found
