"""The limits opgen puts on input instead of hanging or recursing (issue 29), each checked against torch where torch
has the same limit, and each shown to refuse just past it and accept just under it."""

from __future__ import annotations

import ast
import errno

import pytest
import torch

from opgen.errors import EXIT_ENVIRONMENT, EXIT_USAGE, EnvironmentFault, OpgenError, os_error
from opgen.schema import parse_schema
from opgen.schema.parser import MAX_NESTING
from opgen.spec.load import load_spec_text
from opgen.spec.names import TAKEN_PACKAGES, shadowed_builtins
from opgen.spec.nodes import MAX_YAML_DEPTH
from opgen.spec.tensor_limits import INTEGER_RANGES, MAX_DIMS, UNFILLABLE, dtype_problem, shape_problem, values_problem

# --- example tensors, against torch.tensor and torch's reductions ------------------------------------------------

EDGES = [-(2**64), -(2**63) - 1, -(2**63), -(2**32), -(2**32) + 1, -(2**31) - 1, -(2**31), -65536, -65535, -32769,
         -32768, -256, -255, -129, -128, -1, 0, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31,
         2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1.5, -0.5, 0.5, 127.5, 255.5, 9.2e18, 9.3e18, 1.8e19,
         float("inf"), float("nan")]


def torch_builds(values, dtype: str) -> bool:
    try:
        torch.tensor(values, dtype=getattr(torch, dtype))
    except (RuntimeError, OverflowError, TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("dtype", [*INTEGER_RANGES, "bool", "float16", "float32", "float64"])
def test_example_values_are_refused_exactly_where_torch_tensor_refuses_them(dtype):
    disagree = [value for value in EDGES
                if (values_problem((value,), dtype) is None) != torch_builds([value], dtype)]
    assert not disagree, f"opgen and torch.tensor disagree on {dtype} values {disagree}"


def test_the_dims_limit_is_torchs():
    assert shape_problem((1,) * MAX_DIMS) is None and shape_problem((1,) * (MAX_DIMS + 1)) is not None
    torch.ones((1,) * MAX_DIMS).sum(dim=0)  # what the generated tests do to every example
    with pytest.raises(RuntimeError, match=f"up to {MAX_DIMS} dims"):
        torch.ones((1,) * (MAX_DIMS + 1)).sum(dim=0)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_dtypes_torch_cannot_fill_are_refused_and_the_others_are_not():
    from opgen.spec.model import DTYPES

    for name, attribute in DTYPES.items():
        dtype = getattr(torch, attribute)
        try:
            (torch.randint(0, 8, (2,)).to(dtype) if not (dtype.is_floating_point or dtype.is_complex) else
             torch.randn(2).to(dtype)).clone()
            fillable = True
        except (RuntimeError, TypeError, NotImplementedError):
            fillable = False
        assert (dtype_problem(attribute) is None) == fillable, (name, attribute)
    assert "qint8" in UNFILLABLE


@pytest.mark.parametrize(("values", "ok"), [(((1.0, 2.0), (3.0,)), False), (((1.0,), 2.0), False), ((), True),
                                            (((), ()), True), (((1, 2), (3, 4)), True)])
def test_values_must_be_rectangular_as_torch_tensor_needs(values, ok):
    assert (values_problem(values, "float32") is None) is ok
    assert torch_builds(values, "float32") is ok


# --- schemas, against torch._C.parse_schema -----------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda n: "f(Tensor" + "[]" * n + " x) -> Tensor",
                                  lambda n: "f(" + "(" * n + "Tensor" + ")" * n + " x) -> Tensor",
                                  lambda n: "f(Tensor x) -> (" + "(" * n + "Tensor" + ")" * n + ")",
                                  lambda n: "f(Tensor x, int[] y=" + "[" * n + "]" * n + ") -> Tensor"],
                         ids=["lists", "tuple-arguments", "tuple-returns", "default-lists"])
def test_schemas_nest_up_to_the_limit_and_are_refused_past_it_at_a_column(make):
    within = make(MAX_NESTING - 1)
    if "[[" not in within:  # torch reads nested types as opgen does (it refuses nested default lists itself)
        torch._C.parse_schema(within)
        assert str(parse_schema(str(parse_schema(within)))) == str(parse_schema(within))
    with pytest.raises(OpgenError, match=f"more than {MAX_NESTING} deep") as refused:
        parse_schema(make(3000))
    assert refused.value.column is not None and refused.value.column < 100


def test_integer_literals_past_python_and_int64_are_refused_at_their_column():
    with pytest.raises(OpgenError, match="5000-digit number") as refused:
        parse_schema("f(Tensor x, int n=" + "7" * 5000 + ") -> Tensor")
    assert refused.value.column == 19
    with pytest.raises(OpgenError, match="does not fit in a 64-bit integer"):
        parse_schema("f(Tensor x, int n=99999999999999999999) -> Tensor")
    with pytest.raises(IndexError, match="stoll"):  # torch refuses it too
        torch._C.parse_schema("f(Tensor x, int n=99999999999999999999) -> Tensor")


