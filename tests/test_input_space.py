"""opgen.testing.input_variants, used by every generated project (the inputs the generated tests try) and the checks that use
it, tested directly on small Library ops defined here (namespace `iv_test`): what the variants are, that they stay
inside what `ops[i].inputs` allows, and for each kind of bug a kernel or fake author makes every day that shows only
off the examples, a planted kernel the checks must catch (naming the variant) and a correct twin they must pass.

None of these kinds is in tests/test_mutants.py; tests/test_input_space_projects.py plants some of them in
generated projects."""

from __future__ import annotations

import itertools
import math
import threading
import time

import pytest
import torch

from opgen import testing as checks
from opgen.testing.values import same_values

lib = torch.library.Library("iv_test", "FRAGMENT")


def define(schema: str, kernel, fake, reference=None, **fields) -> checks.Op:
    """A Library op with a CPU kernel and a fake, as opgen.testing sees it (field ops[0])."""
    name = schema.split("(")[0]
    lib.define(schema, tags=(torch.Tag.pt2_compliant_tag,))
    lib.impl(name, kernel, "CPU")
    torch.library.register_fake(f"iv_test::{name}", fake, lib=lib)
    overload = getattr(torch.ops.iv_test, name).default
    returns = [r.name or f"out{i}" for i, r in enumerate(overload._schema.returns)]
    return checks.Op(overload, field="ops[0]", schema=f"iv_test::{schema}", cpu_kernel=f"kernels/{name}_cpu.py",
                     outputs=tuple(returns), reference=reference, **fields)


def labels(op, examples) -> list[str]:
    return [variant.label for variant in checks.variants(op, examples)]


# --- a normalisation over the last dim: values, special values, sizes, dtypes, state -------------------------------


def norm_reference(x, eps=1e-6):
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def norm_examples(seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"x": checks.random_tensor((4, 96), torch.float16, g)}, {"x": checks.random_tensor((2, 3, 40),
                                                                                                torch.float32, g)}]


SCRATCH: dict = {}
CALLS = itertools.count()


def _clamped(x, eps=1e-6):
    return norm_reference(x.clamp(-8, 8), eps)


def _nan_to_zero(x, eps=1e-6):
    return norm_reference(x.nan_to_num(0.0), eps)


def _no_eps_in_output(x, eps=1e-6):
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    return (xf / xf.pow(2).mean(-1, keepdim=True).sqrt()).to(x.dtype)  # 0/0 on a row of zeros


def _first_1024(x, eps=1e-6):
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    mean = xf[..., :1024].pow(2).sum(-1, keepdim=True) / x.shape[-1]  # a tile of 1024 columns, then stops
    return (xf * torch.rsqrt(mean + eps)).to(x.dtype)


def _batch_one_fast_path(x, eps=1e-6):
    return x.clone() if x.shape[0] == 1 else norm_reference(x, eps)


def _empty_early_return(x, eps=1e-6):
    return torch.empty(0, dtype=x.dtype) if x.numel() == 0 else norm_reference(x, eps)


def _bfloat16_through_float16(x, eps=1e-6):
    return norm_reference(x.half(), eps).to(x.dtype) if x.dtype == torch.bfloat16 else norm_reference(x, eps)


def _float64_in_float32(x, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _default_dtype_buffer(x, eps=1e-6):
    out = torch.zeros(x.shape)  # follows torch.get_default_dtype(), not x: right while both are float32
    return out.copy_(norm_reference(x, eps))


def _scratch_buffer(x, eps=1e-6):
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    buffer = SCRATCH.setdefault((tuple(x.shape), xf.dtype), torch.empty_like(xf))
    torch.mul(xf, torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps), out=buffer)  # shared by every call
    return (buffer + 0).to(x.dtype)


def _slow_scratch_buffer(x, eps=1e-6):
    # every other call from the two threads (the second thread's, as the lockstep runs them); none in the sweep
    late = threading.current_thread() is not threading.main_thread() and next(CALLS) % 2 == 1
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    buffer = SCRATCH.setdefault((tuple(x.shape), xf.dtype, "slow"), torch.empty_like(xf))
    # one line whose write lands late (a large kernel, or a thread the machine sets aside): the other thread's read
    # of the buffer must still come after it
    time.sleep(0.05 if late else 0) or torch.mul(xf, torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps), out=buffer)
    return (buffer + 0).to(x.dtype)


ONE_THREADS_LINE = []


def _scratch_buffer_and_a_line_one_thread_runs(x, eps=1e-6):
    if ONE_THREADS_LINE and threading.current_thread() is not threading.main_thread() and ONE_THREADS_LINE.pop():
        ONE_THREADS_LINE.clear()  # the second thread here runs it, once (a finalizer or a lazy import, say)
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    buffer = SCRATCH.setdefault((tuple(x.shape), xf.dtype, "one"), torch.empty_like(xf))
    torch.mul(xf, torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps), out=buffer)
    return (buffer + 0).to(x.dtype)


def _norm(name: str, kernel, **fields) -> checks.Op:
    return define(f"{name}(Tensor x, float eps=1e-06) -> Tensor", kernel, lambda x, eps=1e-6: torch.empty_like(x),
                  norm_reference, **fields)


@pytest.mark.parametrize(("name", "kernel", "variant"), [
    ("clamped", _clamped, r"in float16 with its floating inputs scaled to about 10000"),
    ("nan_to_zero", _nan_to_zero, r"with a NaN in its floating inputs"),
    ("no_eps", _no_eps_in_output, r"with a row of zeros in x"),
    ("first_1024", _first_1024, r"with its size 96 as 1537"),
    ("batch_one", _batch_one_fast_path, r"with its size 4 as 1"),
    ("empty_early", _empty_early_return, r"with its size 4 as 0: ops\[0\].outputs.out0: shape \(0,\), expected \(0, 96\)"),
    ("bf16_via_fp16", _bfloat16_through_float16, r"in bfloat16 with its floating inputs scaled to about 100000"),
    ("f64_in_f32", _float64_in_float32, r"examples\[0\] in float64: ops\[0\].outputs.out0: .* values differ \(torch.float64"),
])
def test_a_kernel_right_only_near_the_examples_fails_naming_the_variant(name, kernel, variant):
    with pytest.raises(checks.CheckFailed, match=variant) as caught:
        checks.assert_matches_reference(_norm(f"norm_{name}", kernel), norm_examples)
    message = str(caught.value)
    assert "disagrees with ops[0].reference in opgen.yaml" in message
    assert " calls (by kind of input: " in message  # counted in calls, by kind


def test_the_smallest_failing_input_is_found_and_the_first_difference_shown():
    with pytest.raises(checks.CheckFailed) as caught:
        checks.assert_matches_reference(_norm("norm_first_1024_small", _first_1024), norm_examples)
    message = str(caught.value)
    assert "smallest failing input found: x: float16 (1, 1537)" in message
    assert "first at index [0, " in message and "got " in message and "expected " in message


