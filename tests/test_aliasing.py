"""opgen.testing.aliasing through the tiers that run it (the CPU kernel's writes and the oracle): an output that is an
input's memory where the schema declares no alias, and `out=` arguments given an input's memory or a wrong size.

Each planted kernel gives the reference's values on every input (so no value check sees it) and is caught by the
memory it shares or the out= it mishandles; its correct twin passes. None of these kinds is in the project's other
plants (test_mutants.py, test_input_space.py): a dtype cast that is a no-op on one dtype, a reshape that is a view, a
scalar fast path, outputs sharing one buffer, an out= zeroed before its inputs are read, an out= written as a flat
prefix."""

from __future__ import annotations

import pytest
import torch

from opgen import testing as checks
from opgen.testing.input_variants import out_arguments

lib = torch.library.Library("alias_test", "FRAGMENT")


def define(schema: str, kernel, fake, reference, tags=(), **fields) -> checks.Op:
    """A Library op (CPU kernel, fake) as opgen.testing sees it (field ops[0])."""
    name = schema.split("(")[0]
    lib.define(schema, tags=(torch.Tag.pt2_compliant_tag, *tags))
    lib.impl(name, kernel, "CPU")
    if fake is not None:
        torch.library.register_fake(f"alias_test::{name}", fake, lib=lib)
    overload = getattr(torch.ops.alias_test, name.split(".")[0])
    overload = getattr(overload, name.split(".")[1] if "." in name else "default")
    returns = [r.name or f"out{i}" for i, r in enumerate(overload._schema.returns)]
    return checks.Op(overload, field="ops[0]", schema=f"alias_test::{schema}", cpu_kernel=f"kernels/{name}_cpu.py",
                     outputs=tuple(returns), reference=reference, **fields)


def custom(name: str, kernel, fake, reference, mutates_args=()) -> checks.Op:
    """The same as a custom_op (torch's kernel wrapper guards its outputs)."""
    op = torch.library.custom_op(f"alias_test::{name}", kernel, mutates_args=mutates_args)
    op.register_fake(fake)
    overload = getattr(torch.ops.alias_test, name).default
    returns = [r.name or f"out{i}" for i, r in enumerate(overload._schema.returns)]
    return checks.Op(overload, field="ops[0]", cpu_kernel=f"kernels/{name}_cpu.py", outputs=tuple(returns),
                     reference=reference)


def rows(seed: int, shape=(4, 8), dtype=torch.float16) -> torch.Tensor:
    return checks.random_tensor(shape, dtype, torch.Generator().manual_seed(seed))


# --- outputs that are an input's memory ------------------------------------------------------------------------


def _upcast_reference(x):
    return x.float() * 1


def _upcast_no_op(x):  # `.to` returns x itself when it is float32 already
    return x.to(torch.float32)


def _upcast_twin(x):
    return x.to(torch.float32, copy=True)


def _scale_reference(x, s: float = 1.0):
    return x * s


def _scale_identity_at_one(x, s: float = 1.0):  # the fast path returns the input
    return x if s == 1.0 else x * s


def _scale_twin(x, s: float = 1.0):
    return x.clone() if s == 1.0 else x * s


def _merge_reference(x):
    return x.reshape(x.shape[0], -1) + 0


def _merge_view(x):  # reshape of a contiguous tensor is a view
    return x.reshape(x.shape[0], -1)


def _merge_twin(x):
    return x.reshape(x.shape[0], -1).clone()


def _pair_reference(x):
    return x.abs(), x.abs()


def _pair_one_buffer(x):  # both outputs are one tensor
    y = x.abs()
    return y, y


def _pair_twin(x):  # two halves of one buffer do not overlap: not an alias
    both = torch.cat([x.abs(), x.abs()])
    return both[: x.shape[0]], both[x.shape[0]:]


