"""Schema inference from custom_op type hints (opgen.schema.infer), checked against torch's own
`torch.library.infer_schema` (the oracle), and its use by lint: a custom_op without `schema=` goes
through the same contract as any other op."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

from opgen.lint.collect.facts import params as _params
from opgen.schema import parse_schema
from opgen.schema.errors import SchemaError
from opgen.schema.infer import infer_schema
from opgen.schema.model import strip_alias

torch = pytest.importorskip("torch")

# (function source, mutates_args): each must infer exactly what torch infers, or be refused as torch refuses it.
CASES = [
    (("def f(x: torch.Tensor, k: int = 3, *, out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:"
      " ..."), ("x", "out")),
    ("def f(x: torch.Tensor, s: list[float], n: Optional[int] = None, flag: bool = True) -> torch.Tensor: ...", ()),
    ("def f(xs: list[torch.Tensor], a: float = 0.5, name: str = 'a') -> list[torch.Tensor]: ...", "unknown"),
    ("def f(x: torch.Tensor, y: torch.Tensor | None, d: torch.dtype, dev: torch.device) -> None: ...", ("x",)),
    ("def f(x: torch.Tensor, s: Sequence[int]) -> int: ...", ()),
    ("def f(x: torch.Tensor, s: list[str]) -> torch.Tensor: ...", ()),  # refused: str lists
    ("def f(x: torch.Tensor, s: list[float] = (1.0,)) -> torch.Tensor: ...", ()),  # refused: tuple default
    ("def f(x: torch.Tensor, *args) -> torch.Tensor: ...", ()),  # refused: *args
    ("def f(x: torch.Tensor, y) -> torch.Tensor: ...", ()),  # refused: no annotation
    ("def f(x: torch.Tensor) -> torch.Tensor: ...", ("y",)),  # refused: y is not a parameter
]


def _shape(schema):
    """What infer_schema decides, without the alias letters (torch numbers them, opgen uses a, b, ...)."""
    args = [(a.name, str(strip_alias(a.type)), a.kwarg_only, a.is_write, a.default if a.has_default else "-")
            for a in schema.arguments]
    return args, [str(r.type) for r in schema.returns]


@pytest.mark.parametrize(("source", "mutates"), CASES)
def test_inferred_schema_is_what_torch_infers(source, mutates):
    namespace = {"torch": torch}
    exec("from typing import Optional, Sequence\n" + source, namespace)  # noqa: S102 (the case's own source)
    try:
        expected = parse_schema("f" + torch.library.infer_schema(namespace["f"], mutates_args=mutates))
    except ValueError:
        expected = None
    node = ast.parse(source).body[0]

    class Values:  # the collector's view of a default: a plain literal's value
        @staticmethod
        def value(default):
            return ast.literal_eval(default)

    ours = infer_schema("f", _params(node, Values), ast.unparse(node.returns), mutates)
    if expected is None:
        assert ours is None, f"torch refuses {source!r}, opgen inferred {ours}"
    else:
        assert ours is not None, f"torch infers {expected} for {source!r}"
        assert _shape(ours) == _shape(expected)


# The generated table: every annotation a custom_op parameter is commonly given, with every kind of default
# real code writes (`bias: torch.Tensor = None` among them): opgen must accept exactly what torch defines, with
# the same types and defaults.
ANNOTATIONS = ["torch.Tensor", "Optional[torch.Tensor]", "torch.Tensor | None", "int", "Optional[int]", "float",
               "bool", "str", "Optional[str]", "torch.dtype", "Optional[torch.dtype]", "torch.device",
               "list[int]", "Optional[list[int]]", "list[torch.Tensor]", "list[float]", "torch.types.Number"]
DEFAULTS = ["None", "0", "1", "-1", "2", "1.5", "1e-06", "True", "False", "'mean'", "'cpu'", "torch.float32",
            "(1, 2)", "[]"]
TABLE = [(f"def f(x: torch.Tensor, a: {annotation} = {default}) -> torch.Tensor: ...", ())
         for annotation in ANNOTATIONS for default in DEFAULTS]


class _Values:  # the collector's view of a default: a plain literal's value, or a dotted name (`torch.float32`)
    @staticmethod
    def value(default):
        try:
            return ast.literal_eval(default)
        except ValueError:
            return ast.unparse(default)


def _torch_defines(function, mutates):
    """The schema text torch's custom_op defines for `function` (infer_schema's, which torch's own parser
    must take); None when either refuses it."""
    try:
        text = "f" + torch.library.infer_schema(function, mutates_args=mutates)
        torch._C.parse_schema(text)
    except (ValueError, RuntimeError):
        return None
    return text


@pytest.mark.parametrize(("source", "mutates"), TABLE, ids=[source[25:].split(")")[0] for source, _ in TABLE])
def test_the_annotation_table_infers_what_torch_defines(source, mutates):
    namespace = {"torch": torch}
    exec("from typing import Optional\n" + source, namespace)  # noqa: S102 (the table's own source)
    expected = _torch_defines(namespace["f"], mutates)
    node = ast.parse(source).body[0]
    ours = infer_schema("f", _params(node, _Values), ast.unparse(node.returns), mutates)
    if expected is None:
        assert ours is None, f"torch refuses {source!r}, opgen inferred {ours}"
        return
    assert ours is not None, f"torch defines {expected} for {source!r}"
    try:
        theirs = parse_schema(expected)
    except SchemaError:  # a default of another type, which torch's parser takes: kept without the default
        theirs = parse_schema(re.sub(r"( a)=[^,)]*", r"\1", expected))
    assert _shape(ours) == _shape(theirs), f"{source!r}: torch {expected}, opgen {ours}"


def test_lint_checks_an_inferred_custom_op_with_the_contract(tmp_path, run_opgen):
    # Planted: `scale_` (in-place by name) that writes nothing is OPG103, a keyword-only tensor is OPG106 for
    # custom_op (torch refuses both); the look-alikes (the write declared; the tensor positional) are clean.
    bad = tmp_path / "bad" / "ops.py"
    good = tmp_path / "good" / "ops.py"
    for path, writes, star in ((bad, "()", "*, "), (good, '("x",)', "")):
        path.parent.mkdir()
        path.write_text(textwrap.dedent(f"""\
            import torch


            @torch.library.custom_op("myops::scale_", mutates_args={writes})
            def scale_(x: torch.Tensor, {star}w: torch.Tensor) -> None:
                x.mul_(w)


            @scale_.register_fake
            def _(x, {star}w):
                return None
        """), encoding="utf-8")
    found = run_opgen("lint", "--select", "OPG1", str(bad.parent))
    assert "OPG103" in found.stdout and "OPG106" in found.stdout, found.stdout
    clean = run_opgen("lint", "--select", "OPG1", str(good.parent))
    assert clean.returncode == 0, clean.stdout


def test_an_inferred_side_effect_only_custom_op_is_told_to_list_its_writes(tmp_path, run_opgen):
    # Planted: returns None, mutates_args=() and writes nothing it declares: OPG104 with the custom_op hint;
    # the look-alike that lists its write is clean.
    for writes, expected in (("()", "OPG104"), ('("x",)', None)):
        path = tmp_path / f"ops{len(writes)}.py"
        path.write_text(textwrap.dedent(f"""\
            import torch


            @torch.library.custom_op("myops::touch", mutates_args={writes})
            def touch(x: torch.Tensor) -> None:
                torch.ops.myops_native.touch(x)
        """), encoding="utf-8")
        found = run_opgen("lint", "--select", "OPG104", str(path))
        if expected:
            assert "myops::touch: returns nothing and mutates nothing, so compiled graphs drop it; mark it with " \
                   "torch.fx.node.has_side_effect(op), or list the tensors it writes in mutates_args" in found.stdout
        else:
            assert found.returncode == 0, found.stdout


def test_a_tensor_defaulting_to_none_keeps_the_op_under_the_schema_rules(tmp_path, run_opgen):
    # Planted: `bias: torch.Tensor = None` (torch defines `Tensor bias=None`) on an op that returns nothing
    # and declares no write: OPG104, as for the same op without the default; the twin lists its write.
    for writes, expected in (("()", "OPG104"), ('("out",)', None)):
        path = tmp_path / f"gemm{len(writes)}.py"
        path.write_text(textwrap.dedent(f"""\
            import torch


            @torch.library.custom_op("myops::gemm", mutates_args={writes})
            def gemm(x: torch.Tensor, out: torch.Tensor, bias: torch.Tensor = None) -> None:
                torch.ops._C.gemm_kernel(out, x, bias)


            @gemm.register_fake
            def _(x, out, bias=None):
                return None
        """), encoding="utf-8")
        found = run_opgen("lint", str(path))
        if expected:
            assert "OPG104 myops::gemm: returns nothing and mutates nothing" in found.stdout, found.stdout
        else:
            assert found.returncode == 0, found.stdout