def test_state_across_calls_and_the_default_dtype_are_caught_and_named():
    with pytest.raises(checks.CheckFailed, match=r"called from two threads at once: .* it keeps state across calls"):
        checks.assert_matches_reference(_norm("norm_scratch", _scratch_buffer), norm_examples)
    # a turn lasts until the line has finished: a write that lands late is still seen (it went unseen on every run
    # while the turn passed as the line began, the threads' lines then running at once)
    with pytest.raises(checks.CheckFailed, match=r"called from two threads at once: .* it keeps state across calls"):
        checks.assert_matches_reference(_norm("norm_slow_scratch", _slow_scratch_buffer), norm_examples)
    # a line one thread runs and the other does not puts their lines out of step: that run proves nothing, and the
    # next one (in step) catches the buffer (unseen on every run while only a lost turn was run again)
    for number in range(5):
        ONE_THREADS_LINE[:] = [True, False]
        with pytest.raises(checks.CheckFailed, match=r"called from two threads at once: .* keeps state across calls"):
            checks.assert_matches_reference(_norm(f"norm_out_of_step{number}", _scratch_buffer_and_a_line_one_thread_runs),
                                            norm_examples)
    float32 = _norm("norm_default_dtype", _default_dtype_buffer, dtypes=(torch.float32,))  # a float32-only op
    with pytest.raises(checks.CheckFailed, match=r"depends on the global default dtype: ops\[0\].examples\[0\] under "
                                                 r"torch.set_default_dtype\(torch.float64\)"):
        checks.assert_matches_reference(float32, lambda seed: norm_examples(seed)[1:])
    assert torch.get_default_dtype() == torch.float32  # put back


def test_the_correct_twin_passes_every_variant_and_the_sweep_is_deterministic():
    twin = _norm("norm_twin", norm_reference)
    checks.assert_matches_reference(twin, norm_examples)
    first = checks.variants(twin, norm_examples)
    again = checks.variants(twin, lambda seed: norm_examples(seed))  # another function: not the list kept for the first
    assert [v.label for v in first] == [v.label for v in again]
    assert all(same_values(a.call, b.call) for a, b in zip(first, again, strict=True))
    kinds = {v.kind for v in first}
    assert {"example", "dtype", "float64", "size", "size-edge", "size-tile", "value", "scalar", "default"} <= kinds


def test_sizes_change_as_one_symbol_and_past_the_tile_sizes():
    found = labels(_norm("norm_labels", norm_reference), norm_examples)
    for size in (1, 0, 97, 1537, 9729):
        assert f"examples[0] with its size 96 as {size}" in found
    assert "examples[1] with its size 3 as 1" in found and "examples[1] with its size 40 as 9729" in found
    same = define("pair_same(Tensor a, Tensor b) -> Tensor", lambda a, b: a + b, lambda a, b: torch.empty_like(a))
    calls = checks.variants(same, lambda seed: [{"a": torch.randn(4, 6), "b": torch.randn(4, 6)}])
    resized = next(v.call for v in calls if v.label == "examples[0] with its size 6 as 1537")
    assert resized["a"].shape == resized["b"].shape == (4, 1537)  # equal sizes stay equal


# --- dims and scalars ----------------------------------------------------------------------------------------------


def _softmax_reference(x, dim=-1):
    return torch.softmax(x.float(), dim=dim).to(x.dtype)


def _exp_without_max(x, dim=-1):
    e = x.float().exp()
    return (e / e.sum(dim, keepdim=True)).to(x.dtype)  # inf / inf once x is large


def _dim_mis_wrapped(x, dim=-1):
    return _softmax_reference(x, dim + x.dim() - 1 if dim < -1 else dim)  # right for -1 and dims >= 0 only


def softmax_examples(seed: int = 0) -> list[dict]:
    return [{"x": checks.random_tensor((3, 4, 5), torch.float32, torch.Generator().manual_seed(seed))}]


def _softmax(name: str, kernel) -> checks.Op:
    return define(f"{name}(Tensor x, int dim=-1) -> Tensor", kernel, lambda x, dim=-1: torch.empty_like(x),
                  _softmax_reference)


def test_every_dim_is_tried_and_a_mis_wrapped_negative_dim_fails():
    twin = _softmax("softmax_twin", _softmax_reference)
    found = labels(twin, softmax_examples)
    assert [f"examples[0] with dim={d}" in found for d in (-3, -2, 0, 1, 2)] == [True] * 5
    checks.assert_matches_reference(twin, softmax_examples)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with dim=-2: ops\[0\].outputs.out0"):
        checks.assert_matches_reference(_softmax("softmax_wrapped", _dim_mis_wrapped), softmax_examples)
    with pytest.raises(checks.CheckFailed, match=r"scaled to about 100000 .*: ops\[0\].outputs.out0: .* values differ"):
        checks.assert_matches_reference(_softmax("softmax_exp", _exp_without_max), softmax_examples)


def _scale_reference(x, s=1.0):
    return x * s


def _positive_only_rewrite(x, s=1.0):
    return x * torch.exp(torch.log(torch.tensor(s, dtype=torch.float64))).to(x.dtype)  # NaN for s < 0


def test_scalars_at_zero_and_negative_catch_a_rewrite_right_for_positive_ones_only():
    scale = define("scale_twin(Tensor x, float s=1.0) -> Tensor", _scale_reference,
                   lambda x, s=1.0: torch.empty_like(x), _scale_reference)
    found = labels(scale, lambda seed: [{"x": torch.randn(4, 4), "s": 0.5}])
    assert {"examples[0] with s=0.0", "examples[0] with s=-0.5"} <= set(found)
    rewrite = define("scale_rewrite(Tensor x, float s=1.0) -> Tensor", _positive_only_rewrite,
                     lambda x, s=1.0: torch.empty_like(x), _scale_reference)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with s=-0.5: ops\[0\].outputs.out0"):
        checks.assert_matches_reference(rewrite, lambda seed: [{"x": torch.randn(4, 4, generator=torch.Generator()
                                                                                  .manual_seed(seed)), "s": 0.5}])


def test_a_domain_keeps_scalars_and_values_where_the_op_takes_them():
    kept = define("scale_kept(Tensor x, float s=1.0) -> Tensor", _positive_only_rewrite,
                  lambda x, s=1.0: torch.empty_like(x), _scale_reference,
                  inputs={"s": checks.Domain(low=0.0), "x": checks.Domain(finite=True, nonempty=True)})
    found = labels(kept, lambda seed: [{"x": torch.randn(4, 4), "s": 0.5}])
    assert "examples[0] with s=-0.5" not in found and "examples[0] with s=0.0" in found
    assert not any("NaN" in label or "inf" in label or "as 0" in label for label in found)


# --- optional tensors, promoted dtypes, defaults -------------------------------------------------------------------


def _affine_reference(x, weight=None, bias=None):
    y = x * weight if weight is not None else x.clone()
    return y + bias if bias is not None else y


def _bias_only_with_weight(x, weight=None, bias=None):
    if weight is None:
        return x.clone()  # the bias is forgotten when there is no weight
    return _affine_reference(x, weight, bias)


def affine_examples(seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"x": checks.random_tensor((4, 8), torch.float32, g), "weight": checks.random_tensor((8,), torch.float32, g),
             "bias": checks.random_tensor((8,), torch.float32, g)}]