# --- YAML and bodies ----------------------------------------------------------------------------------------------

SPEC = 'namespace: lim\nops:\n  - schema: "f(Tensor x) -> Tensor"\n    outputs:\n      out0: {like: x}\n'


def test_yaml_nests_up_to_the_limit_and_is_refused_past_it_at_its_line_and_column():
    def doc(depth: int) -> str:  # the document itself is one level: `doc:` is at depth 4 under ops[0]
        return SPEC + '    doc: ' + "[" * depth + "]" * depth + "\n"

    with pytest.raises(OpgenError, match="doc must be a string"):
        load_spec_text(doc(MAX_YAML_DEPTH - 4), "s.yaml")  # deep, but within the limit: the usual error
    with pytest.raises(OpgenError, match=f"nested more than {MAX_YAML_DEPTH} deep") as refused:
        load_spec_text(doc(100000), "s.yaml")  # the scanner stops at the first bracket too many: no minutes
    assert (refused.value.line, refused.value.column) == (6, 10 + MAX_YAML_DEPTH)  # the bracket one too many


def test_python_bodies_and_rules_nest_up_to_a_limit():
    body = SPEC + '    reference: "return x' + " + 0" * 150 + '"\n'
    assert load_spec_text(body, "s.yaml").ops[0].reference
    with pytest.raises(OpgenError, match="reference nests more than 200 levels deep") as refused:
        load_spec_text(body.replace(" + 0" * 150, " + 0" * 5000), "s.yaml")
    assert refused.value.line == 6
    rule = SPEC.replace("{like: x}", '{shape: "[x.shape[0]' + " + 1" * 70 + ']", dtype: "x.dtype"}')
    with pytest.raises(OpgenError, match="nests more than 64 levels deep"):
        load_spec_text(rule, "s.yaml")


# --- names --------------------------------------------------------------------------------------------------------


def test_taken_package_names_are_the_standard_library_and_what_the_tests_import():
    assert {"os", "operator", "typing", "torch", "sympy", "pytest", "opgen", "distutils"} <= TAKEN_PACKAGES
    assert not {"myops", "ops", "kernels", "custom_ops", "fused"} & TAKEN_PACKAGES


class _File:
    def __init__(self, path: str, content: str) -> None:
        self.path, self.content = path, content


@pytest.mark.parametrize(("code", "found"), [
    ("def len(x):\n    return x\n\ndef f(x):\n    return len(x)\n", [("len", 5, "function")]),
    ("def f(x):\n    return len(x)\n\ndef len(x):\n    return x\n", [("len", 2, "function")]),  # runs later
    ("def f(x, max):\n    return max(x, 1)\n", [("max", 2, "argument")]),
    ("def f(x, int):\n    return isinstance(x, int)\n", [("int", 2, "argument")]),
    ("@sum.register_fake\ndef g(x):\n    return x\n\ndef sum(x):\n    return x\n", []),  # before the def: builtin
    ("def sum(x):\n    return x\n\n@sum.register_fake\ndef g(x):\n    return x\n", []),  # the op used as itself
    ("def len(x):\n    return x\n\ndef f(len):\n    return len * 2\n", []),  # a local of f
    ("def f(x, max: int = 2):\n    return x * max\n", []),  # the argument read as a number
    ("def int(x: int) -> int:\n    return x\n\ndef g(y: int) -> int:\n    return y\n", []),  # annotations
], ids=["call-after-def", "call-in-body-before-def", "argument-called", "argument-as-type", "decorator-before",
        "attribute-of-op", "local", "argument-used", "annotations"])
def test_the_shadowing_check_finds_planted_shadows_and_passes_look_alikes(code, found):
    ast.parse(code)
    assert [(name, line, how) for name, _, line, how in shadowed_builtins([_File("pkg/ops.py", code)])] == found


# --- faults of the machine ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("number", "kind", "code"), [
    (errno.ENOSPC, EnvironmentFault, EXIT_ENVIRONMENT), (errno.EROFS, EnvironmentFault, EXIT_ENVIRONMENT),
    (errno.EFBIG, EnvironmentFault, EXIT_ENVIRONMENT), (errno.EACCES, EnvironmentFault, EXIT_ENVIRONMENT),
    (errno.ENAMETOOLONG, OpgenError, EXIT_USAGE), (errno.ENOTDIR, OpgenError, EXIT_USAGE)])
def test_os_errors_become_located_errors_with_the_right_exit_code(number, kind, code):
    error = os_error(OSError(number, "reason", "/x/y.py"), "write", outcome="nothing was written")
    assert type(error) is kind and error.exit_code == code
    assert error.message == "cannot write /x/y.py: reason (nothing was written)" and error.hint
