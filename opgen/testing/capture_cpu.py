"""Tier 6: npugraph_ex's own AclGraph captures the kernel on an emulated NPU graph (npu_graph_cpu) and replays it
with new values, without the kernel's Python.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from .capture import _assert_matches_reference, _calls_with_reused_buffers, _captured, npu_graph_cpu, npugraph_ex_cpu
from .failures import CheckFailed, outputs_are_new_memory, skip
from .op import Call, Op
from .values import clone, mismatch, same, tensors

# What to do about each capture error of npu_graph_cpu (CaptureError.kind)
CAPTURE_FIXES = {
    "host-read": "keep the value on the device: compute with tensors (torch.where(condition, a, b) instead of an `if`, "
                 "a 0-d tensor instead of a Python number), and check the inputs before calling the op, not in its "
                 "kernel",
    "host-copy": "keep the data on the device: index with tensors instead of Python lists; what only the host can do "
                 "belongs outside the op",
    "dynamic-shape": "a captured graph fixes every size: give the output a static upper bound (pad it and return a "
                     "count tensor), or keep the data-dependent part out of the captured graph",
    "synchronize": "remove the synchronize: a captured graph is one stream of device tasks that nothing on the host "
                   "waits for",
    "stream-sync": "order streams with events on the device (stream.wait_stream(other), event.record() then "
                   "stream.wait_event(event)), never by the host waiting: the kernel may run on a side stream of a "
                   "multi-stream scope, where a host wait breaks the capture and the overlap",
}



# CheckFailed.kind of each capture error (opgen check's signature)
CAPTURE_KINDS = {"stream-sync": "stream-misuse"}



ALLOW_RANDOM = "OPGEN_ALLOW_RANDOM_IN_CAPTURE"  # =1: random-number ops in a captured kernel are a warning



RANDOM_IN_CAPTURE = ("npugraph_ex does not support random-number ops in capture (its documented constraint; torch-npu "
                     "2.13.0 registers generator state during capture, so a replay draws new numbers, never eager's)")



def _shown(where: str) -> str:
    """A kernel's "file:line", relative to the working directory when it is below it."""
    import os

    path, _, line = where.rpartition(":")
    relative = os.path.relpath(path) if path else path
    return f"{relative if not relative.startswith('..') else path}:{line}"