def test_each_subset_of_the_optional_tensors_is_left_out_in_turn():
    schema = "(Tensor x, Tensor? weight=None, Tensor? bias=None) -> Tensor"
    twin = define("affine_twin" + schema, _affine_reference, lambda x, weight=None, bias=None: torch.empty_like(x),
                  _affine_reference)
    found = labels(twin, affine_examples)
    assert {"examples[0] with weight None", "examples[0] with bias None", "examples[0] with weight, bias None"} <= set(
        found)
    checks.assert_matches_reference(twin, affine_examples)
    planted = define("affine_planted" + schema, _bias_only_with_weight,
                     lambda x, weight=None, bias=None: torch.empty_like(x), _affine_reference)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with weight None: ops\[0\].outputs.out0"):
        checks.assert_matches_reference(planted, affine_examples)


def _add_reference(a, b):
    return a + b


def test_inputs_the_semantics_promote_are_tried_in_other_dtypes():
    def fake(a, b):
        return torch.empty(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.promote_types(a.dtype, b.dtype))

    examples = lambda seed: [{"a": torch.randn(4, 8, dtype=torch.float16), "b": torch.randn(4, 8,
                                                                                       dtype=torch.float16)}]
    twin = define("add_twin(Tensor a, Tensor b) -> Tensor", _add_reference, fake, _add_reference, promotes=(("a", "b"),))
    assert "examples[0] with b in float32 (the semantics promote it)" in labels(twin, examples)
    checks.assert_matches_reference(twin, examples)
    unpromoted = define("add_unpromoted(Tensor a, Tensor b) -> Tensor", lambda a, b: a + b.to(a.dtype), fake,
                        _add_reference, promotes=(("a", "b"),))
    with pytest.raises(checks.CheckFailed, match=r"with b in float32 \(the semantics promote it\): ops\[0\].outputs"
                                                 r".out0: dtype torch.float16, the reference gives torch.float32"):
        checks.assert_matches_reference(unpromoted, examples)


def test_defaulted_arguments_an_example_gives_are_also_left_out():
    scale = define("scale_defaults(Tensor x, float s=1.0) -> Tensor", _scale_reference,
                   lambda x, s=1.0: torch.empty_like(x), _scale_reference)
    calls = {v.label: v.call for v in checks.variants(scale, lambda seed: [{"x": torch.ones(2), "s": 3.0}])}
    assert calls["examples[0] with s left out (their defaults)"].keys() == {"x"}


# --- fakes on every variant ----------------------------------------------------------------------------------------


def _fake_branching_on_batch(x):
    return torch.empty_like(x) if x.shape[0] > 1 else x.new_empty(x.shape[1:])


def _fake_wrong_for_bfloat16(x):
    return torch.empty_like(x, dtype=torch.float16 if x.dtype == torch.bfloat16 else x.dtype)


def _same(*, x, **_) -> list:
    return [(x.shape, x.dtype)]


@pytest.mark.parametrize(("name", "fake", "expected"), [
    ("batch", _fake_branching_on_batch, (r"ops\[0\].outputs.out0.shape: the fake function gives \(8,\) on "
                                        r"ops\[0\].examples\[0\] with its size 4 as 1, the spec says \(1, 8\)")),
    ("bf16", _fake_wrong_for_bfloat16, (r"ops\[0\].outputs.out0.dtype: the fake function gives torch.float16 on "
                                       r"ops\[0\].examples\[0\] in bfloat16, the spec says torch.bfloat16")),
])
def test_a_fake_right_on_the_examples_only_fails_on_a_variant(name, fake, expected):
    examples = lambda seed: [{"x": checks.random_tensor((4, 8), torch.float32,
                                                        torch.Generator().manual_seed(seed))}]
    twin = define(f"fake_twin_{name}(Tensor x) -> Tensor", lambda x: x * 2, torch.empty_like, lambda x: x * 2)
    checks.assert_follows_semantics(twin, examples, _same)
    planted = define(f"fake_planted_{name}(Tensor x) -> Tensor", lambda x: x * 2, fake, lambda x: x * 2)
    checks.assert_follows_semantics(planted, [examples(0)[0]], _same)  # the examples alone do not show it
    with pytest.raises(checks.CheckFailed, match=expected):
        checks.assert_follows_semantics(planted, examples, _same)


# --- backward on the variants --------------------------------------------------------------------------------------


def _differentiable_scale(name: str, uses_s: bool) -> checks.Op:
    op = define(f"{name}(Tensor x, float s=1.0) -> Tensor", _scale_reference, lambda x, s=1.0: torch.empty_like(x),
                _scale_reference)

    def setup_context(ctx, inputs, output):
        ctx.s = inputs[1] if len(inputs) > 1 else 1.0

    def backward(ctx, grad):
        return grad * (ctx.s if uses_s else 1.0), None  # the planted one ignores s (right at its default only)

    torch.library.register_autograd(f"iv_test::{name}", backward, setup_context=setup_context, lib=lib)
    return op


def test_gradcheck_runs_on_a_moved_default_and_catches_a_formula_ignoring_it():
    examples = lambda seed: [{"x": torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))}]
    checks.gradcheck(_differentiable_scale("grad_twin", True), examples)
    ignoring = _differentiable_scale("grad_ignores_s", False)
    checks.gradcheck(ignoring, examples(0))  # on the examples alone it passes
    with pytest.raises(checks.CheckFailed, match=r"backward formula of ops\[0\].autograd .* on ops\[0\].examples\[0\] "
                                                 r"with s=2.0 \(its default is 1.0\)"):
        checks.gradcheck(ignoring, examples)


def _row_means(name: str, backward) -> checks.Op:
    """mean over the last dim, keepdim, with `backward(grad, x)` as its formula."""
    op = define(f"{name}(Tensor x) -> Tensor", lambda x: x.mean(-1, keepdim=True),
                lambda x: x.new_empty((*x.shape[:-1], 1)), lambda x: x.mean(-1, keepdim=True))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    torch.library.register_autograd(f"iv_test::{name}", lambda ctx, grad: backward(grad, *ctx.saved_tensors),
                                    setup_context=setup_context, lib=lib)
    return op


def _l2_normalize(name: str, backward) -> checks.Op:
    """x / ||x|| over the last dim, with `backward(grad, x)` as its formula."""
    def normalize(x):
        return x / x.pow(2).sum(-1, keepdim=True).sqrt()

    op = define(f"{name}(Tensor x) -> Tensor", normalize, torch.empty_like, normalize)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    torch.library.register_autograd(f"iv_test::{name}", lambda ctx, grad: backward(grad, *ctx.saved_tensors),
                                    setup_context=setup_context, lib=lib)
    return op


def _l2_backward(grad, x, rows=None):
    norm = x.pow(2).sum(-1, keepdim=True).sqrt()
    y = x / norm
    dot = (grad * y).sum(-1, keepdim=True)
    if rows is not None:
        dot = torch.cat([dot[:rows], torch.zeros_like(dot[rows:])])  # the planted bug: no dot product past `rows`
    return (grad - y * dot) / norm


