"""Tiers 3 and 4: capture and replay on a device (npugraph_ex on an NPU, CUDA graphs on a GPU), and what the
capture tiers share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

from .failures import CheckFailed, outputs_are_new_memory, skip
from .fake import _nodes
from .op import Call, Op
from .values import clone, copy_into, distribution_mismatch, mismatch, picks_tied_values, tensor_map, tensors


def npu_unavailable() -> str | None:
    """Why npugraph_ex cannot capture on this machine, or None."""
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return "no NPU: torch_npu not importable"
    if not torch.npu.is_available():
        return "no NPU: torch_npu is installed but torch.npu.is_available() is False"
    return None



def cuda_unavailable() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA: torch.cuda.is_available() is False"
    return None



def _captured(group: str, prefix: str) -> int:
    return sum(count for key, count in torch._dynamo.utils.counters[group].items() if key.startswith(prefix))



def _assert_matches_reference(op: Op, actual, reference, what: str, device: str, call: Call | None = None,
                              name: str | None = None) -> None:
    """The device kernel's tensors, on `device`, against the reference's (run on CPU), per-dtype tolerances. The
    device is checked before anything moves to CPU for the comparison: an output left on CPU shows. `name`: the
    written argument compared (else the outputs), for `ops[i].ties` (an index picking tied values otherwise passes)."""
    got_all, want_all = tensors(actual), tensors(reference)
    assert len(got_all) == len(want_all), f"{what}: {len(got_all)} tensors, the reference gives {len(want_all)}"
    for index, (got, want) in enumerate(zip(got_all, want_all, strict=True)):
        assert got.device.type == device, (
            f"{what} {index} is on {got.device}, not on {device}: the kernel allocates it on the wrong device")
        assert got.dtype == want.dtype, f"{what} {index}: dtype {got.dtype}, the reference gives {want.dtype}"
        problem = distribution_mismatch(got, want) if op.random else mismatch(got, want, op.tolerance(got.dtype))
        if problem and call is not None and picks_tied_values(op, name or op.result_name(index), got, want, call):
            problem = None
        assert problem is None, f"{what} {index} differs from the reference's: {problem}"



def _calls_with_reused_buffers(op: Op, make_call: Callable[[int], Call], seeds: Sequence[int],
                               on_first: Callable[[torch.Tensor], None] | None = None) -> Iterator[Call]:
    """A call per seed; every written argument is the same buffer at every call, refilled with the seed's values
    (as a captured graph needs). `on_first(buffer)` runs for each buffer when it is first seen."""
    buffers: dict[str, Any] = {}
    for seed in seeds:
        call = make_call(seed)
        for name in op.written:
            if name in buffers:
                copy_into(buffers[name], call[name])
                call[name] = buffers[name]
            else:
                buffers[name] = call[name]
                if on_first is not None:
                    tensor_map(on_first, buffers[name])
        yield call



def assert_capture_replay(op: Op, make_call: Callable[[int], Call], device: str, **compile_options) -> None:
    """Call 1 captures (then replays), calls 2 and 3 replay with new values; written buffers are reused.
    Outputs and written buffers are compared with the spec's reference (else the CPU kernel) on the same inputs."""
    torch.compiler.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(op.as_declared(), fullgraph=True, dynamic=False, **compile_options)
    # on CUDA, as a user must: else Inductor skips CUDA graphs for a mutated input
    static = torch._dynamo.mark_static_address if device == "cuda" else None

    def on_device(seed: int) -> Call:
        return tensor_map(lambda t: t.to(device), make_call(seed))

    captured_first = None
    with torch.no_grad():
        for seed, call in enumerate(_calls_with_reused_buffers(op, on_device, (0, 1, 2), static)):
            cpu_call = tensor_map(lambda t: t.to("cpu"), call)  # copies
            expected = op.reference(**cpu_call) if op.reference is not None else op(cpu_call)
            with outputs_are_new_memory():
                actual = clone(compiled(**call))  # the next replay overwrites graph outputs
            _assert_matches_reference(op, actual, expected, f"{device} call {seed}: output", device, cpu_call)
            for name in op.written:
                _assert_matches_reference(op, call[name], cpu_call[name],
                                          f"{device} call {seed}: mutated argument {name!r}, tensor", device,
                                          cpu_call, name)
            if device == "npu":
                captured = _captured("npugraph_ex", "captured_")
                if captured_first is None:
                    captured_first = captured
                    assert captured >= 1, "npugraph_ex captured no graph (eager fallback?)"
                assert captured == captured_first, "a replay recaptured the graph"
                assert _captured("npugraph_ex", "recapture_due_to_mutated_input_change") == 0
    if device == "cuda":
        assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0, "CUDA graphs were skipped"



