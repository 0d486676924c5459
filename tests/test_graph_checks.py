"""opgen.testing, the checks of every generated project (the one implementation of the graph-entry tiers), tested
directly, without rendering a project: for each check a planted bug it must catch, with the message naming what
to fix, and a correct twin it must pass. The ops are small Library ops defined here (namespace `gc_test`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from forked_python import run_pytest
from npugraph_ex_state import needs_npugraph_ex

from opgen import testing as checks
from opgen.testing.capture_cpu import _new_values
from opgen.testing.non_contiguous import layouts

lib = torch.library.Library("gc_test", "FRAGMENT")
STATE = {"calls": 0}


def define(schema: str, kernel, fake=None, tags=(torch.Tag.pt2_compliant_tag,)) -> checks.Op:
    """A Library op with a CPU kernel and (optionally) a fake; the checks' view of it."""
    name = schema.split("(")[0]
    lib.define(schema, tags=tags)
    lib.impl(name, kernel, "CPU")
    if fake is not None:
        torch.library.register_fake(f"gc_test::{name}", fake, lib=lib)
    overload = getattr(torch.ops.gc_test, name.split(".")[0]).default
    returns = [r.name or f"out{i}" for i, r in enumerate(overload._schema.returns)]
    return checks.Op(overload, field="ops[0]", schema=f"gc_test::{schema}", cpu_kernel=f"kernels/{name}_cpu.py",
                     outputs=tuple(returns))


def _double_in_place(x, y):
    x.add_(y)


def _sneaky(x, y):
    x.add_(y)  # a write the schema does not declare
    return x * 2


def _cached_scale(x):
    STATE["calls"] += 1
    return x * STATE["calls"]  # another value on every call: compiled and eager disagree


def _specialising_fake(x):
    n = int(x.shape[0])  # a Python int of a size: Dynamo guards on it
    return x.new_empty(n, x.shape[1])


DOUBLE = define("double(Tensor x) -> Tensor", lambda x: x * 2, lambda x: torch.empty_like(x))
WRONG_VALUE = define("wrong_value(Tensor x) -> Tensor", lambda x: x * 3, lambda x: torch.empty_like(x))
WRONG_SHAPE = define("wrong_shape(Tensor x) -> Tensor", lambda x: x * 2, lambda x: x.new_empty(x.shape[0]))
WRONG_DTYPE = define("wrong_dtype(Tensor x) -> Tensor", lambda x: (x * 2).double(), lambda x: torch.empty_like(x))
CPU_FAKE = define("cpu_fake(Tensor x) -> Tensor", lambda x: x * 2,
                  lambda x: torch.empty(x.shape, dtype=x.dtype, device="cpu"))
UPDATE = define("update(Tensor(a!) x, Tensor y) -> ()", _double_in_place, lambda x, y: None)
NO_WRITE = define("no_write(Tensor(a!) x, Tensor y) -> ()", lambda x, y: None, lambda x, y: None)
SNEAKY = define("sneaky(Tensor x, Tensor y) -> Tensor", _sneaky, lambda x, y: torch.empty_like(x))
STATEFUL = define("stateful(Tensor x) -> Tensor", _cached_scale, lambda x: torch.empty_like(x))
TRANSPOSED = define("transposed(Tensor x) -> Tensor", lambda x: (x * 2).t().contiguous().t(),
                    lambda x: torch.empty(x.shape, dtype=x.dtype, device=x.device))
LIKE = define("like(Tensor x) -> Tensor", lambda x: x * 2, lambda x: torch.empty_like(x))  # elementwise: x's layout
SOFTMAX_LIKE = define("softmax_like(Tensor x) -> Tensor", lambda x: torch.softmax(x, -1),  # contiguous
                      lambda x: torch.empty_like(x))  # the spec's `like: x`, for an op that does not keep layouts
SPECIALISING = define("specialising(Tensor x) -> Tensor", lambda x: x * 2, _specialising_fake)
ALIASING = define("aliasing(Tensor(a!) x, float v) -> Tensor", lambda x, v: x.fill_(v),
                  lambda x, v: torch.empty_like(x))
def _nonzero_fake(x):
    n = torch.library.get_ctx().new_dynamic_size()
    torch._check(n <= x.numel())
    return x.new_empty(n, dtype=torch.int64)


NONZERO = define("nonzero(Tensor x) -> Tensor", lambda x: x.flatten().nonzero().flatten(), _nonzero_fake)
FILL_ALL = define("fill_all(Tensor(a!)[] xs, float v) -> ()", lambda xs, v: [x.fill_(v) for x in xs] and None,
                  lambda xs, v: None)


# --- kernels planted for the oracle tier, each with the reference it should agree with ----------------------------
CACHE: dict = {}
WORKSPACE: dict = {}


def _scale_reference(x, s=1.0):
    return x.float().mul(s).to(x.dtype)


def _scale_ignores_s(x, s=1.0):
    return x.float().to(x.dtype)


def _scale_in_half(x, s=1.0):
    return (x.half() * s).to(x.dtype)  # right for the float16 example only


def _scale_cached(x, s=1.0):
    key = (tuple(x.shape), x.dtype)
    if key not in CACHE:  # stale for every later call of the same shape
        CACHE[key] = _scale_reference(x, s)
    return CACHE[key].clone()


def _scale_workspace(x, s=1.0):
    key = (tuple(x.shape), x.dtype)
    out = WORKSPACE.setdefault(key, torch.empty_like(x))
    return out.copy_(_scale_reference(x, s))  # every call returns the same memory


def _scale_even_only(x, s=1.0):
    out = _scale_reference(x, s)
    if x.shape[-1] % 2:
        out[..., -1] = 0  # drops an odd tail
    return out


def _put_reference(cache, rows, index):
    cache.index_copy_(0, index, rows)


def _put_and_neighbour(cache, rows, index):
    cache.index_copy_(0, index, rows)
    cache[(index + 1) % cache.shape[0]] = 0  # writes the slot after each one too


def _put_cleared(cache, rows, index):
    cache.zero_()  # clears the whole cache first
    cache.index_copy_(0, index, rows)


def _put_swapped(cache, rows, index):
    fresh = cache.clone()
    fresh.index_copy_(0, index, rows)
    cache.set_(fresh)  # the caller's tensor now points at other memory


def _put_and_restore(cache, rows, index):
    rows.mul_(2).div_(2)  # a write to an input the schema does not declare, undone
    cache.index_copy_(0, index, rows)


def _scale_op(name: str, kernel, dtypes=()) -> checks.Op:
    op = define(f"{name}(Tensor x, float s=1.0) -> Tensor", kernel, lambda x, s=1.0: torch.empty_like(x))
    return checks.Op(op.overload, field="ops[0]", cpu_kernel=op.cpu_kernel, outputs=op.outputs,
                     reference=_scale_reference, dtypes=dtypes)


def _put_op(name: str, kernel) -> checks.Op:
    op = define(f"{name}(Tensor(a!) cache, Tensor rows, Tensor index) -> ()", kernel, lambda cache, rows, index: None)
    return checks.Op(op.overload, field="ops[0]", cpu_kernel=op.cpu_kernel, reference=_put_reference)