@pytest.mark.parametrize(("name", "define_op", "planted", "twin", "variant"), [
    # the example's last size written into the formula: wrong at every other size, all over the Jacobian
    ("last_size", _row_means, lambda grad, x: grad.expand_as(x) / 4,
     lambda grad, x: grad.expand_as(x) / x.shape[-1], r"examples\[0\] with its size 4 as (1|5)"),
    # no gradient past the example's 3 rows: right there, wrong in 2 rows of 5 at the variant
    ("rows", _row_means, lambda grad, x: torch.cat([grad.expand_as(x)[:3] / x.shape[-1], torch.zeros_like(x[3:])]),
     lambda grad, x: grad.expand_as(x) / x.shape[-1], r"examples\[0\] with its size 3 as 5"),
    # the projection term of an L2 normalisation dropped past the example's 3 rows: a rank-one error in those rows
    # that torch's fast gradcheck (one random projection of the Jacobian) passed; every element shows it
    ("projection", _l2_normalize, lambda grad, x: _l2_backward(grad, x, rows=3), _l2_backward,
     r"examples\[0\] with its size 3 as 5"),
])
def test_gradcheck_on_the_size_variants_catches_a_formula_right_at_the_examples_size_only(name, define_op, planted,
                                                                                         twin, variant):
    """A formula right on the examples and wrong at other sizes, all over the Jacobian or only in the rows past the
    example's, fails gradcheck on the size variant that shows it (elementwise: a random projection of the Jacobian
    missed the projection case); its correct twin passes."""
    columns = {"last_size": 4, "rows": 16, "projection": 64}[name]  # fast gradcheck passed the projection at 64
    examples = lambda seed: [{"x": torch.randn(3, columns, generator=torch.Generator().manual_seed(seed))}]
    checks.gradcheck(define_op(f"grad_size_twin_{name}", twin), examples)
    bad = define_op(f"grad_size_{name}", planted)
    checks.gradcheck(bad, examples(0))  # on the examples alone it passes
    with pytest.raises(checks.CheckFailed, match=rf"ops\[0\].autograd .* on ops\[0\].{variant}: Jacobian mismatch"):
        checks.gradcheck(bad, examples)


# --- writes, contiguity, random numbers ----------------------------------------------------------------------------


def _flip_rows(x):
    x.copy_(x.flip(0))


def test_a_write_that_only_rearranges_the_buffer_is_seen_on_real_data():
    flip = define("flip_rows_(Tensor(a!) x) -> ()", _flip_rows, lambda x: None, _flip_rows)
    calls = [{"x": torch.randn(6, 4, generator=torch.Generator().manual_seed(0))}]
    checks.assert_writes(flip, calls)  # a sentinel fill flipped is the same sentinel: judged on real data too
    missing = define("flip_missing_(Tensor(a!) x) -> ()", lambda x: None, lambda x: None, lambda x: None)
    with pytest.raises(checks.CheckFailed, match=r"changed it on no example \(1 tried, on their own values and with "
                                                 r"the buffer filled with -77\)"):
        checks.assert_writes(missing, calls)


def _dense_write_reference(cache, rows, slots):
    cache.view(-1, cache.shape[-1])[slots] = rows


def _refusing(cache, rows, slots):
    torch._check(cache.is_contiguous(), lambda: "cache must be contiguous")
    _dense_write_reference(cache, rows, slots)


def test_a_written_argument_declared_contiguous_must_be_refused_in_other_layouts():
    schema = "(Tensor(a!) cache, Tensor rows, Tensor slots) -> ()"
    call = {"cache": torch.randn(4, 2, 8), "rows": torch.randn(3, 8), "slots": torch.tensor([5, 0, 2])}
    refusing = define("dense_refusing" + schema, _refusing, lambda cache, rows, slots: None, contiguous=("cache",))
    checks.assert_non_contiguous_inputs(refusing, call)
    silent = define("dense_silent" + schema, _put_rows, lambda cache, rows, slots: None, contiguous=("cache",))
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].contiguous in opgen.yaml lists 'cache', which the op "
                                                 r"writes, so a non-contiguous 'cache' must be refused"):
        checks.assert_non_contiguous_inputs(silent, call)


def test_an_undeclared_random_kernel_is_told_to_declare_its_tag_and_calls_are_counted():
    noisy = define("noisy(Tensor x) -> Tensor", lambda x: x * (torch.rand_like(x) > 0.5), torch.empty_like,
                   lambda x: x * (torch.rand_like(x) > 0.5))
    with pytest.raises(checks.CheckFailed) as caught:
        checks.assert_matches_reference(noisy, lambda seed: [{"x": torch.randn(16, 16)}])
    message = str(caught.value)
    assert "gives different results when called twice on the same inputs" in message
    assert "tags: [nondeterministic_seeded]" in message
    failed, ran = (int(n) for n in message.split(" calls (")[0].rsplit(" on ", 1)[1].split(" of "))
    assert failed <= ran  # counts calls, not differences


# --- domains ---------------------------------------------------------------------------------------------------


def _put_rows(cache, rows, slots):
    cache.index_copy_(0, slots, rows)


def test_index_domains_are_drawn_per_call_and_unique_indices_never_exceed_the_rows():
    domain = checks.Domain(index_into=lambda *, cache, **_: cache.shape[0], unique=True)
    op = define("put_rows_(Tensor(a!) cache, Tensor rows, Tensor slots) -> ()", _put_rows,
                lambda cache, rows, slots: None, _put_rows, inputs={"slots": domain})

    def examples(seed: int = 0) -> list[dict]:
        g = torch.Generator().manual_seed(seed)
        return op.drawn([{"cache": checks.random_tensor((6, 4), torch.float32, g),
                          "rows": checks.random_tensor((3, 4), torch.float32, g),
                          "slots": checks.Draw((3,), torch.int64)}], g)

    for variant in checks.variants(op, examples):
        slots, cache = variant.call["slots"], variant.call["cache"]
        assert slots.unique().numel() == slots.numel() and (slots.numel() == 0 or int(slots.max()) < cache.shape[0])
    found = labels(op, examples)
    assert "examples[0] with its size 3 as 1" in found  # the number of rows written varies, the slots follow
    assert "examples[0] with its size 6 as 1" not in found  # 3 unique slots cannot index 1 row: not an input
    checks.assert_matches_reference(op, examples)


def _topk_reference(x, k=1):
    return x.topk(k, dim=-1).values


def test_a_scalar_is_also_tried_above_the_examples_value():
    schema = "(Tensor x, int k=1) -> Tensor"
    examples = lambda seed: [{"x": torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)), "k": 2}]
    twin = define("topk_twin" + schema, _topk_reference, lambda x, k=1: x.new_empty(x.shape[0], k), _topk_reference)
    assert "examples[0] with k=3" in labels(twin, examples)
    checks.assert_matches_reference(twin, examples)
    capped = define("topk_capped" + schema, lambda x, k=1: _topk_reference(x, min(k, 2)),
                    lambda x, k=1: x.new_empty(x.shape[0], k), _topk_reference)  # right up to the example's k
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with k=3: ops\[0\].outputs.out0: shape \(4, 2\), "
                                                 r"expected \(4, 3\)"):
        checks.assert_matches_reference(capped, examples)


def _chunks_reference(x, n=1):
    return [c.clone() for c in x.chunk(n)]


