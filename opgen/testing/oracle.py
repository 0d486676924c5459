"""Tier 2: the CPU kernel against the independent oracle, the spec's `reference:`, over the input variants; the
smallest failing input; shared state between calls.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from .aliasing import ALIAS_FIX, aliased_outputs, out_problems
from .failures import CheckFailed, skip
from .input_variants import Variant, smaller_calls, variants
from .op import Call, Op
from .values import clone, distribution_mismatch, mismatch, picks_tied_values, same, same_values, tensor_map, tensors


def assert_matches_reference(op: Op, examples: Callable[[int], list[Call]]) -> None:
    """The CPU kernel against the spec's `reference:` (the oracle) on every variant of every example (seeds, dtypes,
    sizes, values, dims, scalars, optional tensors, defaults: input_variants): outputs and every written
    argument, all of it (an untouched row must stay as it was), NaN equal to NaN; a variant the reference refuses
    is no input of the op. Where the kernel and the reference disagree in a half-precision dtype, the reference
    computed in float64 (then cast) is asked too. Outputs of earlier calls must not change later (a reused
    workspace), and the op gives the reference's results when called from two threads at once and under another
    default dtype. A failure names each failing variant, the smallest failing input found and, where the spec may
    be what is wrong, the spec field to change."""
    if op.reference is None:
        skip(f"no `reference:` in {op.field} of opgen.yaml: nothing independent of the kernel to compare it with "
             "(add the op's reference implementation; docs/spec.md)")
    reference = op.seeded(lambda call: op.reference(**call))
    failing, kept, ran = [], [], 0
    for variant in variants(op, examples):
        outcome = _against_reference(op, reference, variant)
        if outcome is None:
            continue
        ran += 1
        actual, problems = outcome
        if problems:
            failing.append((variant, problems))
        kept.append((variant.label, actual, clone(actual)))
    assert ran, f"{op.field}.reference refused every example: check the examples in opgen.yaml"
    failing += _out_failures(op, reference, examples)
    if failing:
        raise CheckFailed(_reference_failure(op, reference, failing, ran), _failure_kind(op, failing))
    for label, actual, copy in kept:
        if not same_values(actual, copy):
            raise CheckFailed(f"{op.kernel} disagrees with {op.field}.reference in opgen.yaml "
                              f"(<package>/reference.py), the independent oracle: the outputs of {op.field}.{label} "
                              f"changed during later calls: {op.kernel} returns memory it reuses (a module-level "
                              "workspace or cache); return a new tensor each call", "wrong-values")
    _assert_no_shared_state(op, reference, examples)



def _failure_kind(op: Op, failing: list) -> str:
    if all(problems[0].startswith(f"{op.kernel} fails on ") for _, problems in failing):
        return "kernel-raised"
    return "view-return" if all(ALIAS_FIX in problems[0] for _, problems in failing) else "wrong-values"



def _out_failures(op: Op, reference: Callable, examples: Callable[[int], list[Call]]) -> list:
    """(variant, problems) of each example whose `out=` argument, given an input's memory or a wrong size, the kernel
    writes silently wrong (aliasing.out_problems)."""
    def compare(where: str, got: list, want: list) -> list[str]:
        return _differences(op, where, got, want, "the reference")

    found = []
    for index, call in enumerate(examples(0)):
        for kind, label, problem in out_problems(op, reference, call, f"{op.field}.examples[{index}]", compare,
                                                 _results):
            found.append((Variant(f"examples[{index}] {label}", call, kind, index), [problem]))
    return found



def _against_reference(op: Op, reference: Callable, variant: Variant) -> tuple[Any, list[str]] | None:
    """(the kernel's result, the differences from the reference) on one variant; None when the reference refuses it."""
    reference_call, kernel_call = clone(variant.call), clone(variant.call)
    expected = _reference_result(reference, reference_call)
    if expected is _REFUSED:
        return None
    try:
        actual = op.seeded(op)(kernel_call)
    except Exception as error:  # noqa: BLE001  (reported with the other failing inputs)
        return None, [(f"{op.kernel} fails on {op.field}.{variant.label}, which {op.field}.reference accepts: "
                       f"{type(error).__name__}: {_one_line(error)}")]
    where = f"{op.field}.{variant.label}"
    aliased = aliased_outputs(op, kernel_call, actual)
    if aliased:
        return actual, [f"{where}: {line}: {ALIAS_FIX}" for line in aliased]
    got, want = _results(op, actual, kernel_call), _results(op, expected, reference_call)
    found = _differences(op, where, got, want, "the reference", ties=(_result_names(op, actual, kernel_call),
                                                                      reference_call))
    if found and op.random:  # another way of drawing: compare what many draws of each look like
        found = _distribution_differences(op, where, (op, variant.call), (reference, variant.call), "the reference")
    elif found and _same_dtypes(got, want) and _float64_agrees(op, reference, variant.call, got):
        found = []
    return actual, found



def _same_dtypes(got: list, want: list) -> bool:
    return len(got) == len(want) and all(a.dtype == b.dtype for (_, a), (_, b) in zip(got, want, strict=True))



def _float64_agrees(op: Op, reference: Callable, call: Call, got: list) -> bool:
    """The reference computed on the call's floating tensors in float64, its results cast to the kernel's dtypes,
    agrees with `got`: the kernel is more exact than the reference in the call's own dtype, not wrong."""
    if not any(t.is_floating_point() and t.dtype != torch.float64 for t in tensors(call)):
        return False
    wide = tensor_map(lambda t: t.double() if t.is_floating_point() else t.clone(), call)
    expected = _reference_result(reference, wide)
    if expected is _REFUSED:
        return False
    want = _results(op, expected, wide)
    if len(want) != len(got):
        return False
    want = [(what, t.to(g.dtype) if t.is_floating_point() and g.is_floating_point() else t)
            for (what, t), (_, g) in zip(want, got, strict=True)]
    return not _differences(op, "", got, want, "")



def _one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""



def _reference_failure(op: Op, reference: Callable, failing: list, ran: int) -> str:
    """What a user reads when the kernel and the reference disagree: every failing variant (its first difference),
    the kinds of input that fail, the smallest failing input found, whether the kernel disagrees with itself, and
    what to change in the spec when such inputs are not the op's."""
    kinds = {}
    for variant, _ in failing:
        kinds[variant.kind] = kinds.get(variant.kind, 0) + 1
    lines = [f"{op.kernel} disagrees with {op.field}.reference in opgen.yaml (<package>/reference.py), the "
             f"independent oracle, on {len(failing)} of {ran} calls (by kind of input: "
             + ", ".join(f"{kind} {count}" for kind, count in kinds.items()) + "):"]
    for _variant, problems in failing[:8]:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        lines.append(f"  {problems[0]}{more}")
    if len(failing) > 8:
        lines.append(f"  ... and {len(failing) - 8} more calls")
    random = _nondeterministic(op, failing[0][0])
    if random:  # the cause of every difference: say it first
        return "\n".join([lines[0], *random, *lines[1:]])
    lines += _smallest_failure(op, reference, failing[0][0])
    hints = dict.fromkeys(variant.hint for variant, _ in failing if variant.hint)
    if hints and not any(variant.kind == "example" for variant, _ in failing):
        lines.append("if some of these inputs are not ones the op takes, say where its inputs live in opgen.yaml "
                     "(docs/spec.md, 'Inputs'): " + "; ".join(hints))
    return "\n".join(lines)



SHRINK_TRIES = 24  # calls the search for a smaller failing input makes at most



def _smallest_failure(op: Op, reference: Callable, variant: Variant) -> list[str]:
    """The smallest input like `variant` found to fail too (its sizes reduced one at a time, greedily), described."""
    current, tries, smaller = variant, 0, True
    while smaller and tries < SHRINK_TRIES:
        smaller = False
        for description, call in smaller_calls(op, current)[: SHRINK_TRIES - tries]:
            tries += 1
            candidate = replace(current, call=call, label=f"{current.label}, {description}")
            try:
                outcome = _against_reference(op, reference, candidate)
            except CheckFailed:
                continue
            if outcome is not None and outcome[1]:
                current, smaller = candidate, True
                break
    if current is variant:
        return []
    outcome = _against_reference(op, reference, current)
    return [f"smallest failing input found: {describe_call(current.call)}", f"  {outcome[1][0]}"]



def describe_call(call: Call) -> str:
    """`x: float16 (1, 1025), gamma: float16 (1025,), epsilon=1e-06`."""
    def one(value) -> str:
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
            return "[" + ", ".join(one(v) for v in value) + "]"
        return repr(value)
    return ", ".join(f"{name}: {one(value)}" if tensors(value) else f"{name}={value!r}" for name, value in call.items())



def _nondeterministic(op: Op, variant: Variant) -> list[str]:
    """A line when the kernel gives other results on the same inputs (random numbers, or memory it never wrote)."""
    if op.random:
        return []
    first, second = clone(variant.call), clone(variant.call)
    try:
        a, b = _results(op, op(first), first), _results(op, op(second), second)
    except Exception:  # noqa: BLE001  (a kernel that raises is reported as such)
        return []
    if len(a) == len(b) and all(same(x, y) for (_, x), (_, y) in zip(a, b, strict=True)):
        return []
    return [(f"{op.kernel} gives different results when called twice on the same inputs ({op.field}.{variant.label}): "
             "it draws random numbers (declare `tags: [nondeterministic_seeded]` in "
             f"{op.field}: its tests then seed it and compare distributions), or returns memory it never wrote "
             "(torch.empty without a write)")]



def _assert_no_shared_state(op: Op, reference: Callable, examples: Callable[[int], list[Call]]) -> None:
    """Example 0 (four seeds) from two threads at once, run in lockstep (`_Lockstep`: the threads take turns line by
    line through the kernel's own code), and under another default dtype: each result is the reference's. A kernel
    keeping state across calls (a module-level scratch buffer reused for an intermediate) or allocating with the
    default dtype fails, naming how to fix it."""
    if op.random:
        return
    pairs = []
    for seed in range(4):
        call = examples(seed)[0]
        reference_call = clone(call)
        expected = _reference_result(reference, reference_call)
        if expected is not _REFUSED:
            pairs.append((seed, call, _results(op, expected, reference_call)))
    if not pairs:
        return
    for _attempt in range(3):  # a run in which a thread lost its turn (blocked elsewhere) proves nothing: again
        wrong, lockstep = _two_threads(op, pairs)
        if wrong:
            raise CheckFailed(f"{op.kernel} gives wrong results when called from two threads at once: {wrong[0]}; it "
                              "keeps state across calls (a module-level scratch buffer or cache, reused for an "
                              "intermediate): allocate what a call needs in that call", "wrong-values")
        if lockstep.kept_in_step():
            break
    seed, call, want = pairs[0]
    default = torch.get_default_dtype()
    other = torch.float64 if default != torch.float64 else torch.float32
    copy = clone(call)
    torch.set_default_dtype(other)
    try:
        got = _results(op, op(copy), copy)
    finally:
        torch.set_default_dtype(default)
    found = _differences(op, f"{op.field}.examples[0] under torch.set_default_dtype({other})", got, want,
                         "the reference")
    if found:
        raise CheckFailed(f"{op.kernel} depends on the global default dtype: {found[0]}; it allocates without a dtype "
                          "(torch.zeros(n), torch.tensor(1.0), torch.arange(0.0, n)): give the inputs' dtype "
                          "(dtype=x.dtype)", "wrong-values")


def _two_threads(op: Op, pairs: list) -> tuple[list[str], _Lockstep]:
    """Each thread calls the op on its half of `pairs` (seed, call, expected), in lockstep; what came out wrong, and
    the lockstep (whether a turn was lost)."""
    wrong: list[str] = []
    lockstep = _Lockstep()

    def caller(me: int) -> None:
        sys.settrace(lockstep.tracer(me))
        try:
            for seed, call, want in pairs[me::2] or pairs[:1]:
                copy = clone(call)
                result = op(copy)
                wrong.extend(_differences(op, f"{op.field}.examples[0], seed {seed}, in thread {me}",
                                          _results(op, result, copy), want, "the reference")[:1])
        finally:
            sys.settrace(None)
            lockstep.finish(me)

    threads = [threading.Thread(target=caller, args=(me,)) for me in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return wrong, lockstep


class _Lockstep:
    """Two threads taking turns, one line of code outside torch, the standard library and these test modules at a
    time (a trace function): a thread runs a line only while it holds the turn, and hands the turn over when it
    reaches its next line, that is once the line has finished. A kernel's lines then interleave the same way on every
    run (thread 0's line k, thread 1's line k, thread 0's line k + 1, ...), so state shared between two calls shows
    every time. (Handing the turn over as a line began, as before, let both threads' lines run at once: a torch op
    releases the GIL, and a scratch buffer's write in one thread could land after the other's read of it, which then
    read its own values: the planted scratch-buffer kernel went uncaught in about 1 run in 8 with 64 x 4096 inputs.)
    A thread that does not hand the turn back within five seconds (blocked elsewhere, on a lock the waiting thread
    holds, say) loses it, and `lost` says so: nothing waits forever, and such a run proves nothing. Nor does a run in
    which one thread ran a line the other did not (a finalizer or a first call's lazy import in one thread, a branch
    on the values): the lines then pair up off by one, the write and the read of one call run back to back, and a
    shared scratch buffer went unseen about once in two hundred runs; `kept_in_step` says whether each thread ran the
    same lines in the same order."""

    def __init__(self) -> None:
        self.turn, self.done = 0, set()
        self.condition = threading.Condition()
        self.lost = False
        self.lines: tuple[list, list] = ([], [])

    def kept_in_step(self) -> bool:
        first, second = self.lines
        return not self.lost and first[:len(second)] == second[:len(first)]

    def step(self, me: int) -> None:
        """At each line of `me`'s: its previous line has finished, so the other thread runs its line; then this one."""
        with self.condition:
            if self.turn == me:
                self.turn = 1 - me
                self.condition.notify_all()
            while self.turn != me and 1 - me not in self.done:
                if not self.condition.wait(timeout=5.0):  # a loaded machine can hold a turn past 1 s
                    self.lost = True
                    break
            self.turn = me

    def finish(self, me: int) -> None:
        with self.condition:
            self.done.add(me)
            self.turn = 1 - me
            self.condition.notify_all()

    def tracer(self, me: int) -> Callable:
        def line(frame, event, _arg):
            if event == "line":
                self.lines[me].append((frame.f_code.co_filename, frame.f_lineno))
                self.step(me)
            return line

        def call(frame, event, _arg):
            return line if event == "call" and _own_code(frame.f_code.co_filename) else None
        return call



_NOT_OWN = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))