def scale_examples(seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"x": checks.random_tensor((4, 8), torch.float16, g)}, {"x": checks.random_tensor((2, 6), torch.float32, g)}]


def put_examples(seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{"cache": checks.random_tensor((8, 4), torch.float32, g), "rows": checks.random_tensor((2, 4), torch.float32, g),
             "index": torch.tensor([5, 1])}]


def x_call(seed: int = 0, shape=(4, 8)) -> dict:
    return {"x": checks.random_tensor(shape, torch.float32, torch.Generator().manual_seed(seed))}


def xy_call(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"x": checks.random_tensor((4, 8), torch.float32, g), "y": checks.random_tensor((4, 8), torch.float32, g)}


def same_shape(*, x, **_) -> list:
    return [(x.shape, x.dtype)]


# --- registration ----------------------------------------------------------------------------------


def test_registration_passes_a_correct_op_and_names_what_differs():
    checks.assert_registered(DOUBLE, ("CPU", "Meta"), tags=(torch.Tag.pt2_compliant_tag,))
    with pytest.raises(AssertionError, match="ops.py registers no NPU kernel"):
        checks.assert_registered(DOUBLE, ("CPU", "PrivateUse1"), tags=(torch.Tag.pt2_compliant_tag,))
    with pytest.raises(AssertionError, match="the tags of the registration in ops.py"):
        checks.assert_registered(DOUBLE, ("CPU",), tags=())
    drifted = checks.Op(DOUBLE.overload, field="ops[0]", schema="gc_test::double(Tensor x, int n=1) -> Tensor")
    with pytest.raises(AssertionError, match=r"but ops\[0\].schema in opgen.yaml is gc_test::double\(Tensor x, int n=1\)"):
        checks.assert_registered(drifted, ("CPU",), tags=(torch.Tag.pt2_compliant_tag,))
    with pytest.raises(AssertionError, match="does not mark it side-effecting"):
        checks.assert_registered(DOUBLE, ("CPU",), tags=(torch.Tag.pt2_compliant_tag,), side_effect=True)


def test_alias_set_letters_do_not_matter_to_the_schema_check():
    renamed = checks.Op(UPDATE.overload, field="ops[0]", schema="gc_test::update(Tensor(b!) x, Tensor y) -> ()")
    checks.assert_registered(renamed, ("CPU",), tags=(torch.Tag.pt2_compliant_tag,))


def test_a_kernel_whose_signature_drifted_is_named():
    def update_cpu(x, y):
        pass

    def update_cpu_drifted(x, other):
        pass

    checks.assert_signature(update_cpu, UPDATE)
    with pytest.raises(AssertionError, match=r"test_graph_checks.py: def update_cpu_drifted\(x, other\) no longer "
                                             r"matches ops\[0\].schema in opgen.yaml, which takes \(x, y\)"):
        checks.assert_signature(update_cpu_drifted, UPDATE)


# --- fake tensors ----------------------------------------------------------------------------------


def test_fake_tracing_passes_a_correct_op_and_catches_wrong_metadata_and_device():
    checks.assert_enters_graph(DOUBLE, x_call(), same_shape)
    checks.assert_enters_graph(UPDATE, xy_call())  # mutable: functionalized
    with pytest.raises(AssertionError, match=r"opgen.yaml: ops\[0\].outputs.out0.shape: the fake gives \(4,\)"):
        checks.assert_enters_graph(WRONG_SHAPE, x_call(), same_shape)
    with pytest.raises(AssertionError, match=r"ops\[0\].outputs.out0: the fake function of .* puts it on cpu"):
        checks.assert_enters_graph(CPU_FAKE, x_call(), same_shape)


def test_the_kernel_is_held_to_the_semantics():
    checks.assert_follows_semantics(DOUBLE, [x_call()], same_shape)
    with pytest.raises(AssertionError, match=r"ops\[0\].outputs.out0.dtype: the CPU kernel \(kernels/wrong_dtype_cpu.py\) "
                                             r"gives torch.float64 on ops\[0\].examples\[0\], the spec says torch.float32"):
        checks.assert_follows_semantics(WRONG_DTYPE, [x_call()], same_shape)


# --- the CPU kernel --------------------------------------------------------------------------------