class _CaptureRun:
    """One op through npugraph_ex's AclGraph on the emulated NPU graph: what the capture tier's steps share."""

    def __init__(self, op: Op, session, compiled: Callable, reference: Callable, allow_random: bool) -> None:
        self.op, self.emulation, self.compiled, self.reference = op, session.emulation, compiled, reference
        self.allow_random, self.capture_error = allow_random, session.emulation.CaptureError
        self.graph = None  # the capture call 1 made
        self.launches = 0  # how many launches it recorded
        self.kept: list = []  # call 1's output tensors as returned (not cloned), and their values then
        self.kept_values: list = []
        self.last = None
        self.replayed_python = 0  # runs of the kernel's Python during replays
        self.notes: list[str] = []
        self.failure: CheckFailed | None = None  # what the run found, if anything

    # --- one call ----------------------------------------------------------------------------------------

    def expected(self, call: Call):
        reference_call = clone(call)
        try:
            return self.reference(reference_call), reference_call
        except NotImplementedError as error:
            if "no CPU reference kernel yet" in str(error):
                skip(str(error))
            raise

    def call(self, number: int, call: Call):
        """Call `number` (1 captures, later ones replay), compared with the reference; returns the raw outputs."""
        expected, reference_call = self.expected(call)
        memory = {name: [t.untyped_storage().data_ptr() for t in tensors(call[name])] for name in self.op.written}
        captures = len(self.emulation.captures)
        try:
            with self.emulation.kernel_python() as ran, outputs_are_new_memory():
                raw = self.compiled(**call)
        except self.capture_error as error:
            kind = CAPTURE_KINDS.get(error.kind, "cpu-sync-in-kernel")
            raise CheckFailed(self.capture_failure(error), kind) from None
        self.assert_fake_planned_the_outputs()
        if number == 1:
            self.after_capture(raw, call, memory)
        else:
            self.replayed_python += ran[0]
            self.assert_replayed(number, captures, ran[0])
        self.compare(number, raw, expected, call, reference_call)
        self.last = raw
        return raw

    def assert_fake_planned_the_outputs(self) -> None:
        """An op captured as one launch writes buffers allocated from its fake: the kernel must return what it says."""
        for graph in self.emulation.captures:
            for name, index, (fake_shape, fake_dtype), (shape, dtype) in graph.fake_mismatches[:1]:
                raise CheckFailed(f"output {index} of {name}: its fake says {list(fake_shape)} {fake_dtype}, its "
                                  f"kernel returned {list(shape)} {dtype} at a replay: a captured graph allocates the "
                                  "op's outputs from its fake and the device task writes into them, so the fake must "
                                  "give the kernel's shapes and dtypes", "fake-wrong-metadata")

    def capture_failure(self, error) -> str:
        captured = self.emulation.captures[-1] if self.emulation.captures else None
        where = f"{_shown(error.where)}: {error.code}" if error.where else "(outside the op's kernel)"
        return (f"{self.op.qualname} cannot be captured by npugraph_ex: {self.kernel(captured)} makes a call the "
                f"capturing stream refuses:\n  {where}\n  {error.what}: {error.why}\n  fix: "
                f"{CAPTURE_FIXES[error.kind]}\n  (as torch_npu reports it: {str(error).splitlines()[0]})")

    def kernel(self, graph=None) -> str:
        """Which of the op's kernels the capture ran (its NPU kernel when plain torch on CPU, else its CPU one)."""
        graph = graph or self.graph
        key, why = (graph.kernels.get(self.op.overload.name()) if graph is not None else None) or ("", "")
        whole = graph is not None and self.op.overload.name() in graph.one_launch
        how = ", as one launch of the op," if whole else ""
        if key == "PrivateUse1":
            return f"its NPU (PrivateUse1) kernel, {'compiled code' if whole else 'plain torch on CPU'}{how or ','}"
        if key == "CPU":
            language = "compiled code; " if whole and npu_graph_cpu().kernel_language(
                self.op.overload.name(), key) == "C++" else ""
            return f"its CPU kernel ({language}{self.op.cpu_kernel + '; ' if self.op.cpu_kernel else ''}{why}){how}"
        return "no kernel of the op"

    def captured(self):
        """The capture of call 1 (or the capture that failed)."""
        return self.graph or (self.emulation.captures[-1] if self.emulation.captures else None)

    def stand_in(self) -> tuple[str, str] | None:
        """(dispatch key, why) of the captured kernel when it is not the one the device runs: a CPU kernel standing in
        for an NPU or CUDA kernel (a stub, or one that is not plain torch), recorded launch by launch; else None."""
        graph, name = self.captured(), self.op.overload.name()
        key, why = (graph.kernels.get(name) if graph is not None else None) or ("", "")
        device_kernel = any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k) for k in ("PrivateUse1", "CUDA"))
        return (key, why) if key == "CPU" and device_kernel and name not in graph.one_launch else None

    def after_capture(self, raw, call: Call, memory: dict) -> None:
        captures = self.emulation.captures
        if not captures:
            raise CheckFailed("npugraph_ex captured no graph (it ran eagerly?)", "npugraph_ex-no-graph")
        self.graph = captures[-1]
        self.launches = len(self.graph.launches)
        if self.op.overload.name() not in self.graph.kernels:
            raise CheckFailed(f"npugraph_ex captured a graph in which {self.op.overload}'s kernel never ran: the op is "
                              "not in the graph it captures", "npugraph_ex-op-missing")
        self.assert_no_random()
        self.assert_outputs_are_graph_memory()
        for name in self.op.written:
            now = [t.untyped_storage().data_ptr() for t in tensors(call[name])]
            if now != memory[name]:
                line = "".join(f"\n  {_shown(where)}: {code}" for _, where, code in self.graph.moved[:1] if where)
                raise CheckFailed(
                    f"{self.kernel()} gives the argument it writes, {name!r}, new memory (set_, resize_ or `.data =`):"
                    f"{line}\n  the caller's tensor no longer is the buffer the graph was captured on, so AclGraph "
                    "recaptures at every call (recapture_due_to_mutated_input_change) and runs the kernel's Python "
                    f"each time; write into {name!r} in place (copy_, index_copy_, slices)", "capture-recapture")
        written = {t.untyped_storage().data_ptr() for launch in self.graph.launches for t in launch.written()}
        for name in self.op.written:
            memory = {t.untyped_storage().data_ptr() for t in tensors(call[name]) if t.numel()}
            if memory - written:
                raise CheckFailed(f"the graph npugraph_ex captured never writes the caller's {name!r}: "
                                  f"{self.kernel()} writes other memory, so a replay leaves the caller's buffer as it "
                                  "was", "npugraph_ex-private-input-copy")
            copies = [launch for launch in self.graph.launches if not launch.kernel and "copy" in str(launch.func)
                      and memory & {t.untyped_storage().data_ptr() for t in launch.written()}]
            if copies:
                self.notes.append(f"npugraph_ex copies into {name!r} at every replay ({copies[0].func}, outside the "
                                  "kernel: the graph writes a buffer of its own first)")
        self.kept = tensors(raw)
        self.kept_values = [t.clone() for t in self.kept]

    def assert_no_random(self) -> None:
        if not self.graph.random:
            return
        op_name, where, code = self.graph.random[0]
        declare = (f"an op whose job is to sample: declare it, `tags: [nondeterministic_seeded]` in "
                   f"{self.op.spec('.tags')}, which makes this a warning; " if not self.op.random else "")
        text = (f"{self.op.qualname}: {self.kernel()} draws random numbers while it is captured:\n  {_shown(where)}: "
                f"{code}\n  {op_name}: {RANDOM_IN_CAPTURE}. {declare}any other op: pass random values in as a tensor "
                f"argument, drawn outside the graph (a warning-level finding: {ALLOW_RANDOM}=1 accepts it and compares "
                "only shapes and dtypes)")
        if not self.allow_random:
            raise CheckFailed(text, "random-op")
        warnings.warn(text, stacklevel=3)
        self.notes.append(f"random numbers in the captured kernel accepted (allow_random): {op_name} at "
                          f"{_shown(where)}")

    def assert_outputs_are_graph_memory(self) -> None:
        """The kernel returned memory it allocated while captured (from the graph's pool), or, for a tagged op, the
        argument it returns: anything else is memory it keeps across calls, or an input's."""
        for index, (memory, where, code) in enumerate(self.graph.returns.get(self.op.overload.name(), ())):
            if memory == "pool" or (memory == "argument" and self.op.returned):
                continue
            line = f"\n  {_shown(where)}: {code}" if where else ""
            if memory == "argument":
                raise CheckFailed(f"output {index}: {self.kernel()} returns the memory of an input (npugraph_ex's "
                                  "private copy of it, or the caller's tensor), a view of an argument, while the "
                                  f"schema promises a new tensor; return a clone{line}", "view-return")
            raise CheckFailed(
                f"output {index} is memory {self.kernel()} keeps across calls (not allocated while it was captured, "
                f"not an argument):{line or ' (no launch wrote it)'}\n  every call returns this same tensor, in eager "
                "too, so an output the caller keeps changes at the next call, and npugraph_ex's memory reuse between "
                "graph keys takes its outputs for pool memory; allocate the output in the kernel on every call "
                "(torch.empty_like(x), x.new_empty(...))", "capture-static-output")

    def assert_replayed(self, number: int, captures_before: int, python_runs: int) -> None:
        if len(self.emulation.captures) != captures_before:
            counts = {key: count for key, count in torch._dynamo.utils.counters["npugraph_ex"].items()
                      if key.startswith("recapture_")}
            raise CheckFailed(f"call {number} recaptured the graph instead of replaying it ({counts}), with the "
                              "caller's buffers and shapes unchanged", "capture-recapture")
        assert python_runs == 0, (
            f"call {number}: the kernel's Python ran {python_runs} time(s) although npugraph_ex should replay the "
            "captured graph without it (did it fall back to eager?)")

    def compare(self, number: int, raw, expected, call: Call, reference_call: Call) -> None:
        actual = clone(raw)  # the next replay overwrites graph outputs
        where = f"npugraph_ex on CPU, call {number}"
        if self.graph.random and self.allow_random:
            for got, want in zip(tensors(actual), tensors(expected), strict=True):
                assert (got.shape, got.dtype) == (want.shape, want.dtype), f"{where}: output {got.shape} {got.dtype}"
            return
        for name in (name for name in call if name not in self.op.written):
            for value, reference_value in zip(tensors(call[name]), tensors(reference_call[name]), strict=True):
                if not same(value, reference_value):
                    raise CheckFailed(
                        f"{where}: argument {name!r} after the call differs from the reference's (an argument the "
                        "kernel writes but the schema does not mark Tensor(a!) is written into npugraph_ex's private "
                        f"copy of it): {mismatch(value, reference_value)}", "npugraph_ex-private-input-copy")
        try:
            _assert_matches_reference(self.op, actual, expected, f"{where}: output", "cpu", reference_call)
            for name in self.op.written:
                _assert_matches_reference(self.op, call[name], reference_call[name],
                                          f"{where}: mutated argument {name!r}, tensor", "cpu", reference_call, name)
        except AssertionError as differs:
            self.assert_nothing_frozen(call, f"{differs}")
            raise CheckFailed(f"{differs}\n(npugraph_ex replayed what {self.kernel()} recorded at capture)",
                              "compiled-differs") from None

    # --- after the calls -------------------------------------------------------------------------------

    def assert_nothing_frozen(self, call: Call, mismatch: str = "") -> None:
        """The kernel recorded again now issues what it issued at capture: else a host value it reads from Python
        state (a global, a config, a counter) is frozen at its capture value."""
        probe_call = clone(call)
        now = self.emulation.record_call(lambda: self.op.overload(**probe_call))
        name = self.op.overload.name()
        then = [launch for launch in self.graph.launches if launch.kernel == name]
        again = [launch for launch in now.launches if launch.kernel == name]
        for first, second in zip(then, again, strict=False):
            if first.signature() != second.signature():
                values = [f"{a!r} at capture, {b!r} now" for a, b in zip(first.host_values(), second.host_values(),
                                                                         strict=False) if a != b]
                raise CheckFailed(
                    f"{self.op.qualname}: a host value of {self.kernel()} is frozen in the captured graph:\n  "
                    f"{_shown(first.where)}: {first.code}\n  it launched {first.func} with "
                    f"{'; '.join(values) or 'other arguments'} (the kernel run again): a captured graph keeps the host "
                    "values of its capture, because the kernel's Python runs once, so a value read from Python state "
                    "per call (a global, a config, a counter) never changes at replay. Pass it as a tensor argument: "
                    "replays read tensors from device memory" + (f"\n  seen as: {mismatch}" if mismatch else ""),
                    "capture-frozen-value")
        if len(then) != len(again):
            raise CheckFailed(f"{self.op.qualname}: {self.kernel()} issues {len(again)} kernel launches when run "
                              f"again, {len(then)} at capture: its Python takes another path now (a branch on Python "
                              "state), which a replay never does" + (f"\n  seen as: {mismatch}" if mismatch else ""),
                              "capture-frozen-value")

    def assert_outputs_kept(self, last_number: int) -> None:
        """Call 1's outputs, kept without a clone: intact, or (npugraph_ex's static output memory) the memory of the
        last call's outputs, holding its values."""
        last, overwritten = tensors(self.last), []
        for index, (kept, values) in enumerate(zip(self.kept, self.kept_values, strict=True)):
            if same(kept, values):
                continue
            shared = index < len(last) and kept.untyped_storage().data_ptr() == last[index].untyped_storage().data_ptr()
            if not (shared and same(kept, last[index])):
                raise CheckFailed(f"output {index} of call 1, kept without a clone, changed to values of no output of "
                                  f"call {last_number}: npugraph_ex's outputs are overwritten only by the next replay "
                                  "of the same memory, so something else writes it", "capture-static-output")
            assert same(kept, last[index])  # the static-memory behaviour users must know
            overwritten.append(str(index))
        if overwritten:
            self.notes.append(f"output {', '.join(overwritten)} of call 1, kept without a clone, is the memory of call "
                              f"{last_number}'s and holds its values (npugraph_ex's static output memory, "
                              "clone_output=False): clone outputs you keep across calls, as this test does")

    def different_buffers(self, call: Call) -> None:
        """The written arguments in new memory (same shapes): AclGraph recaptures, and the new buffers are written."""
        fresh = clone(call)
        recaptures = _captured("npugraph_ex", "recapture_due_to_mutated_input_change")
        captures = len(self.emulation.captures)
        expected, reference_call = self.expected(fresh)
        raw = self.compiled(**fresh)
        recaptured = _captured("npugraph_ex", "recapture_due_to_mutated_input_change") - recaptures
        names = ", ".join(map(repr, self.op.written))
        try:
            self.compare(4, raw, expected, fresh, reference_call)
        except CheckFailed as failed:
            raise CheckFailed(f"{failed}\nwith new memory for {names} (same shapes), npugraph_ex recaptured "
                              f"{recaptured} time(s): the new buffers are not written as the reference writes them",
                              "capture-recapture") from None
        if recaptured != 1 or len(self.emulation.captures) != captures + 1:
            raise CheckFailed(f"new memory for {names} (same shapes) should make AclGraph recapture once "
                              f"(recapture_due_to_mutated_input_change); it recaptured {recaptured} time(s), "
                              f"{len(self.emulation.captures) - captures} new capture(s)", "capture-recapture")
        self.notes.append(f"new memory for {names} (same shapes) made AclGraph recapture once "
                          "(recapture_due_to_mutated_input_change), as on a device, and the new buffers were written: "
                          "keep a mutated buffer at one address to replay without recapturing")

    def report(self, calls: int, captures: int) -> str:
        graph = self.graph
        if self.op.overload.name() in graph.one_launch:
            python = "the kernel runs whole at each replay, as a device task"
        else:
            python = (f"the kernel's Python ran {graph.kernel_runs} time(s) at capture and {self.replayed_python} "
                      "during replays")
        head = (f"{self.op.qualname}: npugraph_ex's AclGraph captured {self.kernel()} on CPU (opgen's emulated NPU "
                f"graph, npu_graph_cpu): {self.launches} kernel launches recorded, {captures} capture and "
                f"{graph.replays} replays for {calls} calls; {python}")
        return "\n".join([head, *(f"  {note}" for note in self.notes)])



