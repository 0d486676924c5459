"""Tier 5: npugraph_ex's compiler on CPU (its real FX passes, then the graph it would capture, run eagerly).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .capture import (
    SELF_COPIES,
    _assert_outputs_are_what_the_graph_says,
    _calls_with_reused_buffers,
    is_self_copy,
    leftover_copies,
    npugraph_ex_cpu,
    op_arguments,
)
from .failures import CheckFailed, outputs_are_new_memory, skip, xfail
from .op import KNOWN_COPIES, Call, Op
from .values import assert_same_results, clone, mismatch, same, tensors


def assert_npugraph_ex_compiles_on_cpu(op: Op, make_call: Callable[[int], Call], fn: Callable | None = None,
                                       options: dict | None = None) -> None:
    """npugraph_ex's own backend on CPU (fullgraph, static shapes), three calls with new values and reused written
    buffers, each compared with eager (outputs and every input); one graph, the op in it, called in place.

    `fn` (default: the op itself, `Op.as_declared`) and `options` (CompilerConfig fields)
    exist for opgen's own tests."""
    loader = npugraph_ex_cpu()
    direct = fn is None
    fn = fn or (op.as_declared())
    torch.compiler.reset()
    with loader.Session() as session, torch.no_grad():
        compiled = op.seeded(torch.compile(fn, backend=session.backend(**(options or {})), fullgraph=True,
                                           dynamic=False))
        for seed, call in enumerate(_calls_with_reused_buffers(op, make_call, (0, 1, 2))):
            eager_call = clone(call)
            expected = _eager(op, fn, eager_call)
            with outputs_are_new_memory():
                actual = compiled(**call)
            assert_same_results(actual, expected)
            _assert_inputs_as_eager(call, eager_call)
            if seed == 0:
                if not session.graphs:
                    raise CheckFailed("npugraph_ex handed no graph to capture", "npugraph_ex-no-graph")
                graph = session.graphs[0]
                _assert_outputs_are_what_the_graph_says(op, graph, actual, call)
        assert session.runs == 3, f"npugraph_ex ran {session.runs} of 3 calls through its graph"
        assert len(session.graphs) == 1, f"npugraph_ex compiled {len(session.graphs)} graphs for 3 calls, not 1"
    _assert_calls_the_op_in_place(op, graph, direct)


def _eager(op: Op, fn: Callable, call: Call):
    """`fn` run eagerly on `call`; a skip while the op has no CPU kernel yet."""
    try:
        return op.seeded(fn)(**call)
    except NotImplementedError as error:
        if "no CPU reference kernel yet" in str(error):
            skip(str(error))
        raise


def _assert_inputs_as_eager(call: Call, eager_call: Call) -> None:
    for index, (value, eager_value) in enumerate(zip(tensors(call), tensors(eager_call), strict=True)):
        if not same(value, eager_value):
            raise CheckFailed(
                f"input tensor {index} after the compiled call differs from eager (an argument the kernel "
                "writes but the schema does not mark Tensor(a!) is written into npugraph_ex's private input "
                f"copy): {mismatch(value, eager_value)}", "npugraph_ex-private-input-copy")


def _assert_calls_the_op_in_place(op: Op, graph: torch.fx.GraphModule, direct: bool) -> None:
    """The op is in the graph npugraph_ex captures, with no copy of what it writes left around it (a tagged op's
    known copies xfail), writing the caller's buffers (`direct`: the graph calls the op itself)."""
    if op.overload not in [n.target for n in graph.graph.nodes]:
        raise CheckFailed(f"{op.overload} is not in the graph npugraph_ex captures:\n{graph.code}",
                          "npugraph_ex-op-missing")
    leftovers = leftover_copies(graph, op.overload, op.written if direct else ())
    where = "".join(f"\n  {n.format_node()}" for n in leftovers)
    if leftovers and op.tag in KNOWN_COPIES:
        xfail(f"{KNOWN_COPIES[op.tag]}:{where}")
    if leftovers and all(is_self_copy(n) for n in leftovers):
        xfail(f"{SELF_COPIES}:{where}")
    if leftovers:
        raise CheckFailed(f"npugraph_ex left copies of buffers the op mutates, paid at every replay:{where}\n"
                          f"{graph.code}", "npugraph_ex-leftover-copy")
    if direct:
        for node in (n for n in graph.graph.nodes if n.target is op.overload):
            for name in op.written:
                for arg in op_arguments(node, (name,)):
                    assert arg.op == "placeholder", (
                        f"{op.overload} mutates {arg}, not the caller's argument {name!r}:\n{graph.code}")