def test_expected_values_are_independent_of_the_kernel():
    call = {"x": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
    expected = (checks.Expected(example=0, name="out0", values=[[2.0, 4.0], [6.0, 8.0]]),)
    checks.assert_expected(DOUBLE, [call], expected)
    with pytest.raises(checks.CheckFailed, match=r"expect.out0: 4 of 4 values differ .* first at index \[0, 0\]: "
                                                 r"got 3, expected 2") as caught:
        checks.assert_expected(WRONG_VALUE, [call], expected)
    assert caught.value.kind == "wrong-values"
    rows = (checks.Expected(example=0, name="x", rows={1: [3.5, 5.0], 5: [0.0, 0.0]}),)
    with pytest.raises(checks.CheckFailed, match=r"expect.x.rows.5: no such row"):
        checks.assert_expected(UPDATE, [{"x": call["x"], "y": torch.full((2, 2), 0.5)}], rows)


def test_writes_must_be_exactly_the_declared_ones():
    checks.assert_writes(UPDATE, [xy_call()])
    with pytest.raises(checks.CheckFailed, match=r"changed argument 'x' in ops\[0\].examples\[0\], but ops\[0\].schema "
                                                 r"in opgen.yaml does not mark it written: declare it `Tensor\(a!\) x`"):
        checks.assert_writes(SNEAKY, [xy_call()])
    with pytest.raises(checks.CheckFailed, match=r"marks 'x' \(schema argument 0\) written \(Tensor\(a!\)\), but "
                                                 r"kernels/no_write_cpu.py changed it on no example"):
        checks.assert_writes(NO_WRITE, [xy_call()])


def test_opcheck_catches_a_wrong_fake_and_names_the_files():
    checks.opcheck(DOUBLE, [x_call()])
    with pytest.raises(AssertionError, match=r"check the CPU kernel kernels/wrong_shape_cpu.py against the fake"):
        checks.opcheck(WRONG_SHAPE, [x_call()])


FP8 = torch.float8_e4m3fn


def _fp8_quant(result, x, scale):
    result.copy_((x.float() / scale).clamp(-448.0, 448.0).to(FP8))


def _fp8_quant_and_sign(result, x, scale, sign):
    _fp8_quant(result, x, scale)
    sign.copy_(sign.abs())  # an undeclared write: -0.0 becomes 0.0, equal values with other bits


def _fp8_identity(x):
    return x  # the input's memory, where the schema promises a new tensor


FP8_QUANT = define("fp8_quant(Tensor(a!) result, Tensor x, Tensor scale) -> ()", _fp8_quant, lambda r, x, s: None)
FP8_SIGN = define("fp8_sign(Tensor(a!) result, Tensor x, Tensor scale, Tensor sign) -> ()", _fp8_quant_and_sign,
                  lambda r, x, s, sign: None)
FP8_IDENTITY = define("fp8_identity(Tensor x) -> Tensor", _fp8_identity, lambda x: torch.empty_like(x))


def fp8_call(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"result": torch.zeros(4, 8, dtype=FP8), "x": torch.randn(4, 8, generator=g), "scale": torch.tensor([0.5])}


def test_opcheck_asks_test_schemas_questions_bit_for_bit_on_float8():
    """torch's test_schema raises on any float8 argument (torch.allclose has no float8 kernel on CPU): opcheck runs
    torch's other test_utils and asks test_schema's questions itself, comparing float8 bits."""
    with pytest.raises(Exception, match="not implemented for 'Float8_e4m3fn'"):  # torch's limitation, as it stands
        torch.library.opcheck(FP8_QUANT.overload, (), fp8_call(), test_utils=["test_schema"])
    checks.opcheck(FP8_QUANT, [fp8_call(), fp8_call(1)])
    sign = {**fp8_call(), "sign": torch.full((4,), -0.0).to(FP8)}
    with pytest.raises(checks.CheckFailed, match=r"kernels/fp8_sign_cpu.py changed argument 'sign' \(compared bit "
                                                 r"for bit.*declare it `Tensor\(a!\) sign`") as caught:
        checks.opcheck(FP8_SIGN, [sign])
    assert caught.value.kind == "undeclared-mutation"
    with pytest.raises(checks.CheckFailed, match=r"is argument 'x' or a view of it") as caught:
        checks.opcheck(FP8_IDENTITY, [{"x": torch.randn(4, 8).to(FP8)}])
    assert caught.value.kind == "view-return"


def _fp8_stateful(x):
    STATE["calls"] += 1
    return (x.float() * STATE["calls"]).to(FP8)  # another value on every call


FP8_STATEFUL = define("fp8_stateful(Tensor x) -> Tensor", _fp8_stateful, lambda x: torch.empty_like(x, dtype=FP8))


def test_compiled_and_eager_float8_results_are_compared_bit_for_bit():
    """torch 2.6 and 2.7's assert_close raise their own error on float8 values that differ: the bits are compared."""
    checks.assert_compiled_matches_eager(FP8_QUANT, [fp8_call(), fp8_call(1)])
    with pytest.raises(AssertionError, match=r"(?s)Tensor-likes are not equal.*float8 values compared as their bits"):
        checks.assert_compiled_matches_eager(FP8_STATEFUL, [{"x": torch.ones(4, 8)}])


def test_compiled_must_equal_eager():
    checks.assert_compiled_matches_eager(DOUBLE, [x_call(), x_call(1)])
    checks.assert_compiled_matches_eager(UPDATE, [xy_call()])
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        checks.assert_compiled_matches_eager(STATEFUL, [x_call()])


def _written_out_kernel(out, x):
    out.copy_(x * 2)


WRITTEN_OUT = define("written_out(Tensor(a!) out, Tensor x) -> ()", _written_out_kernel, lambda out, x: None)


class _RecordedCall:
    """Stands for an overload: what `call_as_declared` passes it, positionally and by keyword."""

    _schema = torch._C.parse_schema("f(Tensor(a!) out, Tensor x, float s=1.0, *, Tensor? bias=None) -> ()")

    def __call__(self, *args, **kwargs):
        return args, kwargs


def test_compiled_calls_pass_positional_arguments_by_position():
    call = checks.Op(_RecordedCall()).as_declared()
    assert call(x=2, out=1, bias=3) == ((1, 2), {"bias": 3})  # the keyword-only one by keyword
    assert call(out=1, x=2, s=0.5) == ((1, 2, 0.5), {})
    assert call(out=1, x=2, bias=3, s=0.5) == ((1, 2, 0.5), {"bias": 3})
    assert call(out=1, bias=3) == ((1,), {"bias": 3})
    # Dynamo refuses a non-contiguous tensor given as `out=`: a positional `out` given by keyword would be one
    transposed = {"out": torch.zeros(8, 4).t(), "x": torch.randn(4, 8)}
    checks.assert_compiled_matches_eager(WRITTEN_OUT, [transposed])
    checks.assert_non_contiguous_inputs(WRITTEN_OUT, {"out": torch.zeros(4, 8), "x": torch.randn(4, 8)})


def test_strides_of_the_fake_must_be_the_kernels_on_non_contiguous_inputs():
    checks.assert_non_contiguous_inputs(LIKE, x_call())  # empty_like keeps the input's layout, as the kernel does
    with pytest.raises(checks.CheckFailed, match=r"opgen.yaml: ops\[0\].outputs.out0: on transposed inputs the fake "
                                                 r"function gives strides \(8, 1\), the CPU kernel \(kernels/"
                                                 r"transposed_cpu.py\) returns \(1, 4\): either declare the layout") as caught:
        checks.assert_non_contiguous_inputs(TRANSPOSED, x_call())
    assert caught.value.kind == "fake-wrong-strides"
    with pytest.raises(checks.CheckFailed, match=r"the spec gives it an input's layout \(`like:`\), the kernel a "
                                                 r"contiguous tensor.*declare its shape and dtype instead"):
        checks.assert_non_contiguous_inputs(SOFTMAX_LIKE, x_call())


def test_one_graph_for_two_sizes_unless_the_fake_specialises():
    checks.assert_compiles_once(DOUBLE, [x_call(0, (4, 8)), x_call(1, (6, 8))], derived=False)
    with pytest.raises(AssertionError, match=r"compiled again for the second of the sizes .* the fake function "
                                             r"specialises on a size"):
        checks.assert_compiles_once(SPECIALISING, [x_call(0, (4, 8)), x_call(1, (6, 8))], derived=False)


def test_a_derived_second_size_the_kernel_refuses_is_a_skip_naming_what_to_add():
    mismatched = [xy_call(), {"x": torch.ones(4, 8), "y": torch.ones(4, 16)}]
    with pytest.raises(pytest.skip.Exception, match=r"opgen doubled the last size 8 of ops\[0\].examples\[0\] in y, "
                       r"keeping x as they are, and the CPU kernel refuses that call \(RuntimeError: .*\): add an "
                       r"example of the same dtypes with other sizes \(none 0 or 1\) to ops\[0\]"):
        checks.assert_compiles_once(UPDATE, mismatched, derived=True)


def _halves_fake(x, y):
    torch._check(x.shape[-1] == 2 * y.shape[-1],
                 lambda: "gc_test::halves: ops[0].checks[0] in opgen.yaml does not hold: x.shape[-1] == 2 * y.shape[-1]")
    return torch.empty_like(y)


def test_a_derived_second_size_outside_the_checks_is_a_skip_naming_the_check():
    """The kernel takes x [4, 16] beside y [4, 16] (it reads half of x), but the spec's checks want x twice as wide:
    a doubling that broke the relation is no call of the op, the tier skips naming the check (where it failed as
    'the fake raises' before). A pair within the checks compiles (test_one_graph_for_two_sizes...)."""
    op = define("halves(Tensor x, Tensor y) -> Tensor", lambda x, y: x[..., :y.shape[-1]] * y, _halves_fake)
    g = torch.Generator().manual_seed(0)
    calls = [{"x": torch.randn(4, 16, generator=g), "y": torch.randn(4, 8, generator=g)},
             {"x": torch.randn(4, 16, generator=g), "y": torch.randn(4, 16, generator=g)}]
    with pytest.raises(pytest.skip.Exception, match=r"opgen doubled the last size 8 of ops\[0\].examples\[0\] in y, "
                       r"keeping x as they are, and ops\[0\].checks\[0\] in opgen.yaml refuses that call: add an"):
        checks.assert_compiles_once(checks.Op(op.overload, field="ops[0]", checked=True), calls, derived=True)


# --- the independent oracle ----------------------------------------------------------------------------------


def test_the_sweep_varies_seeds_dtypes_defaults_and_sizes_and_permutes_exact_indices():
    op = _scale_op("sweep_shape", _scale_reference)
    labels = [v.label for v in checks.variants(op, scale_examples)]
    assert "examples[0], seed 2" in labels and "examples[0] in bfloat16" in labels and "examples[0] in float32" in labels
    assert "examples[0] with s=2.0 (its default is 1.0)" in labels  # a defaulted scalar moved off its default
    assert "examples[0] with its size 4 as 5" in labels and "examples[1] with its size 2 as 3" in labels
    put = _put_op("sweep_put", _put_reference)
    by_label = {v.label: v.call for v in checks.variants(put, put_examples)}
    assert by_label["examples[0], seed 1, index tensors permuted"]["index"].tolist() == [1, 5]
    assert not any("size 2 as" in label for label in by_label)  # the exact index tensor's length stays


@pytest.mark.parametrize(("name", "kernel", "expected"), [
    ("ignores_s", _scale_ignores_s, r"examples\[0\] with s=2.0 \(its default is 1.0\): ops\[0\].outputs.out0"),
    ("in_half", _scale_in_half, r"examples\[0\] in float32: ops\[0\].outputs.out0: .* values differ"),
    ("cached", _scale_cached, r"examples\[0\], seed 1: ops\[0\].outputs.out0"),
    ("workspace", _scale_workspace, r"the outputs of ops\[0\].examples\[0\], seed \d changed during later calls"),
    ("even_only", _scale_even_only, r"examples\[0\] with its size 8 as 9: ops\[0\].outputs.out0"),
])
def test_the_oracle_catches_kernels_right_only_on_the_examples(name, kernel, expected):
    planted = _scale_op(f"planted_{name}", kernel)
    with pytest.raises(checks.CheckFailed, match=expected) as caught:
        checks.assert_matches_reference(planted, scale_examples)
    assert "disagrees with ops[0].reference in opgen.yaml" in str(caught.value) and caught.value.kind == "wrong-values"


def test_the_oracle_passes_its_twin_and_skips_without_a_reference():
    checks.assert_matches_reference(_scale_op("twin_scale", _scale_reference), scale_examples)
    checks.assert_matches_reference(_put_op("twin_put", _put_reference), put_examples)
    with pytest.raises(pytest.skip.Exception, match=r"no `reference:` in ops\[0\] of opgen.yaml"):
        checks.assert_matches_reference(DOUBLE, lambda seed: [x_call(seed)])


@pytest.mark.parametrize(("name", "kernel"), [("neighbour", _put_and_neighbour), ("cleared", _put_cleared)])
def test_the_oracle_compares_all_of_a_written_buffer(name, kernel):
    with pytest.raises(checks.CheckFailed, match=r"examples\[0\], seed 0: argument 'cache' \(written\): "):
        checks.assert_matches_reference(_put_op(f"planted_{name}", kernel), put_examples)


def test_a_kernel_refusing_a_dtype_the_reference_takes_is_told_to_narrow_the_dtypes():
    def float_only(x, s=1.0):
        torch._check(x.dtype == torch.float32, lambda: "float32 only")
        return _scale_reference(x, s)

    with pytest.raises(checks.CheckFailed, match=r"fails on ops\[0\].examples\[0\], seed 0, which ops\[0\].reference "
                                                 r"accepts: .*float32 only"):
        checks.assert_matches_reference(_scale_op("float_only", float_only), scale_examples)
    narrowed = _scale_op("float_only_narrow", float_only, dtypes=(torch.float32,))
    checks.assert_matches_reference(narrowed, lambda seed: scale_examples(seed)[1:])  # its examples are float32


def test_strict_writes_see_a_swapped_storage_and_a_write_undone():
    with pytest.raises(checks.CheckFailed, match="swapped the memory of 'cache'") as caught:
        checks.assert_writes(_put_op("planted_swap", _put_swapped), put_examples())
    assert caught.value.kind == "storage-swapped"
    with pytest.raises(checks.CheckFailed, match=r"wrote argument 'rows' in ops\[0\].examples\[0\] in place \(and "
                                                 r"maybe restored it\)"):
        checks.assert_writes(_put_op("planted_restore", _put_and_restore), put_examples())
    checks.assert_writes(_put_op("twin_writes", _put_reference), put_examples())


def _reads_storage_order(x):
    flat = torch.as_strided(x, (x.numel(),), (1,))  # the storage as if contiguous
    return (flat * 2).reshape(x.shape)


def test_layouts_catch_a_kernel_reading_storage_order_and_one_needing_contiguous_inputs():
    storage = define("storage_order(Tensor x) -> Tensor", _reads_storage_order, lambda x: torch.empty_like(x))
    call = {"x": checks.random_tensor((2, 3, 4), torch.float32, torch.Generator().manual_seed(0))}
    with pytest.raises(checks.CheckFailed, match="gives other values for transposed inputs than for contiguous ones"):
        checks.assert_non_contiguous_inputs(storage, call)
    needs = define("needs_view(Tensor x) -> Tensor", lambda x: (x.view(-1) * 2).view(x.shape),
                   lambda x: torch.empty(x.shape, dtype=x.dtype, device=x.device))
    with pytest.raises(checks.CheckFailed, match=r"fails on a transposed 'x' .*view size is not compatible.*declare "
                                                 r"`contiguous: \[x\]` in ops\[0\]"):
        checks.assert_non_contiguous_inputs(needs, call)
    checks.assert_non_contiguous_inputs(LIKE, call)  # transposed, permuted (rank 3) and expanded: all fine
    assert [label for label, _, _ in layouts(LIKE, call)] == ["transposed", "permuted", "expanded"]
    image = {"x": checks.random_tensor((2, 3, 4, 5), torch.float32, torch.Generator().manual_seed(0))}
    assert "channels_last" in [label for label, _, _ in layouts(LIKE, image)]


def _drawn_in_other_order(x):  # its dims reversed in memory (any rank: the variants add a leading dim)
    return torch.rand(x.shape[::-1]).permute(*reversed(range(x.dim()))).contiguous()


def _noise_reference(x, s=1.0):
    return torch.rand_like(x) * s


def _random_op(name: str, kernel) -> checks.Op:
    op = define(f"{name}(Tensor x, float s=1.0) -> Tensor", kernel,
                lambda x, s=1.0: torch.empty(x.shape, dtype=x.dtype, device=x.device),
                tags=(torch.Tag.nondeterministic_seeded, torch.Tag.pt2_compliant_tag))
    return checks.Op(op.overload, field="ops[0]", cpu_kernel=op.cpu_kernel, outputs=op.outputs,
                     reference=_noise_reference, random=True)


def noise_examples(seed: int = 0) -> list[dict]:
    return [{"x": checks.random_tensor((16, 32), torch.float32, torch.Generator().manual_seed(seed))}]


def test_a_random_op_is_compared_by_seed_or_by_its_distribution():
    checks.assert_matches_reference(_random_op("noise_same", _noise_reference), noise_examples)  # same draws
    other_order = _random_op("noise_other_order", lambda x, s=1.0: _drawn_in_other_order(x) * s)
    checks.assert_matches_reference(other_order, noise_examples)  # other draws, the same distribution
    doubled = _random_op("noise_doubled", lambda x, s=1.0: torch.rand_like(x) * s * 2)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].outputs.out0 \(16 draws\): mean .*unlike the reference"):
        checks.assert_matches_reference(doubled, noise_examples)
    checks.assert_non_contiguous_inputs(other_order, noise_examples()[0])  # its draws follow memory order: fine