def _new_values(make_call: Callable[[int], Call], reference: Callable[[Call], Any] | None = None
                ) -> Callable[[int], Call]:
    """`make_call`, with the tensors it fills with fixed values (the same at every seed: indices, exact examples)
    permuted at seeds after the first, so that replays see new values everywhere (indices stay in range). A call
    `reference` refuses once permuted (values whose order matters, such as offsets) keeps its fixed values."""
    first = make_call(0)

    def varied(seed: int) -> Call:
        call = make_call(seed)
        if not seed:
            return call
        g = torch.Generator().manual_seed(seed)

        def permute(pair):
            value, base = pair
            if isinstance(value, torch.Tensor) and value.numel() > 1 and same(value, base):
                return value.flatten()[torch.randperm(value.numel(), generator=g)].reshape(value.shape).clone()
            return value

        permuted = {name: _zip_map(permute, value, first[name]) for name, value in call.items()}
        if reference is not None:
            try:
                reference(clone(permuted))
            except (RuntimeError, IndexError, ValueError):  # torch's errors on out-of-order or out-of-range values
                return call
        return permuted

    return varied



def _zip_map(fn: Callable, value, base):
    if isinstance(value, (list, tuple)) and isinstance(base, (list, tuple)) and len(value) == len(base):
        return type(value)(_zip_map(fn, v, b) for v, b in zip(value, base, strict=True))
    return fn((value, base))



