"""The npugraph_ex tier's leftover-copy check on graphs as each npugraph_ex line hands them to capture: a real copy
of a written buffer fails, the `copy_(x, x)` write-backs of torch 2.8 and 2.9 are reported (xfail, not passed), a clean graph
passes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from opgen.testing.capture import is_self_copy
from opgen.testing.failures import CheckFailed
from opgen.testing.npugraph_ex_compiler import _assert_calls_the_op_in_place

ADD_ = torch.ops.aten.add_.Tensor
OP = SimpleNamespace(overload=ADD_, written=("self",), tag=None)


def graph(write_back: str) -> torch.fx.GraphModule:
    """add_(cache, new) on the caller's buffer, then the write-back `write_back` names: none, onto itself, or a
    copy from a private clone."""
    g = torch.fx.Graph()
    cache, new = g.placeholder("cache"), g.placeholder("new")
    g.call_function(ADD_, (cache, new))
    if write_back == "self":
        g.call_function(torch.ops.aten.copy_.default, (cache, cache))
    elif write_back == "clone":
        private = g.call_function(torch.ops.aten.clone.default, (cache,))
        g.call_function(torch.ops.aten.copy_.default, (cache, private))
    g.output(None)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_a_graph_writing_the_callers_buffer_with_no_copy_passes():
    _assert_calls_the_op_in_place(OP, graph("none"), direct=True)


def test_a_copy_of_the_buffer_from_a_clone_fails_naming_it():
    with pytest.raises(CheckFailed, match="left copies of buffers the op mutates"):
        _assert_calls_the_op_in_place(OP, graph("clone"), direct=True)


def test_a_write_back_onto_itself_is_reported_not_passed():
    gm = graph("self")
    assert [is_self_copy(n) for n in gm.graph.nodes if n.op == "call_function"] == [False, True]
    with pytest.raises(pytest.xfail.Exception, match=r"copy_\(x, x\)"):
        _assert_calls_the_op_in_place(OP, gm, direct=True)