# --- capture & replay: the logic on CPU (aot_eager standing in for the device's graphs) -------------


def test_capture_replay_compares_with_the_cpu_kernel_and_reuses_written_buffers():
    checks.assert_capture_replay(UPDATE, xy_call, "cpu", backend="aot_eager")
    checks.assert_capture_replay(DOUBLE, x_call, "cpu", backend="aot_eager")
    with pytest.raises(AssertionError, match="cpu call 0: output 0 differs from the reference's"):
        checks.assert_capture_replay(STATEFUL, x_call, "cpu", backend="aot_eager")


def test_capture_replay_checks_the_outputs_device_before_comparing_values():
    """A kernel that leaves its output on another device fails before anything moves to CPU to compare
    (the planted kernel returns a meta tensor; its fake says cpu)."""
    elsewhere = define("elsewhere(Tensor x) -> Tensor", lambda x: torch.empty_like(x, device="meta"),
                       lambda x: torch.empty_like(x))
    with pytest.raises(AssertionError, match="cpu call 0: output 0 is on meta, not on cpu"):
        checks.assert_capture_replay(elsewhere, x_call, "cpu", backend="eager")


# --- npugraph_ex's compiler on CPU -----------------------------------------------------------------


@needs_npugraph_ex
def test_npugraph_ex_tier_passes_correct_ops_in_place():
    checks.assert_npugraph_ex_compiles_on_cpu(UPDATE, xy_call)
    checks.assert_npugraph_ex_compiles_on_cpu(DOUBLE, x_call)

    def two_buffers(seed):
        g = torch.Generator().manual_seed(seed)
        return {"xs": [checks.random_tensor((2, 3), torch.float32, g), checks.random_tensor((4,), torch.float32, g)],
                "v": 1.5}

    checks.assert_npugraph_ex_compiles_on_cpu(FILL_ALL, two_buffers)  # each tensor of a Tensor(a!)[] in place


