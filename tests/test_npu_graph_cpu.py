"""tests/npu_graph_cpu.py of every generated project (NPU graph capture and replay emulated on CPU), tested on its own,
without npugraph_ex: capture records launches without computing them, replay recomputes them on the captured memory
without any Python of a kernel, the capture errors name the kernel's line, the names it installs are the ones
AclGraph uses and leave with it. Each refusal has a look-alike the capture accepts. The ops are small Library ops
defined here (namespace `ngc_test`)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from opgen.npugraph_ex import loader

emulation_module = loader().emulation_module()
CaptureError = emulation_module.CaptureError
lib = torch.library.Library("ngc_test", "FRAGMENT")
CONFIG = {"scale": 2.0}


def define(schema: str, kernel, npu_kernel=None):
    name = schema.split("(")[0]
    lib.define(schema)
    lib.impl(name, kernel, "CPU")
    if npu_kernel is not None:
        lib.impl(name, npu_kernel, "PrivateUse1")
    return getattr(torch.ops.ngc_test, name).default


def _update(cache, idx, src):
    cache.index_copy_(0, idx, src)


def _branch(x):
    if x.abs().max() > 1:  # line named by the test
        return x / 2
    return x.clone()


def _scaled(x):
    return x * CONFIG["scale"]


def _npu_stub(x):
    raise NotImplementedError("ngc_test::stubbed has no NPU kernel yet")


DOUBLE = define("double(Tensor x) -> Tensor", lambda x: x * 2)
torch.library.register_fake("ngc_test::double", lambda x: torch.empty_like(x), lib=lib)
UPDATE = define("update(Tensor(a!) cache, Tensor idx, Tensor src) -> ()", _update)
BRANCH = define("branch(Tensor x) -> Tensor", _branch)
WHERE = define("where(Tensor x) -> Tensor", lambda x: torch.where(x.abs().max() > 1, x / 2, x))
SCALED = define("scaled(Tensor x) -> Tensor", _scaled)
PLAIN_NPU = define("plain_npu(Tensor x) -> Tensor", lambda x: x * 2, npu_kernel=lambda x: x * 3)
STUBBED = define("stubbed(Tensor x) -> Tensor", lambda x: x * 2, npu_kernel=_npu_stub)


@pytest.fixture
def emulation():
    """The emulation installed into a bare torch_npu stand-in (also torch.npu), removed afterwards."""
    stand_in = types.ModuleType("torch_npu")
    stand_in.npu = types.ModuleType("torch_npu.npu")
    had_npu = hasattr(torch, "npu")
    torch.npu = stand_in.npu
    installed = emulation_module.Emulation()
    installed.install(stand_in)
    try:
        yield installed
    finally:
        installed.uninstall()
        if not had_npu:
            del torch.npu


def capture(emulation, fn) -> object:
    """`fn()` captured into a new NPUGraph on a side stream, as torch.npu.graph(...) does."""
    graph = emulation_module.NPUGraph()
    with emulation_module.graph(graph, pool=torch.npu.graph_pool_handle()):
        fn()
    return graph


def test_capture_records_launches_without_computing_and_replay_computes_them(emulation):
    x = torch.ones(4)
    out = {}
    graph = capture(emulation, lambda: out.setdefault("y", DOUBLE(x)))
    y = out["y"]
    assert [str(launch.func) for launch in graph.launches] == ["aten.mul.Tensor"]
    assert y.isnan().all(), "a device records tasks: the output is uninitialised (poisoned) until a replay"
    assert emulation.owner(y) is not None and emulation.owner(y).by == "kernel"
    x.fill_(5)  # the caller's memory is what the graph reads
    graph.replay()
    assert torch.equal(y, torch.full((4,), 10.0)) and graph.replays == 1
    with emulation.kernel_python() as ran:
        x.fill_(-1)
        graph.replay()
    assert ran == [0], "no Python of the kernel at replay"
    assert torch.equal(y, torch.full((4,), -2.0))
    with emulation.kernel_python() as ran:
        DOUBLE(x)
    assert ran == [1], "the counter sees the kernel's Python when it does run (eager)"


def test_in_place_launches_write_the_captured_memory_at_replay_only(emulation):
    cache, idx, src = torch.zeros(6, 2), torch.tensor([4, 1]), torch.ones(2, 2)
    graph = capture(emulation, lambda: UPDATE(cache, idx, src))
    assert torch.equal(cache, torch.zeros(6, 2)), "capture computes nothing"
    assert graph.kernels["ngc_test::update"] == ("CPU", "the op has no NPU kernel") and graph.kernel_runs == 1
    src.copy_(torch.full((2, 2), 3.0))
    idx.copy_(torch.tensor([0, 5]))
    graph.replay()
    assert cache[[0, 5]].eq(3).all() and cache[[1, 2, 3, 4]].eq(0).all()


def test_a_host_read_is_refused_with_the_kernel_line_and_its_look_alike_is_captured(emulation):
    with pytest.raises(CaptureError) as caught:
        capture(emulation, lambda: BRANCH(torch.ones(3)))
    error = caught.value
    assert error.kind == "host-read" and "during NPU graph capture" in str(error)
    assert error.where.endswith(f"test_npu_graph_cpu.py:{_branch.__code__.co_firstlineno + 1}")
    assert error.code == "if x.abs().max() > 1:  # line named by the test"
    x = torch.ones(3)
    graph = capture(emulation, lambda: WHERE(x))
    assert [str(launch.func).split(".")[1] for launch in graph.launches] == ["abs", "max", "gt", "div", "where"]


@pytest.mark.parametrize(("kernel", "kind", "code"), [
    (lambda x: x.tolist(), "host-copy", "x.tolist()"),
    (lambda x: x.cpu(), "host-copy", "x.cpu()"),
    (lambda x: x.to("cpu"), "host-copy", 'x.to("cpu")'),
    (lambda x: x.numpy(), "host-copy", "x.numpy()"),
    (lambda x: float(x.sum()), "host-read", "float(x.sum())"),
    (lambda x: torch.equal(x, x), "host-read", "torch.equal(x, x)"),
    (lambda x: x[x > 0], "dynamic-shape", "x[x > 0]"),
    (lambda x: x.nonzero(), "dynamic-shape", "x.nonzero()"),
    (lambda _x: torch.npu.synchronize(), "synchronize", "torch.npu.synchronize()"),
], ids=["tolist", "cpu", "to-cpu", "numpy", "float", "equal", "mask", "nonzero", "synchronize"])
def test_every_host_sync_is_refused(emulation, kernel, kind, code):
    name = f"sync_{kind.replace('-', '_')}_{abs(hash(code)) % 10_000}"
    op = define(f"{name}(Tensor x) -> Tensor", lambda x: (kernel(x), x.clone())[1])
    with pytest.raises(CaptureError) as caught:
        capture(emulation, lambda: op(torch.ones(3)))
    assert caught.value.kind == kind and code in caught.value.code, (caught.value.kind, caught.value.code)
    assert torch.Tensor.tolist is torch._C.TensorBase.tolist, "the host-copy methods are restored after a capture"


def test_metadata_reads_views_and_allocations_are_host_side(emulation):
    """The look-alikes of host reads: sizes, dims, views and empty tensors need no device task."""
    def kernel(x):
        n, d = x.shape[0], x.dim()
        view = x.view(-1)[: n * d]
        return view + torch.empty_like(view).fill_(n)

    op = define("metadata(Tensor x) -> Tensor", kernel)
    x = torch.ones(3, 2)
    out = {}
    graph = capture(emulation, lambda: out.setdefault("y", op(x)))
    assert [str(launch.func) for launch in graph.launches] == ["aten.fill_.Scalar", "aten.add.Tensor"]
    graph.replay()
    assert torch.equal(out["y"], torch.full((6,), 4.0))


def test_a_frozen_host_value_stays_at_its_capture_value(emulation):
    x = torch.ones(2)
    out = {}
    CONFIG["scale"] = 2.0
    graph = capture(emulation, lambda: out.setdefault("y", SCALED(x)))
    CONFIG["scale"] = 5.0
    graph.replay()
    assert torch.equal(out["y"], torch.full((2,), 2.0)), "the kernel's Python ran once: 2.0 is frozen"
    again = emulation.record_call(lambda: SCALED(x))
    assert graph.launches[0].host_values() == [2.0] and again.launches[0].host_values() == [5.0]
    assert again not in emulation.graphs  # a probe, not one of the captures


def test_random_ops_are_recorded_not_refused_and_replay_draws_again(emulation):
    op = define("noisy(Tensor x) -> Tensor", lambda x: x + torch.rand_like(x))
    out = {}
    graph = capture(emulation, lambda: out.setdefault("y", op(torch.zeros(3))))
    assert [entry[0] for entry in graph.random] == ["aten.rand_like.default"]
    graph.replay()
    first = out["y"].clone()
    graph.replay()
    assert not torch.equal(first, out["y"])


def test_the_npu_kernel_is_captured_when_plain_torch_else_the_cpu_kernel_and_why(emulation):
    out = {}
    graph = capture(emulation, lambda: out.setdefault("y", PLAIN_NPU(torch.ones(2))))
    graph.replay()
    assert graph.kernels["ngc_test::plain_npu"] == ("PrivateUse1", "") and torch.equal(out["y"], torch.full((2,), 3.0))
    graph = capture(emulation, lambda: out.__setitem__("z", STUBBED(torch.ones(2))))
    graph.replay()
    key, why = graph.kernels["ngc_test::stubbed"]
    assert key == "CPU" and "NotImplementedError: ngc_test::stubbed has no NPU kernel yet" in why
    assert torch.equal(out["z"], torch.full((2,), 2.0)) and graph.kernel_runs == 1


def test_a_compiled_kernel_is_one_launch_replayed_whole_on_the_captured_memory(emulation):
    """A C++ kernel (torch's own quantization ops, raw pointer loops) calls no ATen op a recorder could see: recorded
    launch by launch its outputs stayed poison at replay. It is one device task, as on a device: one launch, outputs
    from its fake, the kernel run whole at each replay on the memory captured. A Python kernel is still recorded launch
    by launch unless the emulation is told to take its op whole (a stand-in judged only as the op's plumbing)."""
    import native_ops

    assert emulation_module.kernel_language(native_ops.TO_BF16.name(), "CPU") == "C++"
    assert emulation_module.kernel_language(DOUBLE.name(), "CPU") == "Python"
    x, out = torch.randn(4, 8), {}
    graph = capture(emulation, lambda: out.setdefault("y", native_ops.TO_BF16(x)))
    assert [(str(launch.func), launch.key) for launch in graph.launches] == [
        ("quantization._FloatToBfloat16Quantized.default", "CPU")]
    assert graph.one_launch == {native_ops.TO_BF16.name()} and graph.kernel_runs == 0
    assert graph.kernels[native_ops.TO_BF16.name()] == ("CPU", "the op has no NPU kernel")
    assert out["y"].dtype == torch.float16 and out["y"].isnan().all(), "nothing computed at capture"
    for _ in range(2):
        x.copy_(torch.randn(4, 8))
        graph.replay()
        assert torch.equal(out["y"], native_ops.TO_BF16(x)), "each replay runs the kernel on the captured memory"
    emulation.one_launch = {DOUBLE.name(): ("CPU", "a stand-in")}
    with emulation.kernel_python() as ran:
        graph = capture(emulation, lambda: out.setdefault("z", DOUBLE(x)))
    assert [str(launch.func) for launch in graph.launches] == ["ngc_test.double.default"] and ran == [0]
    graph.replay()
    assert torch.equal(out["z"], x * 2)


def test_a_compiled_kernel_whose_fake_is_wrong_is_noted_at_replay_not_copied(emulation):
    """The buffers of a launch taken whole come from the op's fake: a kernel returning another dtype is recorded as a
    mismatch (the look-alike above, whose fake is right, has none)."""
    import native_ops

    bits, out = native_ops.TO_BF16(torch.randn(2, 4)), {}
    graph = capture(emulation, lambda: out.setdefault("y", native_ops.FROM_BF16(bits)))
    graph.replay()
    assert graph.fake_mismatches == [(native_ops.FROM_BF16.name(), 0, ((2, 4), torch.float16), ((2, 4), torch.float32))]
    assert out["y"].isnan().all(), "nothing copied into a buffer of the wrong dtype"


def test_streams_pools_and_pointers_behave_as_aclgraph_expects(emulation):
    graph = emulation_module.NPUGraph()
    with pytest.raises(RuntimeError, match="cannot be captured on the default stream"):
        graph.capture_begin()
    assert torch.npu.current_stream().stream_id == 0 and torch.npu.Stream(priority=-1).stream_id > 0
    handle = torch.npu.graph_pool_handle()
    assert isinstance(handle, tuple) and handle[0] * handle[1] == 0  # what AclGraphCacheInfo validates
    out = {}
    with emulation_module.graph(graph, pool=handle):
        out["y"] = torch.empty(4)
    pointer = out["y"].untyped_storage().data_ptr()
    storage = emulation.storage_from_pointer(pointer, "cpu", 16)
    assert storage.data_ptr() == pointer
    with pytest.raises(RuntimeError, match="is not memory of an NPU graph pool nor memory a captured graph works on"):
        emulation.storage_from_pointer(torch.ones(4).untyped_storage().data_ptr(), "cpu", 16)
    # a caller's buffer a captured launch writes in place: AclGraph rebuilds an output aliasing it (a tagged op)
    cache, idx, src = torch.zeros(6, 2), torch.tensor([1]), torch.ones(1, 2)
    capture(emulation, lambda: UPDATE(cache, idx, src))
    assert emulation.storage_from_pointer(cache.untyped_storage().data_ptr(), "cpu", 48).data_ptr() == (
        cache.untyped_storage().data_ptr())
    assert torch.ones(2).is_npu and not torch.ones(2, device="meta").is_npu
    with pytest.raises(NotImplementedError, match="is not emulated on CPU"):
        torch.npu.graph_task_update_begin()


def test_install_and_uninstall_leave_nothing_behind():
    stand_in = types.ModuleType("torch_npu")
    stand_in.npu = types.ModuleType("torch_npu.npu")
    stand_in.npu.Stream = "the compile-time stand-in's"
    before = (dict(vars(stand_in)), dict(vars(stand_in.npu)), "is_npu" in vars(torch.Tensor))
    installed = emulation_module.Emulation()
    installed.install(stand_in)
    assert stand_in.npu.Stream is emulation_module.Stream and stand_in._C._npu_setCheckpointPoolState
    with pytest.raises(RuntimeError, match="installed already"):
        emulation_module.Emulation().install(stand_in)
    installed.uninstall()
    assert (dict(vars(stand_in)), dict(vars(stand_in.npu)), "is_npu" in vars(torch.Tensor)) == before
    assert emulation_module.Emulation.current is None


def test_the_module_is_ruff_clean_and_imports_only_the_standard_library_and_torch():
    import ast
    import shutil
    import subprocess

    path = Path(emulation_module.__file__)
    ruff = shutil.which("ruff") or pytest.fail("ruff is not installed (it is part of the test extra)")
    done = subprocess.run([ruff, "check", "--no-cache", "--isolated", "--line-length", "120", "--select",
                           "E,F,W,ARG,B", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported - set(sys.stdlib_module_names) == {"torch"}
    assert emulation_module.__name__ == "opgen.testing.npu_graph_cpu"  # the library's module, loaded once
