"""Tier 2: opcheck, compiled (aot_eager) equals eager, and one graph for two calls that differ only in sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.fx.experimental import _config as symbolic_shapes_config

from .failures import outputs_are_new_memory, skip
from .input_variants import refused_by_checks
from .op import OPCHECK_UTILS, OPCHECK_UTILS_DYNAMIC, Call, Op
from .schema_check import assert_schema_holds_bitwise, needs_own_schema_check
from .values import assert_same_results, clone, tensors


def opcheck(op: Op, calls: Sequence[Call], test_utils: Sequence[str] | None = None) -> None:
    """torch.library.opcheck on every call, its failure saying where to look (`test_utils`: default, all of
    OPCHECK_UTILS that apply to the op). A call holding float8 tensors gets test_schema's checks from
    `schema_check` instead of torch's, which cannot compare float8 values."""
    test_utils = test_utils or (OPCHECK_UTILS_DYNAMIC if op.dynamic else OPCHECK_UTILS)
    for call in calls:
        utils = test_utils
        if "test_schema" in utils and needs_own_schema_check(call):
            assert_schema_holds_bitwise(op, call)
            utils = [name for name in utils if name != "test_schema"]
        if any(t.is_floating_point() and bool(t.isnan().any()) for t in tensors(op.seeded(op)(clone(call)))):
            # opcheck compares the compiled outputs with eager ones with NaN unequal to NaN: the other tiers
            # compare them here (equal_nan)
            utils = [name for name in utils if not name.startswith("test_aot_dispatch")]
        try:
            torch.library.opcheck(op.overload, (), call, test_utils=utils)
        except Exception as error:
            raise AssertionError(f"{error}\n(opcheck of {op.overload}: check the CPU kernel {op.kernel} against the "
                                 f"fake function generated from opgen.yaml {op.field}.outputs and {op.field}.schema)"
                                 ) from error



def assert_compiled_matches_eager(op: Op, calls: Sequence[Call]) -> None:
    """torch.compile(backend="aot_eager", fullgraph=True): outputs and mutated inputs equal eager; a tagged op
    returns its mutated argument (the very tensor in eager, its new value when compiled)."""
    torch.compiler.reset()
    compiled = op.seeded(torch.compile(op.as_declared(), backend="aot_eager", fullgraph=True,
                                       dynamic=False))
    for call in calls:
        eager_call = clone(call)
        returned = op.seeded(op)(eager_call)
        expected = clone(returned)  # before the compiled call: a kernel returning reused memory must not hide
        with outputs_are_new_memory():
            actual = compiled(**call)
        assert_same_results(actual, expected)
        assert_same_results(tensors(call), tensors(eager_call))  # inputs mutated the same way
        assert len(tensors(actual)) == len(op.returned) or not op.returned
        for output, eager_output, name in zip(tensors(actual), tensors(returned), op.returned, strict=False):
            assert eager_output is eager_call[name], f"eager output is not argument {name!r}"
            assert_same_results(output, call[name])



def skip_a_refused_doubling(op: Op, calls: Sequence[Call], refuser: str, run: Callable) -> None:
    """Skip (saying why) when opgen's second call, the first with its last size doubled, is outside the spec's
    `checks:` (a relation the doubling broke) or `run` (`refuser`: the CPU kernel, the reference) raises on it."""
    refused = refused_by_checks(op, calls[1]) if op.checked else ""
    if refused:
        skip(refused_doubling(op, calls, f"{refused} in opgen.yaml", None))
    try:
        run(clone(calls[1]))
    except (RuntimeError, IndexError, ValueError, TypeError) as error:  # torch's errors on mismatched sizes
        skip(refused_doubling(op, calls, refuser, error))



def refused_doubling(op: Op, calls: Sequence[Call], refuser: str, error: Exception | None) -> str:
    """Why a tier of two sizes skips when `refuser` (the CPU kernel, the reference) refuses opgen's second call, the
    first with its last size D doubled in the tensors whose last size is D: which were doubled and which kept their
    last size (a half-width cos and sin beside x is a relation opgen cannot see), and the fix."""
    doubled, kept = [], []
    for name, value in calls[0].items():
        if isinstance(value, torch.Tensor) and value.dim():
            (doubled if calls[1][name].shape[-1] != value.shape[-1] else kept).append(name)
    last = calls[0][doubled[0]].shape[-1] if doubled else "?"
    return (f"opgen doubled the last size {last} of {op.field}.examples[0] in {', '.join(doubled)}, keeping "
            + (', '.join(kept) or "no other tensor") + f" as they are, and {refuser} refuses that call"
            + (f" ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})" if error else "")
            + f": add an example of the same dtypes with other sizes (none 0 or 1) to {op.field}.examples")



def assert_compiles_once(op: Op, calls: Sequence[Call], derived: bool) -> None:
    """torch.compile(dynamic=True) makes ONE graph for calls of two sizes (the fake specialises on no size), and
    each compiled result (mutated inputs included) equals eager. `derived`: opgen made the second call.

    Sizes that differ between the calls are never 0 or 1 (torch.compile specialises those; opgen picks the calls
    so), and duck sizing is off (it would give two sizes equal in one call one symbol, and compile again when
    they differ in the other): a second graph is then the fake's doing. (The backend may be called more than once
    for the first call: Dynamo can restart its analysis.)"""
    if derived:
        skip_a_refused_doubling(op, calls, "the CPU kernel", op)
    torch.compiler.reset()
    graphs = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")

    def backend(gm, example_inputs):
        graphs.append(gm)
        return aot_eager(gm, example_inputs)

    compiled = op.seeded(torch.compile(op.as_declared(), backend=backend, fullgraph=True,
                                       dynamic=True))
    compiled_first = None
    with symbolic_shapes_config.patch(use_duck_shape=False):  # no public switch: the config `dynamic=True` reads
        for call in calls:
            eager_call = clone(call)
            with outputs_are_new_memory():
                actual = compiled(**call)
            assert_same_results(actual, op.seeded(op)(eager_call))
            assert_same_results(tensors(call), tensors(eager_call))
            compiled_first = len(graphs) if compiled_first is None else compiled_first
    sizes = [[tuple(t.shape) for t in tensors(call)] for call in calls]
    described = (f"it is generated from {op.field}.outputs in opgen.yaml" if op.outputs and not op.returned
                 else "for this op it is torch's own (a tagged op) or hand-written")
    assert len(graphs) == compiled_first, (
        f"torch.compile(dynamic=True) compiled again for the second of the sizes {sizes}: the fake function "
        f"specialises on a size (int(size), a Python comparison of sizes, ...); {described}")