@needs_npugraph_ex
def test_npugraph_ex_tier_names_an_undeclared_write_an_aliasing_output_and_a_wrong_fake():
    with pytest.raises(checks.CheckFailed, match="written into npugraph_ex's private input copy") as caught:
        checks.assert_npugraph_ex_compiles_on_cpu(SNEAKY, xy_call)
    assert caught.value.kind == "npugraph_ex-private-input-copy"
    # torch's own first-call check raises under CI=1 and warns elsewhere: the tier names it the same either way
    with pytest.raises(checks.CheckFailed, match=r"the kernel returns \(a view of\) an argument") as caught:
        checks.assert_npugraph_ex_compiles_on_cpu(ALIASING, lambda seed: {**x_call(seed), "v": 2.0})
    assert caught.value.kind == "view-return"
    with pytest.raises(checks.CheckFailed, match=r"output 0: the fake function says \(4,\) torch.float32, the kernel "
                                                 r"returned \(4, 8\)"):
        checks.assert_npugraph_ex_compiles_on_cpu(WRONG_SHAPE, x_call)


def _mutate_a_copy(gm, example_inputs=None, config=None):
    """A planted FX pass (a user pass npugraph_ex runs before its own): the functionalized op gets a clone of the
    caller's buffer, so re-inplacing ends with clone + op + copy_ back, correct but a copy per replay."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2

    for node in list(gm.graph.nodes):
        if node.target is auto_functionalized_v2:
            base = node.kwargs["_all_bases"][0]
            with gm.graph.inserting_before(node):
                clone = gm.graph.call_function(torch.ops.aten.clone.default, (base,))
            with base.meta["val"].fake_mode:
                clone.meta["val"] = base.meta["val"].clone()
            node.update_kwarg("_all_bases", [clone, *node.kwargs["_all_bases"][1:]])
    gm.recompile()


@needs_npugraph_ex
def test_npugraph_ex_tier_names_a_copy_of_a_mutated_buffer_and_accepts_a_correct_copy():
    with pytest.raises(checks.CheckFailed, match="npugraph_ex left copies of buffers the op mutates") as caught:
        checks.assert_npugraph_ex_compiles_on_cpu(UPDATE, xy_call, options={"post_grad_custom_post_pass": _mutate_a_copy})
    assert "target=torch.ops.aten.copy_.default](args = (%arg0_1, %clone_default)" in str(caught.value)

    def private_copy_then_reuse(x, y):
        """Mutates a copy of `x` and uses `x` again: the copy is correct and must stay."""
        private = x.clone()
        torch.ops.gc_test.update.default(private, y)
        return torch.cat([private, x])

    checks.assert_npugraph_ex_compiles_on_cpu(UPDATE, xy_call, fn=private_copy_then_reuse)


@needs_npugraph_ex
def test_what_the_skip_of_a_dynamic_ops_npugraph_ex_tier_says_is_true():
    """Generated projects skip this tier for a `dynamic` op, naming npugraph_ex's converter failure: it is real."""
    dynamic = checks.Op(NONZERO.overload, field="ops[0]", dynamic=True)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                       match="'>=' not supported between instances of 'ValuePack' and 'int'"):
        checks.assert_npugraph_ex_compiles_on_cpu(dynamic, lambda seed: {"x": torch.tensor([0.0, 1.0, 0.0, 2.0])})


# --- capture & replay on CPU: npugraph_ex's AclGraph over the emulated NPU graph ------------------------

CONFIG = {"scale": 1.0}  # a module-level config a planted kernel reads per call
KEPT = {}  # a buffer a planted kernel keeps across calls


def _validated(x):
    if x.isnan().any().item():  # planted: validation in the kernel
        raise ValueError("NaN input")
    return x * 2


def _value_branch(x):
    if x.abs().max() > 1:  # planted: a branch on a tensor value
        return x / x.abs().max()
    return x.clone()


def _value_where(x):
    peak = x.abs().max()
    return torch.where(peak > 1, x / peak, x)