def _chunks_semantics(*, x, n=1):
    return [[(torch.Size([x.shape[0] // n]), x.dtype)] * n]


def _chunks_fake(x, n=1):
    return [x.new_empty(x.shape[0] // n) for _ in range(n)]


def test_a_scalar_the_semantics_were_not_written_for_is_left_out_with_a_warning():
    """`chunks(x, n)` with `length: n` holds where n divides x (the spec's examples): at the moved n=3 the reference
    itself gives 2 chunks. That correct kernel used to fail `kernel_follows_the_semantics`; it passes with a warning
    naming the variant. A kernel capped at the example's n still fails where the reference agrees with the semantics."""
    schema = "(Tensor x, int n) -> Tensor[]"
    examples = lambda seed: [{"x": torch.arange(12.0), "n": 2}]
    twin = define("chunks_twin" + schema, _chunks_reference, _chunks_fake, _chunks_reference)
    assert "examples[0] with n=3" in labels(twin, examples)
    with pytest.warns(UserWarning, match=r"ops\[0\].reference gives 2 tensors on ops\[0\].examples\[0\] with n=3, "
                                         r"the spec's semantics 3: the fake and the kernel are not held"):
        checks.assert_follows_semantics(twin, lambda seed: [{"x": torch.arange(4.0), "n": 2}], _chunks_semantics)
    capped = define("chunks_capped" + schema, lambda x, n: _chunks_reference(x, min(n, 2)), _chunks_fake,
                    _chunks_reference)
    with pytest.raises(AssertionError, match=r"the CPU kernel \(kernels/chunks_capped_cpu.py\) gives 2 tensors on "
                                             r"ops\[0\].examples\[0\] with n=3, the spec's semantics 3"):
        checks.assert_follows_semantics(capped, examples, _chunks_semantics)


def test_semantics_and_reference_disagreeing_on_a_dtype_name_the_spec():
    """On another dtype the semantics must still hold: where the reference keeps float16 and the semantics say
    float32, the failure names the spec's two fields, not the kernel."""
    examples = lambda seed: [{"x": checks.random_tensor((4, 8), torch.float32, torch.Generator().manual_seed(seed))}]
    op = define("dtype_disagree(Tensor x) -> Tensor", lambda x: x * 2, torch.empty_like, lambda x: x * 2)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].reference gives torch.float16 on ops\[0\].examples\[0\] in float16.*the spec's semantics "
                                                 r"\(ops\[0\].outputs\) and its reference disagree"):
        checks.assert_follows_semantics(op, examples, lambda *, x: [(x.shape, torch.float32)])


def test_a_scalar_with_listed_values_is_tried_at_each_of_them_and_nowhere_else():
    """`inputs: {n: {values: [1, 2, 4]}}`: a block size or a divisor takes those values only, so the variants try
    each of them (3, 0 and -2 are no inputs of the op), and a defaulted one not given is moved to a listed value."""
    schema = "(Tensor x, int n, int block=16) -> Tensor[]"
    examples = lambda seed: [{"x": torch.arange(4.0), "n": 2}]
    reference = lambda x, n, block=16: _chunks_reference(x, n)
    op = define("chunks_listed" + schema, reference, lambda x, n, block=16: _chunks_fake(x, n), reference,
                inputs={"n": checks.Domain(values=(1, 2, 4)), "block": checks.Domain(values=(16, 32))})
    found = [label for label in labels(op, examples) if " with n=" in label or " with block=" in label]
    assert sorted(set(found)) == ["examples[0] with block=32 (its default is 16)", "examples[0] with n=1",
                                  "examples[0] with n=4"]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every value listed is one the semantics describe: nothing left out
        checks.assert_follows_semantics(op, examples, lambda *, x, n, block=16: _chunks_semantics(x=x, n=n))


def _group_mean_reference(x, groups=2):
    return x.reshape(x.shape[0], groups, -1).mean(-1)


def test_an_int_scalar_is_also_tried_doubled_where_one_more_is_no_input():
    """groups=2 on 8 columns: 3 does not divide 8 (the reference refuses it), 0 and -2 neither, so a kernel with the
    example's 2 written in passed every tier; groups=4 is an input, and there it fails. Its twin passes."""
    schema = "(Tensor x, int groups=2) -> Tensor"
    examples = lambda seed: [{"x": checks.random_tensor((2, 8), torch.float32, torch.Generator().manual_seed(seed))}]
    fake = lambda x, groups=2: x.new_empty(x.shape[0], groups)
    twin = define("group_mean_twin" + schema, _group_mean_reference, fake, _group_mean_reference)
    assert "examples[0] with groups=4" in labels(twin, examples)
    checks.assert_matches_reference(twin, examples)
    written_in = define("group_mean_two" + schema, lambda x, groups=2: _group_mean_reference(x, 2), fake,
                        _group_mean_reference)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with groups=4: ops\[0\].outputs.out0: shape "
                                                 r"\(2, 2\), expected \(2, 4\)"):
        checks.assert_matches_reference(written_in, examples)


# --- tiles and tails: a gated activation whose checks want an even last dim ----------------------------------------


def _gelu_and_mul_reference(x):
    d = x.shape[-1] // 2
    return (torch.nn.functional.gelu(x[..., :d].float(), approximate="tanh") * x[..., d:].float()).to(x.dtype)


def _gelu_and_mul_fake(x):
    torch._check(x.shape[-1] % 2 == 0,
                 lambda: "iv_test::gelu_and_mul: ops[0].checks[0] in opgen.yaml does not hold: x.shape[-1] % 2 == 0")
    return x.new_empty([*x.shape[:-1], x.shape[-1] // 2])


def _even_only_kernel(x):
    torch._check(x.shape[-1] % 2 == 0, lambda: "gelu_and_mul: the last size must be even")  # as a real kernel refuses
    return _gelu_and_mul_reference(x)


def _zero_past_4096(x):  # one tile of 4096 output columns, the rest left zero
    out = _even_only_kernel(x)
    out[..., 4096:] = 0
    return out


def _last_partial_tile_wrong(x):  # tiles of 1024 output columns; the partial last one in erf's gelu, not tanh's
    out, d = _even_only_kernel(x), x.shape[-1] // 2
    tail = d - d % 1024 if d % 1024 else d
    out[..., tail:] = (torch.nn.functional.gelu(x[..., tail:d].float()) * x[..., d + tail:].float()).to(x.dtype)
    return out


def _vector_tail_dropped(width: int):
    def kernel(x):  # vectors of `width` output columns; a tail shorter than one left zero
        out, d = _even_only_kernel(x), x.shape[-1] // 2
        out[..., d - d % width:] = 0
        return out
    return kernel


def gated_examples(seed: int = 0) -> list[dict]:
    return [{"x": checks.random_tensor((4, 256), torch.float16, torch.Generator().manual_seed(seed))}]


def _gated(name: str, kernel) -> checks.Op:
    return define(f"{name}(Tensor x) -> Tensor", kernel, _gelu_and_mul_fake, _gelu_and_mul_reference, checked=True)


def test_size_variants_keep_to_the_checks_and_reach_past_the_tile_sizes():
    """gelu_and_mul's checks want an even last dim: each size variant of it that is odd moves to the next even size
    (named in the label), so the kernel that refuses odd sizes, as real ones do, passes, and the output of the
    largest one, half of 9730, is still past a tile of 4096 columns."""
    twin = _gated("gelu_and_mul_twin", _even_only_kernel)
    by_label = {v.label: v.call for v in checks.variants(twin, gated_examples)}
    moved = {"examples[0] with its size 256 as 2 (1 is outside ops[0].checks[0])": 2,
             "examples[0] with its size 256 as 258 (257 is outside ops[0].checks[0])": 258,
             "examples[0] with its size 256 as 1538 (1537 is outside ops[0].checks[0])": 1538,
             "examples[0] with its size 256 as 9730 (9729 is outside ops[0].checks[0])": 9730}
    for label, last in moved.items():
        assert by_label[label]["x"].shape == (4, last)
    assert all(call["x"].shape[-1] % 2 == 0 for call in by_label.values())
    checks.assert_matches_reference(twin, gated_examples)
    checks.assert_follows_semantics(twin, gated_examples, lambda *, x: [(x.shape[:-1] + (x.shape[-1] // 2,), x.dtype)])


@pytest.mark.parametrize(("name", "kernel", "variant"), [
    ("past_4096", _zero_past_4096, r"with its size 256 as 9730 \(9729 is outside ops\[0\].checks\[0\]\)"),
    ("partial_tile", _last_partial_tile_wrong, r"with its size 256 as 1538 \(1537 is outside"),
    ("tail_of_8", _vector_tail_dropped(8), r"with its size 256 as 258 \(257 is outside"),
    ("tail_of_32", _vector_tail_dropped(32), r"with its size 256 as 1538 \(1537 is outside"),
])
def test_a_kernel_wrong_past_a_tile_or_in_a_tail_fails_naming_the_size(name, kernel, variant):
    with pytest.raises(checks.CheckFailed, match=variant):
        checks.assert_matches_reference(_gated(f"gelu_and_mul_{name}", kernel), gated_examples)


# --- index dtypes ----------------------------------------------------------------------------------------------


def _int64_table_read_as_int32(cache, rows, slots):  # int32 words of an int64 table: its low words, little-endian
    _dense_write_reference(cache, rows, slots.view(torch.int32)[::2])


def slot_examples(seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"cache": checks.random_tensor((4, 2, 8), torch.float16, g), "rows": checks.random_tensor((3, 8), torch.float16, g),
             "slots": torch.tensor([5, 0, 2])}]


def test_index_tensors_are_tried_in_the_other_index_dtype():
    """The example's slots are int64; a kernel reading them as int32 words (right for int64, little-endian) writes
    the wrong rows given int32 slots, which indexing takes. Its twin passes."""
    schema = "(Tensor(a!) cache, Tensor rows, Tensor slots) -> ()"
    twin = define("slots_twin_" + schema, _dense_write_reference, lambda cache, rows, slots: None,
                  _dense_write_reference)
    assert "examples[0] with slots as int32" in labels(twin, slot_examples)
    checks.assert_matches_reference(twin, slot_examples)
    planted = define("slots_as_int32_" + schema, _int64_table_read_as_int32, lambda cache, rows, slots: None,
                     _dense_write_reference)
    with pytest.raises(checks.CheckFailed, match=r"on 1 of .* calls \(by kind of input: index-dtype 1\):\n  .*"
                                                 r"ops\[0\].examples\[0\] with slots as int32"):
        checks.assert_matches_reference(planted, slot_examples)


def _int64_slots_only(cache, rows, slots):  # a kernel taking the int64 slot table its op declares, refusing int32
    torch._check(slots.dtype == torch.int64, lambda: "slots must be int64")
    _dense_write_reference(cache, rows, slots)


def _fake_checking_int64_slots(cache, rows, slots):  # as opgen renders `checks: ["slots.dtype == int64"]`
    torch._check(slots.dtype == torch.int64,
                 lambda: "iv_test::slots_checked: ops[0].checks[0] in opgen.yaml does not hold: slots.dtype == int64")


def test_an_index_dtype_the_checks_refuse_is_left_out_and_one_they_allow_is_still_tried():
    """AWQ's qweight must be int32, a slot table int64: with the dtype in `checks:` the other index dtype is outside the
    op's contract, so a kernel refusing it passes (it failed, as a kernel refusing what the reference takes, and the
    fake tier failed it as a fake refusing what the kernel takes). Without the check, the same kernel fails."""
    schema = "(Tensor(a!) cache, Tensor rows, Tensor slots) -> ()"
    declared = define("slots_checked" + schema, _int64_slots_only, _fake_checking_int64_slots, _dense_write_reference,
                      checked=True)
    assert "examples[0] with slots as int32" not in labels(declared, slot_examples)
    checks.assert_matches_reference(declared, slot_examples)
    undeclared = define("slots_unchecked" + schema, _int64_slots_only, lambda cache, rows, slots: None,
                        _dense_write_reference)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].examples\[0\] with slots as int32"):
        checks.assert_matches_reference(undeclared, slot_examples)


# --- ties among the scores an index output picks from --------------------------------------------------------


def _route_reference(weights, ids, logits):
    w, i = torch.topk(torch.softmax(logits.float(), -1), weights.shape[-1], dim=-1)
    weights.copy_(w)
    ids.copy_(i)


def _route_stable(weights, ids, logits):  # the lowest expert first among equal probabilities, as a sort gives
    w, i = torch.sort(torch.softmax(logits.float(), -1), dim=-1, descending=True, stable=True)
    weights.copy_(w[..., :weights.shape[-1]])
    ids.copy_(i[..., :weights.shape[-1]])


def _route_ids_shifted(weights, ids, logits):  # right weights, each id one expert too far
    _route_reference(weights, ids, logits)
    ids.copy_((ids + 1) % logits.shape[-1])


def route_examples(seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"weights": torch.zeros(5, 2), "ids": torch.zeros(5, 2, dtype=torch.int64),
             "logits": checks.random_tensor((5, 8), torch.float32, g)}]


def test_an_index_output_declared_with_ties_may_break_them_otherwise_and_a_wrong_index_still_fails():
    """MoE routing (vLLM's topk_softmax): torch.topk leaves the order of equal scores unspecified, and the variants
    make ties (a row of zeros, saturated softmax). A kernel breaking them another way failed; with `ties:` naming the
    scores it passes, and a kernel picking the wrong experts with the right weights still fails."""
    schema = "(Tensor(a!) weights, Tensor(b!) ids, Tensor logits) -> ()"
    fake = lambda weights, ids, logits: None
    scores = {"ids": lambda *, logits, **_: torch.softmax(logits.float(), -1)}
    undeclared = define("route_stable" + schema, _route_stable, fake, _route_reference)
    with pytest.raises(checks.CheckFailed, match=r"with a row of zeros in logits: argument 'ids' \(written\)"):
        checks.assert_matches_reference(undeclared, route_examples)
    declared = define("route_stable_ties" + schema, _route_stable, fake, _route_reference, ties=scores)
    checks.assert_matches_reference(declared, route_examples)
    shifted = define("route_shifted" + schema, _route_ids_shifted, fake, _route_reference, ties=scores)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\], seed 0: argument 'ids' \(written\)"):
        checks.assert_matches_reference(shifted, route_examples)


# --- backward with a frozen weight and a non-contiguous grad_output ----------------------------------------------


def _scaled_rows(x, w):
    return x * w


def _weight_backward_twin(ctx, grad):
    x, w = ctx.saved_tensors
    return grad * w if ctx.needs_input_grad[0] else None, (grad * x).sum(0) if ctx.needs_input_grad[1] else None


def _frozen_weight_path(ctx, grad):  # a fast path for a frozen weight that forgets the weight
    x, w = ctx.saved_tensors
    if not ctx.needs_input_grad[1]:
        return grad.clone(), None
    return grad * w, (grad * x).sum(0)


def _grad_viewed(ctx, grad):  # assumes a contiguous grad_output
    x, w = ctx.saved_tensors
    rows = grad.view(-1).view(x.shape)
    return rows * w, (rows * x).sum(0)


def _weighted(name: str, backward) -> checks.Op:
    op = define(f"{name}(Tensor x, Tensor w) -> Tensor", _scaled_rows, lambda x, w: torch.empty_like(x), _scaled_rows)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    torch.library.register_autograd(f"iv_test::{name}", backward, setup_context=setup_context, lib=lib)
    return op


@pytest.mark.parametrize(("name", "backward", "expected"), [
    ("frozen_path", _frozen_weight_path, (r"gives another gradient of x on ops\[0\].examples\[0\] with a "
                                          r"non-contiguous grad_output and only x requiring grad")),
    ("grad_viewed", _grad_viewed, r"raises on ops\[0\].examples\[0\] with a non-contiguous grad_output.*view"),
])
def test_backward_with_a_frozen_input_or_a_non_contiguous_grad_output(name, backward, expected):
    """Both planted formulas pass gradcheck (every input requiring grad, contiguous grad_outputs); each fails on the
    subset or the layout it mishandles, naming it. The twin passes."""
    examples = lambda seed: [{"x": torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)),
                              "w": torch.randn(4, generator=torch.Generator().manual_seed(seed + 7))}]
    checks.gradcheck(_weighted(f"weighted_twin_{name}", _weight_backward_twin), examples)
    planted = _weighted(f"weighted_{name}", backward)
    for fn_inputs in [checks.autograd._gradcheck_inputs(planted, examples(0)[0])]:
        torch.autograd.gradcheck(*fn_inputs)  # the formula is right where gradcheck looks
    with pytest.raises(checks.CheckFailed, match=expected):
        checks.gradcheck(planted, examples)


# --- storage offsets -------------------------------------------------------------------------------------------


def _from_storage_start(x, eps=1e-6):  # reads x's storage from its start: right for a fresh tensor only
    whole = x.new_empty(0).set_(x.untyped_storage(), 0, x.shape, x.stride())
    return norm_reference(whole, eps)


def test_inputs_at_a_storage_offset_catch_a_kernel_reading_from_the_storage_start():
    """A view one element into a larger buffer (a slice of a batch): the kernel that ignores the storage offset
    fails naming the variant; the twin passes on it."""
    twin = _norm("norm_offset_twin", norm_reference)
    offset = next(v.call for v in checks.variants(twin, norm_examples)
                  if v.label == "examples[0] with every tensor at storage offset 1 (unaligned)")
    assert offset["x"].storage_offset() == 1 and offset["x"].is_contiguous()
    checks.assert_matches_reference(twin, norm_examples)
    with pytest.raises(checks.CheckFailed, match=r"on 2 of .* calls \(by kind of input: offset 2\):\n  .*"
                                                 r"ops\[0\].examples\[0\] with every tensor at storage offset 1"):
        checks.assert_matches_reference(_norm("norm_storage_start", _from_storage_start), norm_examples)


# --- equal sizes apart --------------------------------------------------------------------------------------------


def _head_weighted_reference(x, w):
    return (x * w[:, None]).sum(-1)


def _tokens_for_heads(x, w):  # reads the token count where it wants the head count: equal in the example
    return (x * w.reshape(x.shape[0], 1)).sum(-1)


def test_two_equal_sizes_are_tried_apart_and_a_kernel_confusing_them_fails():
    """x [tokens, heads, dim] with 4 tokens and 4 heads: every size variant moved both, so a kernel reading the
    token count for the head count passed. The token dim alone as 5 fails it; the twin passes."""
    schema = "(Tensor x, Tensor w) -> Tensor"
    fake = lambda x, w: x.new_empty(x.shape[:-1])
    examples = lambda seed: [{"x": checks.random_tensor((4, 4, 8), torch.float32, torch.Generator().manual_seed(seed)),
                              "w": checks.random_tensor((4,), torch.float32, torch.Generator().manual_seed(seed + 9))}]
    twin = define("heads_twin" + schema, _head_weighted_reference, fake, _head_weighted_reference)
    found = labels(twin, examples)
    assert "examples[0] with its size 4 as 5 at dim -3 of x only" in found
    assert "examples[0] with its size 4 as 5 at dim -2 of x only" in found  # refused by the reference: w is 4 long
    checks.assert_matches_reference(twin, examples)
    planted = define("heads_confused" + schema, _tokens_for_heads, fake, _head_weighted_reference)
    with pytest.raises(checks.CheckFailed, match=r"fails on ops\[0\].examples\[0\] with its size 4 as 5 at dim -3 of "
                                                 r"x only, which ops\[0\].reference accepts"):
        checks.assert_matches_reference(planted, examples)


# --- a written buffer refused in other layouts ---------------------------------------------------------------


def _viewed_cache(cache, rows, slots):  # real cache kernels take the cache dense: `.view` raises on a strided one
    cache.view(-1, cache.shape[-1])[slots] = rows


def _write_lost_on_a_copy(cache, rows, slots):  # .contiguous() copies a strided cache: the write never lands
    cache.contiguous().view(-1, cache.shape[-1])[slots] = rows


def test_a_kernel_refusing_a_strided_written_buffer_passes_with_a_note_naming_contiguous():
    """A loud error on a transposed cache is a refusal, not corruption: the layout tier passes, noting
    `contiguous: [cache]`; a kernel that loses its write on a strided cache still fails."""
    schema = "(Tensor(a!) cache, Tensor rows, Tensor slots) -> ()"
    call = {"cache": torch.randn(4, 2, 8), "rows": torch.randn(3, 8), "slots": torch.tensor([5, 0, 2])}
    viewed = define("cache_viewed" + schema, _viewed_cache, lambda cache, rows, slots: None)
    with pytest.warns(UserWarning, match=r"refuses a transposed or permuted 'cache', which it writes \(RuntimeError: view size is "
                                         r".*declare `contiguous: \[cache\]` in ops\[0\] of opgen.yaml"):
        checks.assert_non_contiguous_inputs(viewed, call)
    lost = define("cache_lost" + schema, _write_lost_on_a_copy, lambda cache, rows, slots: None)
    with pytest.raises(checks.CheckFailed, match=r"gives other values for transposed inputs than for contiguous ones: "
                                                 r".*argument 'cache'"):
        checks.assert_non_contiguous_inputs(lost, call)


def _viewed_token_rows(cache, rows, slots):  # [blocks, block_size, heads, dim] as token rows: takes a transposed
    cache.view(-1, *cache.shape[2:])[slots] = rows  # cache (its last two dims), refuses a permuted one


def _token_rows_lost_when_transposed(cache, rows, slots):  # refuses a permuted cache, loses a transposed one's write
    flat = cache.view(-1, *cache.shape[2:])
    if cache.stride(-1) != 1:
        flat = flat.clone()
    flat[slots] = rows


def test_a_refusal_in_a_layout_other_than_transposed_is_a_refusal_and_the_other_layouts_are_still_checked():
    """A paged KV cache viewed as token rows (vLLM's reshape_and_cache layout) takes a transposed cache and refuses a
    permuted or channels-last one: only the transposed probe was tried, so the refusal failed the tier as a broken
    kernel. Now it passes with the note; a kernel refusing the permuted cache but losing the transposed one's write
    still fails."""
    schema = "(Tensor(a!) cache, Tensor rows, Tensor slots) -> ()"
    call = {"cache": torch.randn(2, 4, 2, 8), "rows": torch.randn(3, 2, 8), "slots": torch.tensor([5, 0, 2])}
    viewed = define("token_rows_viewed" + schema, _viewed_token_rows, lambda cache, rows, slots: None)
    with pytest.warns(UserWarning, match=r"refuses a permuted or channels_last 'cache', which it writes "
                                         r"\(RuntimeError: view size is .*declare `contiguous: \[cache\]`"):
        checks.assert_non_contiguous_inputs(viewed, call)
    lost = define("token_rows_lost" + schema, _token_rows_lost_when_transposed, lambda cache, rows, slots: None)
    with pytest.raises(checks.CheckFailed, match=r"gives other values for transposed inputs than for contiguous ones: "
                                                 r".*argument 'cache'"):
        checks.assert_non_contiguous_inputs(lost, call)


# --- rank and repeated indices --------------------------------------------------------------------------------


def _rows_of_2d(x):  # written for [rows, 2 * d]: a 3-D x is read as rows of its two trailing dims
    return _gelu_and_mul_reference(x.reshape(x.shape[0], -1)).reshape(*x.shape[:-1], -1)


def test_a_leading_dim_is_added_and_a_kernel_written_for_two_dims_fails():
    twin = _gated("gelu_and_mul_rank_twin", _even_only_kernel)
    assert "examples[0] with a leading dim of 2 on x" in labels(twin, gated_examples)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with a leading dim of 2 on x"):
        checks.assert_matches_reference(_gated("gelu_and_mul_2d", _rows_of_2d), gated_examples)


def _index_add_reference(out, index, src):
    return out.index_add(0, index, src)


def _add_through_indexing(out, index, src):  # `out[index] += src` keeps one of two rows sent to one index
    out = out.clone()
    out[index] += src
    return out


def test_an_index_is_repeated_and_a_scatter_losing_one_of_two_fails():
    schema = "(Tensor out, Tensor index, Tensor src) -> Tensor"
    fake = lambda out, index, src: torch.empty_like(out)
    examples = lambda seed: [{"out": checks.random_tensor((6, 4), torch.float32, torch.Generator().manual_seed(seed)),
                              "index": torch.tensor([4, 1, 3]),
                              "src": checks.random_tensor((3, 4), torch.float32, torch.Generator().manual_seed(seed + 3))}]
    nonempty = {"out": checks.Domain(nonempty=True)}  # (torch's index_add takes indices into an empty out)
    twin = define("index_add_twin" + schema, _index_add_reference, fake, _index_add_reference, inputs=nonempty)
    checks.assert_matches_reference(twin, examples)
    planted = define("index_add_lossy" + schema, _add_through_indexing, fake, _index_add_reference, inputs=nonempty)
    with pytest.raises(checks.CheckFailed, match=r"on 1 of .* \(by kind of input: duplicate 1\):\n  .*examples\[0\] "
                                                 r"with index repeating an index \(index\[1\] = index\[0\]\)"):
        checks.assert_matches_reference(planted, examples)


# --- the extreme of a reduced row at its head and its tail ------------------------------------------------------


def _row_max_reference(x, dim=-1):
    return x.amax(dim)


def _row_max_vector_tail_skipped(x, dim=-1):  # vectors of 8 along the row, the scalar tail loop forgotten
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    return x[..., : n - n % 8 if n > 8 else n].amax(-1)


def _row_max_from_one(x, dim=-1):  # the running max starts from element 1 once a row holds two vectors
    x = x.movedim(dim, -1)
    return x[..., 1:].amax(-1) if x.shape[-1] > 16 else x.amax(-1)


def row_max_examples(seed: int = 0) -> list[dict]:
    return [{"x": checks.random_tensor((4, 96), torch.float32, torch.Generator().manual_seed(seed)), "dim": 1}]


def _row_max(name: str, kernel) -> checks.Op:
    return define(f"{name}(Tensor x, int dim=-1) -> Tensor", kernel,
                  lambda x, dim=-1: x.new_empty(x.shape[:dim % x.dim()] + x.shape[dim % x.dim() + 1:]),
                  _row_max_reference)


def test_the_extreme_of_a_reduced_row_is_put_at_its_head_and_its_tail():
    """A row max that drops a 1-element tail past its vectors of 8 is wrong only where the max is in the tail: one
    row in the row's length with random data, so the odd size and the tile size pass by chance; the extreme placed
    in the last element of the odd and tile-sized rows (the first example's) catches it. One that skips the head is caught by the head
    variant. The reduced dim is the `dim` argument's; the twin passes."""
    twin = _row_max("row_max_twin", _row_max_reference)
    found = [v.label for v in checks.variants(twin, row_max_examples) if v.kind == "extreme"]
    assert found == ["examples[0] with the largest value of each row along dim 1 in its first element",
                     ("examples[0] with its size 96 as 97, with the largest value of each row along dim 1 in its "
                      "last element"),
                     ("examples[0] with its size 96 as 1537, with the largest value of each row along dim 1 in its "
                      "last element")]
    checks.assert_matches_reference(twin, row_max_examples)
    with pytest.raises(checks.CheckFailed, match=r"\(by kind of input: [^)]*extreme 2[^)]*\):(.|\n)*with its size 96 "
                                                 r"as 97, with the largest value of each row along dim 1 in its last"):
        checks.assert_matches_reference(_row_max("row_max_tail", _row_max_vector_tail_skipped), row_max_examples)
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\] with the largest value of each row along dim 1 in its "
                                                 r"first element"):
        checks.assert_matches_reference(_row_max("row_max_head", _row_max_from_one), row_max_examples)


# --- tile sizes on the leading dims ------------------------------------------------------------------------------


def _row_blocks(drop_partial: bool):
    def kernel(x, eps=1e-6):  # rows in blocks of 1024 (one block when fewer); the planted one drops a partial last
        flat = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
        out = torch.zeros_like(flat)
        block = max(min(flat.shape[0], 1024), 1)
        stop = flat.shape[0] - block + 1 if drop_partial else flat.shape[0]
        for start in range(0, stop, block):
            out[start:start + block] = norm_reference(flat[start:start + block], eps)
        return out.reshape(x.shape)
    return kernel


def test_a_leading_dim_is_tried_at_a_tile_size_and_a_dropped_partial_row_block_fails():
    """Rows in blocks of 1024 with the partial last block dropped pass every example and every other size (a row
    count up to 1024 is one block); the leading dims at 1537 catch it. The twin passes."""
    twin = _norm("norm_row_blocks_twin", _row_blocks(False))
    found = labels(twin, norm_examples)
    assert [label for label in found if "(other leading sizes" in label] == [
        "examples[0] with its size 4 as 1537 (other leading sizes at 2 at most)"]
    checks.assert_matches_reference(twin, norm_examples)
    with pytest.raises(checks.CheckFailed, match=r"\(by kind of input: size-tile 1\):\n  .*examples\[0\] with its size 4 "
                                                 r"as 1537"):
        checks.assert_matches_reference(_norm("norm_row_blocks_dropped", _row_blocks(True)), norm_examples)