CASES = {  # name: (schema, fake, reference, planted, twin, examples, the variant that catches it)
    "upcast": ("(Tensor x) -> Tensor", lambda x: x.new_empty(x.shape, dtype=torch.float32), _upcast_reference,
               _upcast_no_op, _upcast_twin, lambda seed: [{"x": rows(seed)}], r"examples\[0\] in float32: ops\[0\]\.outputs\.out0 is argument 'x' or a view of it"),
    "scale": ("(Tensor x, float s=1.0) -> Tensor", lambda x, s=1.0: torch.empty_like(x), _scale_reference,
              _scale_identity_at_one, _scale_twin, lambda seed: [{"x": rows(seed), "s": 0.5}],
              r"examples\[0\] with s=1\.0: ops\[0\]\.outputs\.out0 is argument 'x' or a view"),
    "merge": ("(Tensor x) -> Tensor", lambda x: x.new_empty(x.shape[0], x[0].numel()), _merge_reference, _merge_view,
              _merge_twin, lambda seed: [{"x": rows(seed, (4, 2, 4))}], r"examples\[0\], seed 0: ops\[0\]\.outputs\.out0 is argument 'x' or a view"),
    "pair": ("(Tensor x) -> (Tensor a, Tensor b)", lambda x: (torch.empty_like(x), torch.empty_like(x)),
             _pair_reference, _pair_one_buffer, _pair_twin, lambda seed: [{"x": rows(seed)}],
             r"examples\[0\], seed 0: ops\[0\]\.outputs\.b shares memory with ops\[0\]\.outputs\.a"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_output_sharing_an_inputs_memory_fails_in_library_style_and_the_twin_passes(name):
    schema, fake, reference, planted, twin, examples, caught = CASES[name]
    checks.assert_matches_reference(define(f"{name}_twin{schema}", twin, fake, reference), examples)
    checks.assert_writes(define(f"{name}_twin_w{schema}", twin, fake, reference), examples(0))
    with pytest.raises(checks.CheckFailed, match=caught + r".*return a new tensor") as failed:
        checks.assert_matches_reference(define(f"{name}_planted{schema}", planted, fake, reference), examples)
    assert failed.value.kind == "view-return"


def test_a_view_returned_on_the_examples_fails_the_writes_tier_too():
    schema, fake, reference, planted, _, examples, _ = CASES["merge"]
    with pytest.raises(checks.CheckFailed, match=r"kernels/merge_w_cpu\.py on ops\[0\]\.examples\[0\]: ops\[0\]\."
                                                 r"outputs\.out0 is argument 'x' or a view of it") as failed:
        checks.assert_writes(define(f"merge_w{schema}", planted, fake, reference), examples(0))
    assert failed.value.kind == "view-return"


def test_custom_op_style_refuses_the_same_fast_path_itself():
    """torch's custom_op wrapper raises on the aliasing output: the oracle reports the kernel failing there."""
    def scale(x: torch.Tensor, s: float = 1.0) -> torch.Tensor:
        return _scale_identity_at_one(x, s)

    op = custom("scale_custom", scale, lambda x, s=1.0: torch.empty_like(x), _scale_reference)
    with pytest.raises(checks.CheckFailed, match=r"fails on ops\[0\]\.examples\[0\] with s=1\.0"):
        checks.assert_matches_reference(op, CASES["scale"][5])


def test_declared_returns_of_tagged_ops_are_not_aliases():
    def scale_(x, s=1.0):
        return x.mul_(s)

    op = define("scale_(Tensor(a!) x, float s=1.0) -> Tensor(a!)", scale_, None,
                lambda x, s=1.0: x.mul_(s), tags=(torch.Tag.inplace,), returned=("x",), tag="inplace")
    checks.assert_matches_reference(op, lambda seed: [{"x": rows(seed), "s": 0.5}])


# --- out= arguments given an input or a wrong size -----------------------------------------------------------------


def _axpy_reference(x, y, alpha=1.0, *, out):
    torch.add(x, y, alpha=alpha, out=out)


def _zeroed_then_accumulated(x, y, alpha=1.0, *, out):  # out.zero_() wipes x when out is x
    out.zero_()
    out.add_(x).add_(y, alpha=alpha)


def _flat_prefix(x, y, alpha=1.0, *, out):  # a larger out is written in its first elements, silently
    out.view(-1)[: x.numel()].copy_(torch.add(x, y, alpha=alpha).view(-1))


def _axpy_refusing(x, y, alpha=1.0, *, out):  # the twin of both: computes first, refuses another size
    torch._check(out.shape == x.shape, lambda: f"out has shape {tuple(out.shape)}, expected {tuple(x.shape)}")
    out.copy_(torch.add(x, y, alpha=alpha))


def axpy_examples(seed: int = 0) -> list[dict]:
    return [{"x": rows(seed, dtype=torch.float32), "y": rows(seed + 5, dtype=torch.float32), "alpha": 0.5,
             "out": torch.zeros(4, 8)}]


AXPY = "(Tensor x, Tensor y, float alpha=1.0, *, Tensor(a!) out) -> ()"


def _axpy(name: str, kernel) -> checks.Op:
    return define(f"axpy_{name}{AXPY}", kernel, lambda x, y, alpha=1.0, *, out: None, _axpy_reference)


def test_out_arguments_are_the_written_keyword_only_or_out_named_ones():
    assert out_arguments(_axpy("names", _axpy_refusing)) == ("out",)
    cache = define("put_names(Tensor(a!) cache, Tensor(b!) y_out, Tensor rows) -> ()", lambda cache, y_out, rows: None,
                   lambda cache, y_out, rows: None, None)
    assert out_arguments(cache) == ("y_out",)


@pytest.mark.parametrize(("name", "kernel", "caught"), [
    ("zeroed", _zeroed_then_accumulated, (r"(?s)out-alias 2\).*with out given x itself: argument 'out' \(written\): "
                                          r".*an out= that is an input: compute into a new tensor")),
    ("prefix", _flat_prefix, (r"(?s)out-size 1\).*with out of shape \(5, 8\): argument 'out' \(written\): shape "
                              r"\(5, 8\), expected \(4, 8\) \(an out= of the wrong size: resize it")),
])
def test_an_out_given_an_input_or_a_wrong_size_must_be_right_or_refused(name, kernel, caught):
    """Both plants are right on every variant with a fresh out; each fails on the out= it writes silently wrong. The
    twins pass: the reference's ATen add (which takes an aliased out and resizes a wrong one) and a kernel that
    computes first and refuses another size."""
    checks.assert_matches_reference(_axpy(f"{name}_aten", _axpy_reference), axpy_examples)
    checks.assert_matches_reference(_axpy(f"{name}_refusing", _axpy_refusing), axpy_examples)
    with pytest.raises(checks.CheckFailed, match=caught) as failed:
        checks.assert_matches_reference(_axpy(f"{name}_planted", kernel), axpy_examples)
    assert failed.value.kind == "wrong-values"


def test_a_tagged_out_op_is_tried_the_same_way():
    def kernel(x, y, alpha=1.0, *, out):
        _zeroed_then_accumulated(x, y, alpha, out=out)
        return out

    def reference(x, y, alpha=1.0, *, out):
        return torch.add(x, y, alpha=alpha, out=out)

    schema = "axpy_tagged.out(Tensor x, Tensor y, float alpha=1.0, *, Tensor(a!) out) -> Tensor(a!)"
    twin = define(schema.replace("tagged", "tagged_twin"), reference, None, reference, tags=(torch.Tag.out,),
                  returned=("out",), tag="out")
    checks.assert_matches_reference(twin, axpy_examples)
    planted = define(schema, kernel, None, reference, tags=(torch.Tag.out,), returned=("out",), tag="out")
    with pytest.raises(checks.CheckFailed, match=r"with out given x itself"):
        checks.assert_matches_reference(planted, axpy_examples)


def test_custom_op_style_out_arguments_are_tried_the_same_way():
    """custom_op takes no keyword-only tensor: vLLM's positional `result` buffer is the out= argument there. The
    zeroed-first kernel fails given x as its result; the kernel computing first passes."""
    def zeroed(result: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
        result.zero_()
        result.add_(x).add_(y)

    def computed_first(result: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
        result.copy_(x + y)

    def reference(result, x, y):
        result.copy_(x + y)

    def examples(seed):
        return [{"result": torch.zeros(4, 8), "x": rows(seed, dtype=torch.float32),
                 "y": rows(seed + 5, dtype=torch.float32)}]

    twin = custom("add_result_twin", computed_first, lambda result, x, y: None, reference, mutates_args=("result",))
    checks.assert_matches_reference(twin, examples)
    planted = custom("add_result_zeroed", zeroed, lambda result, x, y: None, reference, mutates_args=("result",))
    with pytest.raises(checks.CheckFailed, match=r"with result given x itself: argument 'result' \(written\)"):
        checks.assert_matches_reference(planted, examples)