def _zero_rows(x, idx):
    out = x.clone()
    for row in idx.tolist():  # planted: a loop over a tensor's values
        out[row] = 0
    return out


def _round_trip(x):
    host = x.cpu()  # planted: a copy to the host and back
    return (host * 2).to(x.device)


def _metadata(x):
    return x * x.shape[0] + x.dim()  # sizes and dims are host values a capture may read


def _configured(x):
    return x * CONFIG["scale"]  # planted: a module-level config read per call


def _noisy(x):
    return x + torch.rand_like(x)  # random numbers in a captured kernel


def _kept(x):
    out = KEPT.setdefault(tuple(x.shape), torch.empty_like(x))
    torch.mul(x, 2, out=out)  # planted: the output is a buffer kept across calls
    return out


def _rebind(x, y):
    x.set_(x + y)  # planted: the mutated argument gets new memory


def _npu_validated(x):
    if x.isnan().any():  # planted, in the NPU kernel
        raise ValueError("NaN input")
    return x * 2


def _npu_stub(x):
    raise NotImplementedError("gc_test::npu_stub has no NPU kernel yet: write it in kernels/npu_stub_npu.py")


VALIDATED = define("validated(Tensor x) -> Tensor", _validated, lambda x: torch.empty_like(x))
VALUE_BRANCH = define("value_branch(Tensor x) -> Tensor", _value_branch, lambda x: torch.empty_like(x))
VALUE_WHERE = define("value_where(Tensor x) -> Tensor", _value_where, lambda x: torch.empty_like(x))
ZERO_ROWS = define("zero_rows(Tensor x, Tensor idx) -> Tensor", _zero_rows, lambda x, idx: torch.empty_like(x))
INDEX_FILL = define("index_fill(Tensor x, Tensor idx) -> Tensor", lambda x, idx: x.index_fill(0, idx, 0),
                    lambda x, idx: torch.empty_like(x))
ROUND_TRIP = define("round_trip(Tensor x) -> Tensor", _round_trip, lambda x: torch.empty_like(x))
METADATA = define("metadata(Tensor x) -> Tensor", _metadata, lambda x: torch.empty_like(x))
CONFIGURED = define("configured(Tensor x) -> Tensor", _configured, lambda x: torch.empty_like(x))
SCALED = define("scaled(Tensor x, Tensor scale) -> Tensor", lambda x, scale: x * scale,
                lambda x, scale: torch.empty_like(x))
NOISY = define("noisy(Tensor x) -> Tensor", _noisy, lambda x: torch.empty_like(x))
KEEPS = define("keeps(Tensor x) -> Tensor", _kept, lambda x: torch.empty_like(x))
REBIND = define("rebind(Tensor(a!) x, Tensor y) -> ()", _rebind, lambda x, y: None)
VIEW = define("view(Tensor x) -> Tensor", lambda x: x.view(-1), lambda x: x.new_empty(x.numel()))
NPU_VALIDATED = define("npu_validated(Tensor x) -> Tensor", lambda x: x * 2, lambda x: torch.empty_like(x))
lib.impl("npu_validated", _npu_validated, "PrivateUse1")
NPU_PLAIN = define("npu_plain(Tensor x) -> Tensor", lambda x: x * 2, lambda x: torch.empty_like(x))
lib.impl("npu_plain", lambda x: x * 2, "PrivateUse1")
NPU_STUB = define("npu_stub(Tensor x) -> Tensor", lambda x: x * 2, lambda x: torch.empty_like(x))
lib.impl("npu_stub", _npu_stub, "PrivateUse1")
def _stream_synced(x):
    torch.npu.current_stream().synchronize()  # planted: the host waits for the stream the kernel runs on
    return x * 2


def _stream_ordered(x):
    side = torch.npu.Stream()
    side.wait_stream(torch.npu.current_stream())  # the twin: streams ordered on the device
    return x * 2


STREAM_SYNCED = define("stream_synced(Tensor x) -> Tensor", _stream_synced, lambda x: torch.empty_like(x))
STREAM_ORDERED = define("stream_ordered(Tensor x) -> Tensor", _stream_ordered, lambda x: torch.empty_like(x))
# a CPU kernel standing in for an NPU kernel still a stub: its host reads say nothing about the kernel the NPU runs
STUB_VALIDATED = define("stub_validated(Tensor x) -> Tensor", _validated, lambda x: torch.empty_like(x))
lib.impl("stub_validated", _npu_stub, "PrivateUse1")
STUB_FROZEN = define("stub_frozen(Tensor x) -> Tensor", _configured, lambda x: torch.empty_like(x))
lib.impl("stub_frozen", _npu_stub, "PrivateUse1")


def _validated_sneaky(x, y):
    if x.isnan().any().item():
        raise ValueError("NaN input")
    y.add_(1)  # planted in the plumbing: a write to an argument the schema does not mark Tensor(a!)
    return x * 2


STUB_SNEAKY = define("stub_sneaky(Tensor x, Tensor y) -> Tensor", _validated_sneaky, lambda x, y: torch.empty_like(x))
lib.impl("stub_sneaky", lambda x, y: _npu_stub(x), "PrivateUse1")


def line_of(function, text: str) -> str:
    """`test_graph_checks.py:<line>: <code>` of the line of `function` holding `text`, as the capture tier shows it."""
    import inspect

    lines, first = inspect.getsourcelines(function)
    number, code = next((first + i, line.strip()) for i, line in enumerate(lines) if text in line)
    return f"test_graph_checks.py:{number}: {code}"


def idx_call(seed: int = 0) -> dict:
    return {**x_call(seed), "idx": torch.tensor([0, 2])}


def capture_replay(op, make_call, **kwargs) -> str:
    return checks.assert_npugraph_ex_capture_replay_on_cpu(op, make_call, **kwargs)


@needs_npugraph_ex
def test_capture_tier_passes_correct_ops_and_says_what_aclgraph_did():
    report = capture_replay(UPDATE, xy_call)
    assert "npugraph_ex's AclGraph captured its CPU kernel (kernels/update_cpu.py; the op has no NPU kernel)" in report
    assert "1 capture and 3 replays for 3 calls; the kernel's Python ran 1 time(s) at capture and 0 during" in report
    assert "new memory for 'x' (same shapes) made AclGraph recapture once (recapture_due_to_mutated_input_change)" in (
        report)
    report = capture_replay(DOUBLE, x_call)
    assert "output 0 of call 1, kept without a clone, is the memory of call 3's and holds its values" in report
    assert "static output memory" not in capture_replay(DOUBLE, x_call, options={"clone_output": True})

    def two_buffers(seed):
        g = torch.Generator().manual_seed(seed)
        return {"xs": [checks.random_tensor((2, 3), torch.float32, g), checks.random_tensor((4,), torch.float32, g)],
                "v": 1.5}

    assert "recapture once" in capture_replay(FILL_ALL, two_buffers)  # each tensor of a Tensor(a!)[] in place