_STANDARD_LIBRARY = os.path.dirname(os.__file__)



def _own_code(filename: str) -> bool:
    """A file of the op's package (its kernels), not torch's, Python's or these test modules'."""
    if filename.startswith(_NOT_OWN) or filename.startswith("<"):
        return False
    return not filename.startswith(_STANDARD_LIBRARY) or "site-packages" in filename



_REFUSED = object()



def _reference_result(reference: Callable, call: Call):
    """The reference's result, or _REFUSED: the reference defines what inputs the op takes."""
    try:
        return reference(call)
    except Exception:  # noqa: BLE001
        return _REFUSED



def _results(op: Op, result, call: Call) -> list[tuple[str, torch.Tensor]]:
    """(what, tensor) of each output of a call and each argument it wrote."""
    found = [(op.output_field(i), t) for i, t in enumerate(tensors(result))]
    return found + [(f"argument {name!r} (written)", t) for name in op.written for t in tensors(call[name])]


def _result_names(op: Op, result, call: Call) -> list[str]:
    """The name of each tensor `_results` lists (an output's, or the written argument's), as `ops[i].ties` keys them."""
    names = [op.result_name(i) for i, _ in enumerate(tensors(result))]
    return names + [name for name in op.written for _ in tensors(call[name])]



def _differences(op: Op, where: str, got: list, want: list, other: str,
                 tolerance: Callable[[torch.dtype], tuple[float, float]] | None = None,
                 ties: tuple[list[str], Call] | None = None) -> list[str]:
    """How the tensors of `got` differ from those of `want` (`other` names where `want` comes from), within
    `tolerance(dtype)` (default: the op's, a kernel against the reference). `ties`: (the tensors' names, the call),
    where `want` comes from another implementation: an index tensor in `ops[i].ties` that picks tied values otherwise
    does not differ."""
    tolerance = tolerance or op.tolerance
    if len(got) != len(want):
        return [f"{where}: {len(got)} tensors out, {other} {len(want)}"]
    found = []
    for index, ((what, a), (_, b)) in enumerate(zip(got, want, strict=True)):
        problem = (f"dtype {a.dtype}, {other} gives {b.dtype}" if a.dtype != b.dtype else
                   mismatch(a, b, tolerance(a.dtype)))
        if problem and ties and picks_tied_values(op, ties[0][index], a, b, ties[1]):
            problem = None
        if problem:
            found.append(f"{where}: {what}: {problem}")
    return found



RANDOM_DRAWS = 16  # seeds pooled when a random op's kernel draws otherwise than what it is compared with



def _distribution_differences(op: Op, where: str, first: tuple[Callable, Call], second: tuple[Callable, Call],
                              other: str) -> list[str]:
    """A random op: each output and written argument of two (function, call) pairs, pooled over RANDOM_DRAWS seeds,
    must look like one distribution (`distribution_mismatch`)."""
    pools: list[list] = [[], []]
    for seed in range(RANDOM_DRAWS):
        for pool, (fn, call) in zip(pools, (first, second), strict=True):
            torch.manual_seed(seed)
            copy = clone(call)
            pool.append(_results(op, fn(copy), copy))
    found = []
    for index, (what, _) in enumerate(pools[0][0]):
        got = torch.cat([draw[index][1].detach().flatten().double() for draw in pools[0]])
        want = torch.cat([draw[index][1].detach().flatten().double() for draw in pools[1]])
        problem = distribution_mismatch(got, want)
        if problem:
            found.append(f"{where}: {what} ({RANDOM_DRAWS} draws): {problem}, unlike {other}'s")
    return found