def assert_npugraph_ex_capture_replay_on_cpu(op: Op, make_call: Callable[[int], Call],
                                             reference: Callable[[Call], Any] | None = None,
                                             allow_random: bool | None = None, options: dict | None = None) -> str:
    """npugraph_ex's backend and its own AclGraph capturing and replaying the op on CPU, over the emulated NPU graph of
    npu_graph_cpu (static shapes, fullgraph): call 1 captures (then replays), calls 2 and 3 replay with new
    values (fixed ones, indices included, permuted), written buffers reused; each compared with `reference`
    (`reference(call)` returns the outputs and writes the Tensor(a!) arguments of `call`, like `op(call)`; default: the
    spec's `reference:`, else the CPU kernel, eager) on the same inputs, written buffers checked in the caller's memory.
    The kernel's Python runs once, at capture; call 1's outputs are intact or (static output memory) hold call 3's
    values; a host value the kernel reads from Python state per call is named (frozen at capture); new memory for a
    written argument recaptures once. A host sync in the kernel fails with its file, line and fix; random-number ops
    fail unless `allow_random` (default: the op is declared random, or OPGEN_ALLOW_RANDOM_IN_CAPTURE=1), a warning then.
    `options`: CompilerConfig fields, for opgen's own tests.

    Returns (and prints) what happened: which kernel was captured, the launches, the static outputs, the recapture."""
    loader = npugraph_ex_cpu(capture=True)
    if allow_random is None:  # an op declared random (nondeterministic_seeded) is a warning, as the opt-out gives
        import os

        allow_random = op.random or os.environ.get(ALLOW_RANDOM) == "1"
    if reference is None:  # the spec's reference (the independent oracle), else the CPU kernel
        reference = (lambda call: op.reference(**call)) if op.reference is not None else op

    def capture(one_launch: dict | None = None) -> tuple[_CaptureRun, str]:
        torch.compiler.reset()
        torch._dynamo.utils.counters.clear()
        with loader.Session(capture=True, one_launch=one_launch) as session, torch.no_grad():
            compiled = torch.compile(op.as_declared(),
                                     backend=session.backend(**(options or {})), fullgraph=True, dynamic=False)
            run = _CaptureRun(op, session, compiled, reference, allow_random)
            try:
                calls = _calls_with_reused_buffers(op, _new_values(make_call, reference), (0, 1, 2))
                for number, call in enumerate(calls, start=1):
                    run.call(number, call)
                run.assert_outputs_kept(number)
                run.assert_nothing_frozen(call)
                captures = len(session.emulation.captures)
                if op.written:
                    run.different_buffers(call)
            except CheckFailed as failed:
                run.failure = failed
                return run, ""
            return run, run.report(number, captures)

    run, report = capture()
    stand_in = run.stand_in() if run.failure is not None else None
    if run.failure is not None and (stand_in is None or run.failure.kind not in STAND_IN_FINDINGS):
        raise run.failure
    if stand_in is not None:
        plumbing, report = capture({op.overload.name(): stand_in})
        # a stand-in reading Python state per call, or drawing random numbers, is no function of its inputs: run
        # whole, its values still move
        stateful = run.failure.kind in ("capture-frozen-value", "random-op") and getattr(
            plumbing.failure, "kind", "") == "compiled-differs"
        if plumbing.failure is not None and not stateful:
            raise plumbing.failure
        skip(_stand_in_skip(run, plumbing))
    print(report)
    return report



# What a kernel standing in for the device kernel may do that says nothing about the op: the device kernel's to avoid
STAND_IN_FINDINGS = ("cpu-sync-in-kernel", "stream-misuse", "capture-frozen-value", "random-op", "capture-recapture",
                     "capture-static-output", "compiled-differs")



def _stand_in_skip(run: _CaptureRun, plumbing: _CaptureRun) -> str:
    """Why the capture tier judged only the op's plumbing: what the stand-in kernel did, where, and that the device
    kernel replacing it must not."""
    _key, why = run.stand_in()
    what = "\n  ".join(str(run.failure).splitlines())
    passed = "which passed" if plumbing.failure is None else (
        "which passed but for its values: the stand-in reads Python state or draws random numbers, so it gives "
        "other values at every call")
    return (f"{run.op.qualname}: capture on CPU judged only the op's plumbing, {passed} (registration, fake, "
            f"outputs, written buffers: the op captured as one launch and replayed {plumbing.graph.replays} times with "
            f"new values). Its CPU kernel is not judged: it stands in for the kernel the device runs ({why}), and that "
            f"kernel must not do what the stand-in does here:\n  {what}")