@needs_npugraph_ex
@pytest.mark.parametrize(("planted", "twin", "make_call", "text", "fix"), [
    (VALIDATED, DOUBLE, x_call, "if x.isnan().any().item():", "check the inputs before calling the op"),
    (VALUE_BRANCH, VALUE_WHERE, x_call, "if x.abs().max() > 1:", "torch.where(condition, a, b)"),
    (ZERO_ROWS, INDEX_FILL, idx_call, "for row in idx.tolist():", "index with tensors instead of Python lists"),
    (ROUND_TRIP, METADATA, x_call, "host = x.cpu()", "keep the data on the device"),
], ids=["item-validation", "value-branch", "tolist", "cpu-round-trip"])
def test_capture_tier_names_the_kernel_line_of_a_host_sync_and_passes_its_twin(planted, twin, make_call, text, fix):
    kernel = {VALIDATED: _validated, VALUE_BRANCH: _value_branch, ZERO_ROWS: _zero_rows, ROUND_TRIP: _round_trip}[planted]
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(planted, make_call)
    message = str(caught.value)
    assert caught.value.kind == "cpu-sync-in-kernel"
    assert f"cannot be captured by npugraph_ex: its CPU kernel (kernels/{planted.overload._schema.name[9:]}_cpu.py" in (
        message)
    assert line_of(kernel, text) in message and "fix: " in message and fix in message, message
    assert "during NPU graph capture. If you need this call to be captured, please file an issue" in message
    capture_replay(twin, make_call)


@needs_npugraph_ex
def test_capture_tier_names_a_frozen_config_and_passes_the_value_as_a_tensor():
    def configured_call(seed):
        CONFIG["scale"] = 1.0 + seed  # the caller changes the config between calls
        return x_call(seed)

    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(CONFIGURED, configured_call)
    assert caught.value.kind == "capture-frozen-value"
    message = str(caught.value)
    assert line_of(_configured, 'CONFIG["scale"]') in message
    assert "it launched aten.mul.Tensor with 1.0 at capture, 2.0 now" in message, message
    assert "seen as: npugraph_ex on CPU, call 2: output 0 differs" in message
    capture_replay(SCALED, lambda seed: {**x_call(seed), "scale": torch.tensor(1.0 + seed)})


@needs_npugraph_ex
def test_capture_tier_fails_random_numbers_unless_allowed_then_warns(monkeypatch):
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(NOISY, x_call)
    assert caught.value.kind == "random-op" and "npugraph_ex does not support random-number ops in capture" in str(
        caught.value)
    assert line_of(_noisy, "torch.rand_like") in str(caught.value)
    assert "declare it, `tags: [nondeterministic_seeded]` in opgen.yaml: ops[0].tags, which makes this a warning" in (
        str(caught.value))  # issue 25 item 7: a random kernel is told how to declare it
    with pytest.warns(UserWarning, match="draws random numbers while it is captured"):
        report = capture_replay(NOISY, x_call, allow_random=True)
    assert "random numbers in the captured kernel accepted (allow_random): aten.rand_like.default" in report
    monkeypatch.setenv("OPGEN_ALLOW_RANDOM_IN_CAPTURE", "1")  # the opt-out a generated project's tests read
    with pytest.warns(UserWarning, match="a warning-level finding: OPGEN_ALLOW_RANDOM_IN_CAPTURE=1 accepts it"):
        capture_replay(NOISY, x_call)


@needs_npugraph_ex
@pytest.mark.parametrize(("op", "make_call", "kind", "text"), [
    (KEEPS, x_call, "capture-static-output", "(kernels/keeps_cpu.py; the op has no NPU kernel) keeps across calls"),
    (REBIND, xy_call, "capture-recapture", "gives the argument it writes, 'x', new memory"),
    (VIEW, x_call, "view-return", "returns the memory of an input"),
    (SNEAKY, xy_call, "npugraph_ex-private-input-copy", "argument 'x' after the call differs from the reference's"),
], ids=["kept-buffer", "rebinds-argument", "view", "undeclared-write"])
def test_capture_tier_names_output_memory_and_argument_memory_problems(op, make_call, kind, text):
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(op, make_call)
    assert caught.value.kind == kind and text in str(caught.value), str(caught.value)
    planted = {KEEPS: (_kept, "torch.mul(x, 2, out=out)"), REBIND: (_rebind, "x.set_(x + y)")}.get(op)
    if planted:
        assert line_of(*planted) in str(caught.value)


@needs_npugraph_ex
def test_capture_tier_captures_a_plain_torch_npu_kernel_and_says_which_kernel_it_captured():
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(NPU_VALIDATED, x_call)
    assert "its NPU (PrivateUse1) kernel, plain torch on CPU, makes a call" in str(caught.value)
    assert line_of(_npu_validated, "if x.isnan().any():") in str(caught.value)
    assert "captured its NPU (PrivateUse1) kernel, plain torch on CPU," in capture_replay(NPU_PLAIN, x_call)
    report = capture_replay(NPU_STUB, x_call)
    assert ("captured its CPU kernel (kernels/npu_stub_cpu.py; the NPU kernel is not plain torch on CPU: "
            "NotImplementedError: gc_test::npu_stub has no NPU kernel yet") in report


@needs_npugraph_ex
def test_a_stand_in_for_a_stub_npu_kernel_that_reads_the_host_is_a_skip_naming_the_line_not_a_failure():
    """The NPU kernel is a stub, so the CPU kernel is captured in its place: its host read (or a config it reads per
    call) is reported as a skip naming the line and what the NPU kernel must not do, after the op's plumbing passed
    as one launch. The same kernel as the op's only kernel (VALIDATED, the device kernel on a CPU op) fails."""
    for op, kernel, text, finding in ((STUB_VALIDATED, _validated, "if x.isnan().any().item():", "a tensor value read"),
                                      (STUB_FROZEN, _configured, 'CONFIG["scale"]', "is frozen in the captured graph")):
        def make_call(seed):
            CONFIG["scale"] = 1.0 + seed
            return x_call(seed)

        with pytest.raises(pytest.skip.Exception) as caught:
            capture_replay(op, make_call)
        message = str(caught.value)
        assert "capture on CPU judged only the op's plumbing, which passed" in message, message
        assert "captured as one launch and replayed 3 times with new values" in message
        assert "stands in for the kernel the device runs (the NPU kernel is not plain torch on CPU: " in message
        assert "and that kernel must not do what the stand-in does here" in message
        assert line_of(kernel, text) in message and finding in message, message
    with pytest.raises(checks.CheckFailed) as failed:
        capture_replay(VALIDATED, x_call)
    assert failed.value.kind == "cpu-sync-in-kernel" and "judged only the op's plumbing" not in str(failed.value)


@needs_npugraph_ex
def test_a_kernel_synchronizing_a_stream_is_stream_misuse_and_its_device_ordered_twin_passes():
    """A host wait on a stream (or an event) breaks the capture, and a multi-stream scope it would run in: refused
    with the line and the device-side fix; ordering streams with wait_stream is captured."""
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(STREAM_SYNCED, x_call)
    message = str(caught.value)
    assert caught.value.kind == "stream-misuse", message
    assert line_of(_stream_synced, "synchronize()") in message and "Stream.synchronize() of" in message
    assert "order streams with events on the device (stream.wait_stream(other)" in message
    capture_replay(STREAM_ORDERED, x_call)