def npu_graph_cpu():
    """npu_graph_cpu, the NPU graph emulation (loaded by npugraph_ex_cpu)."""
    from . import npugraph_ex_cpu as loader

    return loader.emulation_module()



def npugraph_ex_cpu(capture: bool = False):
    """npugraph_ex_cpu, which loads npugraph_ex on CPU; skips (naming the fetch command) when it cannot.
    `capture`: for capture and replay on the CPU emulation (skipped where a real NPU is)."""
    from . import npugraph_ex_cpu as loader

    reason = loader.unavailable(capture)
    if reason is not None:
        skip(reason)
    return loader



# Reinplacing under npugraph_ex on torch 2.8 and 2.9 (2.8.0.post5, 2.9.1; not 2.7.1, nor 2.12 and later) turns
# the write-backs of an op it reinplaced into `copy_(x, x)` and leaves them: a copy of a buffer onto itself, which
# ATen's copy_ returns from before any kernel (self.is_same(src)); whether the NPU's copy_ launches one cannot be
# seen on CPU, so it is reported, not passed
SELF_COPIES = ("npugraph_ex left write-backs of a buffer onto itself (copy_(x, x), npugraph_ex on torch 2.8/2.9): no "
               "copy on CPU, where ATen's copy_ returns early; not provable without an NPU")


def is_self_copy(node: torch.fx.Node) -> bool:
    return node.target is torch.ops.aten.copy_.default and len(node.args) >= 2 and node.args[0] is node.args[1]


def leftover_copies(graph: torch.fx.GraphModule, overload, written: Sequence[str]) -> list[torch.fx.Node]:
    """Nodes that functionalize or copy a caller's buffer the graph mutates: a functionalized call, a copy_ into a
    graph input, a clone of a mutated graph input. (A clone of an input the graph does not mutate, e.g. to mutate
    a private copy, is correct and not listed.) `written`: the arguments of `overload` it writes."""
    nodes = [n for n in graph.graph.nodes if n.op == "call_function"]
    inputs = {n for n in graph.graph.nodes if n.op == "placeholder"}
    mutated = {n.args[0] for n in nodes if n.target is torch.ops.aten.copy_.default and n.args[0] in inputs}
    for node in (n for n in nodes if n.target is overload):
        mutated |= {a for a in op_arguments(node, written) if a in inputs}
    copies = (torch.ops.aten.copy_.default, torch.ops.aten.copy.default, torch.ops.aten.clone.default)
    return [n for n in nodes if n.target in (auto_functionalized, auto_functionalized_v2)
            or (n.target in copies and any(a in mutated for a in n.all_input_nodes))]



def op_arguments(node: torch.fx.Node, names: Sequence[str]) -> list[torch.fx.Node]:
    """The graph nodes a call of an op passes for the arguments `names` (by keyword, or by the schema's position);
    a list argument (`Tensor(a!)[]`) gives each of its tensors."""
    positions = {a.name: i for i, a in enumerate(node.target._schema.arguments)}
    found = []
    for name in names:
        position = positions[name]
        arg = node.kwargs[name] if name in node.kwargs else node.args[position] if position < len(node.args) else None
        found += [a for a in (arg if isinstance(arg, (list, tuple)) else [arg]) if isinstance(a, torch.fx.Node)]
    return found



def _assert_outputs_are_what_the_graph_says(op: Op, graph: torch.fx.GraphModule, outputs, call: Call) -> None:
    """Shapes and dtypes are the fake function's (npugraph_ex plans with them); no output is an input's memory
    unless the op declares it (a tagged op), because npugraph_ex treats outputs as its own buffers."""
    output = next(n for n in graph.graph.nodes if n.op == "output")
    fakes = [n.meta.get("val") for n in _nodes(output.args)]
    inputs = {t.untyped_storage().data_ptr(): index for index, t in enumerate(tensors(call)) if t.numel()}
    for index, (fake, real) in enumerate(zip(fakes, tensors(outputs), strict=False)):
        if isinstance(fake, torch.Tensor) and (tuple(fake.shape), fake.dtype) != (tuple(real.shape), real.dtype):
            raise CheckFailed(f"output {index}: the fake function says {tuple(fake.shape)} {fake.dtype}, the kernel "
                              f"returned {tuple(real.shape)} {real.dtype}", "fake-wrong-metadata")
        aliased = inputs.get(real.untyped_storage().data_ptr()) if not op.tag and real.numel() else None
        if aliased is not None:
            raise CheckFailed(f"output {index} is the memory of input tensor {aliased}: the kernel returns (a view of) "
                              "an argument while the schema promises a new tensor; return a clone, or drop the return",
                              "view-return")