@needs_npugraph_ex
def test_a_stand_in_still_fails_on_the_ops_own_plumbing():
    """Judged as one launch, a stand-in that writes an argument the schema does not mark Tensor(a!) fails: the write
    lands in npugraph_ex's private copy, whatever the kernel that makes it."""
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(STUB_SNEAKY, xy_call)
    assert caught.value.kind == "npugraph_ex-private-input-copy", str(caught.value)
    assert "argument 'y' after the call differs from the reference's" in str(caught.value)


@needs_npugraph_ex
def test_a_compiled_kernel_is_captured_as_one_launch_and_its_fake_plans_the_outputs():
    """torch's own C++ quantization ops (tests/native_ops.py): captured as one launch each and replayed whole, equal
    to eager on new values; the one whose fake gives float16 where its kernel returns float32 fails, named."""
    import native_ops

    def values(seed):
        return {"input": checks.random_tensor((4, 8), torch.float32, torch.Generator().manual_seed(seed))}

    report = capture_replay(checks.Op(native_ops.TO_BF16), values)
    assert "captured its CPU kernel (compiled code; the op has no NPU kernel), as one launch of the op" in report
    assert "1 kernel launches recorded, 1 capture and 3 replays for 3 calls; the kernel runs whole at each" in report
    with pytest.raises(checks.CheckFailed) as caught:
        capture_replay(checks.Op(native_ops.FROM_BF16), lambda seed: {"input": native_ops.TO_BF16(values(seed)["input"])})
    assert caught.value.kind == "fake-wrong-metadata"
    assert ("output 0 of quantization::_Bfloat16QuantizedToFloat: its fake says [4, 8] torch.float16, its kernel "
            "returned [4, 8] torch.float32") in str(caught.value)


@needs_npugraph_ex
def test_capture_tier_compares_with_the_reference_it_is_given():
    """`reference` is the oracle (the CPU kernel by default): a wrong one fails, an independent correct one passes."""
    capture_replay(DOUBLE, x_call, reference=lambda call: call["x"] + call["x"])
    with pytest.raises(checks.CheckFailed, match="call 1: output 0 differs from the reference's"):
        capture_replay(DOUBLE, x_call, reference=lambda call: call["x"] * 3)


def test_replays_see_new_values_fixed_ones_and_indices_permuted_in_range():
    def fixed(seed):
        return {"x": checks.random_tensor((4,), torch.float32, torch.Generator().manual_seed(seed)),
                "idx": torch.tensor([3, 0, 2, 1]), "xs": [torch.tensor([5.0, 6.0, 7.0])], "n": 2}

    varied = _new_values(fixed)
    first, later = varied(0), varied(1)
    assert torch.equal(first["idx"], torch.tensor([3, 0, 2, 1])) and not torch.equal(later["idx"], first["idx"])
    assert sorted(later["idx"].tolist()) == [0, 1, 2, 3] and sorted(later["xs"][0].tolist()) == [5.0, 6.0, 7.0]
    assert not torch.equal(later["xs"][0], first["xs"][0]) and later["n"] == 2
    assert torch.equal(later["x"], fixed(1)["x"])  # random values are new already: left as drawn

    def needs_order(call):
        if not bool((call["idx"][1:] >= call["idx"][:-1]).all()):
            raise ValueError("offsets must not decrease")

    ordered = _new_values(lambda seed: {**fixed(seed), "idx": torch.tensor([0, 1, 3, 7])}, needs_order)
    assert torch.equal(ordered(1)["idx"], torch.tensor([0, 1, 3, 7]))  # refused once permuted: kept as given


# --- the module itself -----------------------------------------------------------------------------


def test_the_library_is_ruff_clean_and_imports_only_the_standard_library_torch_and_pytest():
    """Every module of opgen.testing imports the standard library, torch, pytest and its siblings, nothing of the
    rest of opgen: a generated project's tests need opgen.testing only."""
    import ast
    import shutil
    from pathlib import Path

    ruff = shutil.which("ruff") or pytest.fail("ruff is not installed (it is part of the test extra)")
    library = Path(checks.__file__).parent
    done = subprocess.run([ruff, "check", "--no-cache", "--isolated", "--line-length", "120", "--select",
                           "E,F,W,ARG,B", str(library)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    # transformers: only inside the models tier of a fusion, which skips without it; npugraph_ex: loaded by
    # npugraph_ex_cpu from opgen's cache
    allowed = {"torch", "pytest", "torch_npu", "transformers"}
    for path in sorted(library.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
        assert imported - set(sys.stdlib_module_names) <= allowed, path.name


@pytest.mark.slow  # generates a project, runs one of its tests and `opgen check` on it
def test_generated_tests_and_opgen_check_run_this_very_module(tmp_path):
    """A bug planted in opgen.testing (in a copy of opgen) fails both a generated project's tier
    and the same rung of `opgen check`: there is one implementation of each tier."""
    import os
    import shutil

    from new_helpers import REPO, pythonpath

    copy = tmp_path / "opgen_copy"
    shutil.copytree(REPO / "opgen", copy / "opgen", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "templates", copy / "templates", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    planted = copy / "opgen" / "testing" / "compiled.py"
    text = planted.read_text(encoding="utf-8")
    exact = ("        assert_same_results(actual, expected)\n"
             "        assert_same_results(tensors(call)")
    assert text.count(exact) == 1
    planted.write_text(text.replace(exact, "        assert_same_results(actual, [t + 1 for t in tensors(expected)])"
                                          "  # planted\n"
                                          "        assert_same_results(tensors(call)"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(copy)}  # and cwd outside the checkout: `python -m` puts cwd first
    project = tmp_path / "project"
    done = subprocess.run([sys.executable, "-m", "opgen", "new", str(REPO / "examples" / "rms_norm.yaml"), "-o",
                           str(project)], env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert not (project / "tests" / "compiled.py").exists()  # the project's tests import the library
    tests = run_pytest(["-q", "-p", "no:cacheprovider", "-k", "compiled_matches_eager", str(project)],
                       env={**env, "PYTHONPATH": os.pathsep.join([str(copy), pythonpath([project])])}, cwd=tmp_path)
    assert tests.returncode == 1 and "1 failed" in tests.stdout, tests.stdout[-2000:]
    checked = subprocess.run([sys.executable, "-m", "opgen", "check", str(project), "--skip", "static", "--skip",
                              "npugraph_ex", "--json"], env=env, cwd=tmp_path, capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    rungs = {r["name"]: r["status"] for r in __import__("json").loads(checked.stdout.splitlines()[0])["rungs"]}
    assert rungs["opcheck"] == "pass" and rungs["aot_eager"] == "fail", rungs


def test_the_public_api_names_resolve_to_their_modules():
    """Every name opgen.testing offers (what generated tests and `opgen check` call) is defined where it says."""
    for name in checks.__all__:
        value = getattr(checks, name)
        home = checks._HOMES[name]
        assert getattr(__import__(f"opgen.testing.{home}", fromlist=[name]), name) is value, name
