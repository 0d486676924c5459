"""NPU graph capture and replay emulated on CPU (opgen.testing; imports only the standard library and torch).

npugraph_ex's capture manager, `AclGraph` (npugraph_ex/_acl_concrete_graph/acl_graph.py of torch-npu 2.13.0),
runs unchanged on top of this module: `Emulation` puts into opgen's torch_npu stand-in (npugraph_ex_cpu)
exactly the torch_npu names AclGraph uses on its capture and replay path, with these meanings:
- `torch.npu.NPUGraph`: `capture_begin` pushes a `Recorder` (a TorchDispatchMode) that records each ATen kernel
  launch instead of computing it, as a device records tasks: the output metadata comes from the op's meta kernel
  and the outputs are allocated for real in the graph's memory pool, filled with poison (NaN, the dtype's largest
  integer, True) like uninitialised device memory; in-place and out= ops return their argument. `replay` re-runs
  the recorded launches on the memory frozen at capture (aliases with the sizes, strides and offsets each launch
  saw) and copies fresh results into the buffers allocated at capture: no Python of any kernel runs.
- A custom operator whose kernel is Python is not one launch: its kernel's Python is host code, run once at capture
  below the Python key, so the ATen ops it calls are recorded and its host values (Python numbers, branches,
  config) are frozen. Its NPU (PrivateUse1) kernel is captured when it is plain torch on CPU, else its CPU kernel;
  `NPUGraph.kernels` says which and why. A kernel that is not Python (C++ through the dispatcher: torch records
  the source file of each registration) is one device task, as on a device: recorded as one launch of the op
  (outputs from its fake, in the pool, poisoned) and run whole at replay on the captured memory; so is an op named
  in `Emulation(one_launch={op: (key, why)})` (a CPU kernel standing in for a device kernel, whose own Python is
  not what the device will run: the capture then judges only the op's plumbing).
  `NPUGraph.one_launch` lists the ops captured so.
- Capture errors in torch_npu's wording (`CaptureError`) for host syncs: reading a value (`.item()`, `bool()`,
  `int()`, `float()` or an `if` of a tensor, ops tagged data_dependent_output such as `equal`), copying to the
  host (`.cpu()`, `.to("cpu")`, `.tolist()`, `.numpy()`), a data-dependent output size (`nonzero`, boolean
  masks) and `torch.npu.synchronize()`. Each names the kernel's file and line. Random-number ops are recorded
  (torch-npu 2.13.0 registers generator state during capture, so a device does not refuse them) and listed in
  `NPUGraph.random`.
- Host-side work stays on the host: allocations (`empty*`, from the graph's pool), views and in-place metadata
  ops (`set_`, `resize_`, `transpose_`, ...), metadata reads (`dim`, `sym_size`, `is_contiguous`, ...).
- Streams are numbered (0 is the default stream, on which capture is refused, as on a device), events are no-ops
  on one synchronous timeline, pools never free or reuse memory (`_npu_setCheckpointPoolState` is a no-op), and
  `torch_npu._C._construct_storage_from_data_pointer` accepts only memory of a graph pool (any other pointer would
  dangle on a device). `Tensor.is_npu` is True for CPU tensors while installed: AclGraph treats non-NPU inputs as
  its own aliases of the caller's memory, which a device never sees.
What it does not model: device kernels themselves (aclop kernels that cannot be captured, internal formats),
memory reuse between graph keys (stale outputs after pool reuse), streams and events as parallel timelines, the
philox RNG, and host reads outside the dispatcher other than the patched Tensor methods (a ctypes read of a data
pointer reads poison and is frozen, not refused). `uninstall` restores every name and method it touched.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import sys
import sysconfig
import types
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

# torch_npu's message for a call a capturing stream refuses (libtorch_npu.so 2.13.0)
REFUSED = ("Cannot call {what} during NPU graph capture. If you need this call to be captured, please file an issue. "
           "Current npuStreamCaptureStatus: active")
CORE_LIMITS = {"cube_core_num": 24, "vector_core_num": 48}  # what get_stream_limit reports for every stream
ND_FORMAT = 2  # torch_npu.get_npu_format of a plain (ND) tensor
LIBRARY = __name__.rpartition(".")[0]  # opgen.testing: its frames are never blamed on a kernel
ALLOCATIONS = {"empty.memory_format", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
               "empty_permuted"}
HOST_COPIES = ("cpu", "tolist", "numpy", "__array__")  # Tensor methods that copy device memory to the host
NATIVE_SOURCES = (".cpp", ".cc", ".cxx", ".c", ".cu", ".h", ".hpp", ".mm")  # a registration made from compiled code
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
SITE_DIRS = tuple({sysconfig.get_paths()[key] + os.sep for key in ("purelib", "platlib")})
_MISSING = object()


class CaptureError(RuntimeError):
    """A call the capturing stream refuses: `what` (an op, a Tensor method), `why` it needs the host, its `kind`
    ("host-read", "host-copy", "dynamic-shape", "synchronize" or "stream-sync"), and `where`, "file:line" of the
    kernel code that made it, with its `code` ("" outside a kernel)."""

    def __init__(self, what: str, why: str, kind: str, where: str = "", code: str = "") -> None:
        message = f"{REFUSED.format(what=what)} ({why})" + (f"\n  at {where}: {code}" if where else "")
        super().__init__(message)
        self.what, self.why, self.kind, self.where, self.code = what, why, kind, where, code


@dataclass
class Launch:
    """One recorded kernel launch: `func` on `args`/`kwargs` whose tensors are aliases frozen at capture; `fresh`
    pairs each new output's position in the flat result with the pool buffer it is copied into at replay."""

    func: Any
    args: tuple
    kwargs: dict
    fresh: list
    kernel: str = ""  # the custom op whose kernel issued it
    where: str = ""  # "file:line" of that kernel's code
    code: str = ""
    key: str = ""  # a custom op recorded whole: the dispatch key of the kernel replay runs

    def run(self):
        if self.key:
            return self.func.redispatch(torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, self.key)), *self.args,
                                        **self.kwargs)
        return self.func(*self.args, **self.kwargs)

    def written(self) -> list[torch.Tensor]:
        """The memory this launch writes: its Tensor(a!) arguments and its fresh outputs' buffers."""
        schema = self.func._schema.arguments
        values = list(self.args) + [self.kwargs.get(a.name) for a in schema[len(self.args):]]
        found = [t for argument, value in zip(schema, values, strict=False)
                 if argument.alias_info is not None and argument.alias_info.is_write
                 for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
        return found + [buffer for _, buffer in self.fresh]

    def host_values(self) -> list:
        """Its arguments that are not tensors (Python numbers, sizes, dtypes): fixed at capture."""
        return [v for v in pytree.tree_leaves((self.args, self.kwargs)) if not isinstance(v, torch.Tensor)]

    def signature(self) -> tuple:
        """What the launch does, without its memory: the op, its host values, its tensors' shapes and dtypes."""
        def describe(value):
            if isinstance(value, torch.Tensor):
                return ("tensor", tuple(value.shape), value.dtype)
            return value

        return (str(self.func), pytree.tree_map(describe, (self.args, self.kwargs)))


@dataclass
class Allocation:
    """Memory a capture took from a graph pool, and for what: "kernel" (a custom op's kernel), "graph" (an op of
    the captured FX graph itself) or "AclGraph" (an allocation outside any kernel: its private input copies)."""

    tensor: torch.Tensor
    by: str


class Pool:
    """A graph memory pool: every allocation stays alive (a device pool would reuse memory only across graphs)."""

    def __init__(self, handle: tuple) -> None:
        self.handle = handle
        self.allocations: list[Allocation] = []

    def find(self, pointer: int) -> Allocation | None:
        for allocation in self.allocations:
            storage = allocation.tensor.untyped_storage()
            if storage.data_ptr() <= pointer < storage.data_ptr() + max(storage.nbytes(), 1):
                return allocation
        return None


def poison(tensor: torch.Tensor) -> torch.Tensor:
    """Fill like uninitialised device memory: NaN, the dtype's largest integer, True."""
    if tensor.dtype == torch.bool:
        return tensor.fill_(True)
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        return tensor.fill_(float("nan"))
    return tensor.fill_(torch.iinfo(tensor.dtype).max)


def frozen(tensor: torch.Tensor) -> torch.Tensor:
    """A new tensor on the same memory with the same sizes, strides and offset: what a recorded task points at."""
    return torch.empty(0, dtype=tensor.dtype).set_(tensor.untyped_storage(), tensor.storage_offset(), tensor.size(),
                                                   tensor.stride())


def _meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, torch.device):
        return torch.device("meta")
    return value


def kernel_language(name: str, key: str) -> str:
    """"C++" when the kernel the dispatcher computes for `name` at `key` was registered from compiled code (torch
    keeps the source file of each registration: a Python one names its .py file or "<stdin>"), else "Python"."""
    try:
        debug = repr(torch._C._dispatch_get_computed_kernel_for_dispatch_key(name, key))
    except RuntimeError:
        return "Python"
    match = re.search(r"registered at (.*?):\d+", debug)
    return "C++" if match is not None and match.group(1).endswith(NATIVE_SOURCES) else "Python"


def _fake_result(func, args, kwargs):
    """The op's outputs as meta tensors from its fake implementation (for an op whose fake is not a Meta kernel)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
        result = func(*fake_args, **fake_kwargs)
    return pytree.tree_map_only(torch.Tensor, _meta, result)


def _library_frame(frame) -> bool:
    """Code that is not a kernel's: torch, the standard library, npugraph_ex (its generated code too), opgen's."""
    path = frame.f_code.co_filename
    if path.startswith((TORCH_DIR, "<")) or f"{os.sep}npugraph_ex{os.sep}" in path:
        return True
    name = frame.f_globals.get("__name__") or ""
    return (bool(LIBRARY) and name.startswith(f"{LIBRARY}.")) or (path.startswith(STDLIB_DIR)
                                                                and not path.startswith(SITE_DIRS))


class Recorder(TorchDispatchMode):
    """Records the launches of one capture into `graph` (see the module docstring)."""

    def __init__(self, graph: NPUGraph, emulation: Emulation) -> None:
        super().__init__()
        self.graph, self.emulation = graph, emulation
        self.kernels: list = []  # (qualname, the Python frame that entered its kernel, its arguments' memory)

    # --- where a launch comes from ---------------------------------------------------------------------

    def kernel_line(self) -> tuple[str, str]:
        """("file:line", code) of the innermost frame of a kernel being captured, or ("", "")."""
        if not self.kernels:
            return "", ""
        entry = self.kernels[-1][1]
        frame = sys._getframe(1)
        while frame is not None and frame is not entry:
            if not _library_frame(frame):
                line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
                return f"{frame.f_code.co_filename}:{frame.f_lineno}", line
            frame = frame.f_back
        return "", ""

    def allocator(self) -> str:
        """Who asks for memory now: "kernel", AclGraph's own code ("AclGraph": its private input copies), or an op
        of the captured graph ("graph")."""
        if self.kernels:
            return "kernel"
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith((TORCH_DIR, os.path.dirname(__file__))):
            frame = frame.f_back
        return "AclGraph" if frame is not None and frame.f_code.co_filename.endswith("acl_graph.py") else "graph"

    def refuse(self, what: str, why: str, kind: str) -> CaptureError:
        where, code = self.kernel_line()
        self.graph.failed = True
        return CaptureError(what, why, kind, where, code)

    # --- dispatch ----------------------------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.Tag.data_dependent_output in func.tags:
            raise self.refuse(str(func), "a tensor value read on the host: .item(), bool(), int(), float() or an "
                              "`if` of a tensor", "host-read")
        if func.namespace not in ("aten", "prim", "prims"):
            return self.run_kernel(func, args, kwargs)
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        returns = func._schema.returns
        if returns and not any(isinstance(r.type, torch.TensorType) or "Tensor" in str(r.type) for r in returns):
            return func(*args, **kwargs)  # a host value computed from metadata: dim, sym_size, is_contiguous...
        if torch.Tag.inplace_view in func.tags:
            self._note_new_memory(func, args)
            return func(*args, **kwargs)  # set_, resize_, transpose_...: tensor metadata, host-side
        if func._schema.name.removeprefix("aten::") + (f".{func._overloadname}" if func._overloadname != "default"
                                                       else "") in ALLOCATIONS:
            return self.allocate(func(*pytree.tree_map(_meta, args), **self._meta_kwargs(func, kwargs)),
                                 self.allocator())
        if any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            result = func(*args, **kwargs)  # a view: no device task, unless the "view" is a copy
            if self._aliases(result, args, kwargs):
                return result
            return self.record(func, args, kwargs)
        return self.record(func, args, kwargs)

    @staticmethod
    def _aliases(result, args, kwargs) -> bool:
        storages = {t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs))
                    if isinstance(t, torch.Tensor)}
        return all(t.untyped_storage().data_ptr() in storages for t in pytree.tree_leaves(result)
                   if isinstance(t, torch.Tensor))

    def allocate(self, meta, by: str):
        def real(value):
            if not isinstance(value, torch.Tensor):
                return value
            tensor = poison(torch.empty_strided(value.size(), value.stride(), dtype=value.dtype))
            self.graph.pool_object.allocations.append(Allocation(tensor, by))
            return tensor

        return pytree.tree_map(real, meta)

    def record(self, func, args, kwargs, key: str = ""):
        """A device task: not computed; outputs from the meta kernel (or the op's fake), allocated in the pool and
        poisoned. `key`: a custom op's kernel run whole at replay (redispatched at that dispatch key)."""
        try:
            meta = self._output_metadata(func, args, kwargs)
        except Exception as error:  # no meta kernel: a data-dependent size, or an op we cannot record
            if torch.Tag.dynamic_output_shape in func.tags:
                raise self.refuse(str(func), "its output size depends on tensor values, which a captured graph "
                                  "cannot know", "dynamic-shape") from error
            raise RuntimeError(f"opgen's NPU graph emulation cannot record {func}: its meta kernel raised "
                               f"{type(error).__name__}: {error}") from error
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.graph.random.append((str(func), *self.kernel_line()))
        written = self._written(func, args, kwargs)
        flat_meta, spec = pytree.tree_flatten(meta)
        outputs, fresh = [], []
        for index, value in enumerate(flat_meta):
            if index in written:
                outputs.append(written[index])
            elif isinstance(value, torch.Tensor):
                buffer = self.allocate(value, self.allocator())
                outputs.append(buffer)
                fresh.append((index, frozen(buffer)))
            else:
                outputs.append(value)
        frozen_args, frozen_kwargs = pytree.tree_map_only(torch.Tensor, frozen, (args, kwargs))
        where, code = self.kernel_line()
        self.graph.launches.append(Launch(func, frozen_args, frozen_kwargs, fresh,
                                          self.kernels[-1][0] if self.kernels else "", where, code, key))
        return pytree.tree_unflatten(outputs, spec)

    def _output_metadata(self, func, args, kwargs):
        try:
            return func(*pytree.tree_map(_meta, args), **self._meta_kwargs(func, kwargs))
        except Exception:
            if func.namespace in ("aten", "prim", "prims"):
                raise
            return _fake_result(func, args, kwargs)  # a custom op whose fake is registered for fake tensors only

    @staticmethod
    def _meta_kwargs(func, kwargs) -> dict:
        meta = pytree.tree_map(_meta, kwargs)
        if any(a.name == "device" for a in func._schema.arguments) and "device" not in kwargs:
            meta["device"] = torch.device("meta")  # a factory: never allocate on the host's default device
        return meta

    @staticmethod
    def _written(func, args, kwargs) -> dict:
        """Flat output index -> the argument that output is (in-place and out= returns)."""
        by_set = {}
        values = list(args) + [kwargs.get(a.name) for a in func._schema.arguments[len(args):]]
        for argument, value in zip(func._schema.arguments, values, strict=False):
            if argument.alias_info is not None and argument.alias_info.is_write:
                by_set[frozenset(argument.alias_info.before_set)] = value
        return {index: by_set[frozenset(r.alias_info.before_set)] for index, r in enumerate(func._schema.returns)
                if r.alias_info is not None and r.alias_info.is_write and frozenset(r.alias_info.before_set) in by_set}

    # --- custom operators ----------------------------------------------------------------------------------

    def run_kernel(self, func, args, kwargs):
        """A custom op's kernel is host code: run its Python once, below the Python key, recording what it calls.
        The NPU kernel when it is plain torch on CPU, else the CPU kernel (`NPUGraph.kernels` says which, and why).
        A kernel that is not Python, or an op the emulation takes as one launch, is recorded as one launch."""
        name = func.name()
        if name in self.emulation.one_launch:
            self.graph.kernels.setdefault(name, self.emulation.one_launch[name])
            return self.launch_whole(func, self.graph.kernels[name][0], args, kwargs)
        if (name not in self.graph.kernels and torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
                and kernel_language(name, "PrivateUse1") == "C++"):
            self.graph.kernels[name] = ("CPU", "the NPU kernel is compiled code, which runs only on an NPU")
        if name not in self.graph.kernels and torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
            start = len(self.graph.launches)
            try:
                return self._call(func, "PrivateUse1", args, kwargs)
            except CaptureError:
                raise
            except (NotImplementedError, AttributeError, ImportError, RuntimeError) as error:
                if isinstance(error, RuntimeError) and not _mentions_npu(error):
                    raise
                del self.graph.launches[start:]
                first = str(error).splitlines()[0] if str(error) else ""
                why = f"the NPU kernel is not plain torch on CPU: {type(error).__name__}: {first}"
                self.graph.kernels[name] = ("CPU", why)
        self.graph.kernels.setdefault(name, ("CPU", "the op has no NPU kernel"))
        key = self.graph.kernels[name][0]
        if kernel_language(name, key) == "C++":
            return self.launch_whole(func, key, args, kwargs)
        return self._call(func, key, args, kwargs)

    def launch_whole(self, func, key: str, args, kwargs):
        """The op as one device task (a compiled kernel, as a device captures it): outputs from its fake, allocated in
        the pool and poisoned; the kernel at `key` runs whole at each replay, on the memory captured now."""
        name = func.name()
        self.graph.kernels.setdefault(name, (key, ""))
        self.graph.one_launch.add(name)
        self.kernels.append((name, sys._getframe(), _storages((args, kwargs))))
        try:
            result = self.record(func, args, kwargs, key=key)
        finally:
            self.kernels.pop()
        self.graph.returns[name] = self._memory_of(result, args, kwargs)
        return result

    def _call(self, func, key: str, args, kwargs):
        """The kernel at `key`, under this recorder; its Python's code objects are kept for counting later runs."""
        self.graph.kernels.setdefault(func.name(), (key, ""))
        self.kernels.append((func.name(), sys._getframe(), _storages((args, kwargs))))
        previous, seen = sys.getprofile(), set()

        def watch(frame, event, _arg):
            if event == "call" and not _library_frame(frame):
                seen.add(frame.f_code)

        sys.setprofile(watch)
        try:
            with self:
                result = func.redispatch(torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key)), *args, **kwargs)
        finally:
            sys.setprofile(previous)
            self.kernels.pop()
        self.graph.kernel_code |= seen
        self.graph.kernel_runs += 1
        self.graph.returns[func.name()] = self._memory_of(result, args, kwargs)
        return result

    def _memory_of(self, result, args, kwargs) -> list[tuple[str, str, str]]:
        """Where each tensor a kernel returned lives: "pool" (allocated while captured), "argument" (an input's
        memory) or "elsewhere" (memory the kernel kept from before the capture), with the kernel line of the last
        launch that wrote it ("file:line", code)."""
        arguments = _storages((args, kwargs))
        found = []
        for tensor in (t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)):
            pointer = tensor.untyped_storage().data_ptr()
            writer = next((launch for launch in reversed(self.graph.launches)
                           if pointer in _storages(launch.written())), None)
            line = (writer.where, writer.code) if writer is not None else ("", "")
            if not tensor.numel() or self.graph.pool_object.find(pointer) is not None and pointer not in arguments:
                found.append(("pool", *line))
            else:
                found.append(("argument" if pointer in arguments else "elsewhere", *line))
        return found

    def _note_new_memory(self, func, args) -> None:
        """A kernel changing the memory of one of its own arguments (set_, resize_): the caller's tensor moves."""
        resizing = func._schema.name in ("aten::set_", "aten::resize_", "aten::resize_as_")
        if (resizing and self.kernels and isinstance(args[0], torch.Tensor)
                and args[0].untyped_storage().data_ptr() in self.kernels[-1][2]):
            self.graph.moved.append((str(func), *self.kernel_line()))


def _storages(value) -> set[int]:
    """The memory (storage data pointers) of the tensors in `value`."""
    return {t.untyped_storage().data_ptr() for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)}


def _mentions_npu(error: BaseException) -> bool:
    text = str(error).lower()
    return "npu" in text or "privateuse1" in text


class NPUGraph:
    """torch_npu.npu.NPUGraph on CPU: `launches` recorded at capture, replayed by `replay()`."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.kernels: dict[str, tuple[str, str]] = {}  # op -> (dispatch key captured, why not the NPU kernel)
        self.random: list[tuple[str, str, str]] = []  # (op, "file:line", code) of each random-number launch
        self.kernel_code: set = set()  # code objects of the kernels' Python seen at capture
        self.kernel_runs = 0  # custom-op kernels entered at capture
        self.returns: dict[str, list] = {}  # op -> where each tensor its kernel returned lives (_memory_of)
        self.one_launch: set[str] = set()  # ops recorded as one launch (a compiled kernel, or Emulation.one_launch)
        # (op, output index, (shape, dtype) its fake gave the buffer, what its kernel returned at a replay)
        self.fake_mismatches: list[tuple] = []
        self.moved: list[tuple[str, str, str]] = []  # (op, "file:line", code): a kernel gave an argument new memory
        self.replays = 0
        self.failed = False
        self.pool_object: Pool | None = None
        self._recorder: Recorder | None = None
        self._patches: list = []
        self.auto_dispatch_capture = False

    def capture_begin(self, pool=None, capture_error_mode="global") -> None:
        emulation = Emulation.current
        if emulation is None:
            raise RuntimeError("torch.npu.NPUGraph needs opgen's NPU graph emulation installed")
        if emulation.current_stream.stream_id == 0:
            raise RuntimeError("NPU graphs cannot be captured on the default stream: use torch.npu.graph(...), "
                               "which captures on a side stream")
        if emulation.capturing is not None:
            raise RuntimeError("another NPU graph is being captured: captures cannot nest")
        self.pool_object = emulation.pool(pool)
        self.launches, self.kernels, self.random, self.moved, self.failed = [], {}, [], [], False
        self.one_launch = set()
        self.capture_error_mode = capture_error_mode
        emulation.capturing = self
        emulation.graphs.append(self)
        self._recorder = Recorder(self, emulation)
        self._patch_host_copies()
        self._recorder.__enter__()

    def capture_end(self) -> None:
        emulation = Emulation.current
        if self._recorder is not None:
            self._recorder.__exit__(None, None, None)
            self._recorder = None
        for owner, name, value in reversed(self._patches):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        self._patches = []
        if emulation is not None and emulation.capturing is self:
            emulation.capturing = None

    def _patch_host_copies(self) -> None:
        recorder = self._recorder

        def refusing(name, original):
            def method(tensor, *args, **kwargs):
                if name == "to" and not _to_host(args, kwargs):
                    return original(tensor, *args, **kwargs)
                raise recorder.refuse(f"Tensor.{name}()", "a copy of device memory to the host", "host-copy")
            return method

        for name in (*HOST_COPIES, "to"):
            self._patches.append((torch.Tensor, name, torch.Tensor.__dict__.get(name, _MISSING)))
            setattr(torch.Tensor, name, refusing(name, getattr(torch.Tensor, name)))

    def replay(self) -> None:
        if self.failed or (self.pool_object is None):
            raise RuntimeError("NPUGraph.replay() of a graph that was not captured (or whose capture failed)")
        for launch in self.launches:
            result = launch.run()
            flat = pytree.tree_leaves(result)
            for index, buffer in launch.fresh:
                real = flat[index]
                if launch.key and (real.shape, real.dtype) != (buffer.shape, buffer.dtype):
                    # the buffer was allocated from the op's fake: the kernel does not write what the graph planned
                    self.fake_mismatches.append((launch.kernel, index, (tuple(buffer.shape), buffer.dtype),
                                                 (tuple(real.shape), real.dtype)))
                    continue
                buffer.copy_(real)
        self.replays += 1

    def reset(self) -> None:
        self.launches, self.pool_object = [], None

    def pool(self) -> tuple:
        return self.pool_object.handle if self.pool_object is not None else (0, 0)


def _to_host(args, kwargs) -> bool:
    """Tensor.to(...) names the host: the string "cpu" (an NPU kernel would write x.device for its own device)."""
    target = kwargs.get("device", args[0] if args else None)
    return isinstance(target, str) and target.split(":")[0] == "cpu"


class graph:  # torch_npu's name
    """torch_npu.npu.graph: synchronize, empty the caches, enter the capture stream, capture_begin ... capture_end."""

    def __init__(self, npu_graph, pool=None, stream=None, auto_dispatch_capture=False, capture_error_mode="global"):
        emulation = Emulation.current
        if emulation.default_capture_stream is None:
            emulation.default_capture_stream = Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else emulation.default_capture_stream
        self.stream_ctx = stream_context(self.capture_stream)
        self.npu_graph, self.capture_error_mode = npu_graph, capture_error_mode
        self.npu_graph.auto_dispatch_capture = auto_dispatch_capture

    def __enter__(self):
        synchronize()
        empty_cache()
        host_empty_cache()
        self.stream_ctx.__enter__()
        self.npu_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None:
            self.npu_graph.failed = True
        self.npu_graph.capture_end()
        self.stream_ctx.__exit__(exc_type, exc_value, traceback)


class Stream:
    """A numbered stream on one synchronous timeline; id 0 is the default stream."""

    def __init__(self, device=None, priority=0, stream_id=None, device_index=None, device_type=None, **_kwargs):
        emulation = Emulation.current
        if stream_id is None:
            stream_id = emulation.next_stream_id
            emulation.next_stream_id += 1
        self.stream_id, self.priority, self.device = stream_id, priority, device
        self.device_index, self.device_type = device_index, device_type

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(self.stream_id)

    def __repr__(self) -> str:
        return f"<emulated torch.npu.Stream {self.stream_id}>"

    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def record_event(self, event=None):
        return event if event is not None else Event()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        _refuse_stream_sync(f"Stream.synchronize() of {self!r}")


class Event:
    """A no-op event: every task is done when it is issued."""

    def __init__(self, *_args, **_kwargs) -> None:
        pass

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        _refuse_stream_sync("Event.synchronize()")


def _refuse_stream_sync(what: str) -> None:
    """The host waiting for a stream or an event: inside a capture, a misuse of the capturing stream."""
    emulation = Emulation.current
    if emulation is not None and emulation.capturing is not None:
        raise emulation.capturing._recorder.refuse(what, "the host waits for a stream of the captured graph",
                                                   "stream-sync")


@contextlib.contextmanager
def stream_context(stream):
    emulation = Emulation.current
    previous = emulation.current_stream
    emulation.current_stream = stream if stream is not None else previous
    try:
        yield
    finally:
        emulation.current_stream = previous


def synchronize(*_args, **_kwargs) -> None:
    emulation = Emulation.current
    if emulation is not None and emulation.capturing is not None:
        raise emulation.capturing._recorder.refuse("torch.npu.synchronize()", "the host waits for the device",
                                                   "synchronize")


def empty_cache() -> None:
    pass


def host_empty_cache() -> None:
    pass


def _not_emulated(name: str):
    def refuse(*_args, **_kwargs):
        raise NotImplementedError(f"torch.npu.{name} is not emulated on CPU by opgen (parameter-updated ops, "
                                  "super kernels and graph task groups need an NPU)")
    return refuse


class Emulation:
    """The NPU graph names put into a torch_npu stand-in while installed (`install`/`uninstall`), and what the
    captures did: `graphs` (every NPUGraph that captured, AclGraph's empty pool-initialising capture included)."""

    current: ClassVar[Emulation | None] = None

    def __init__(self, one_launch: dict | None = None) -> None:
        # ops recorded as one launch whatever their kernel: "ns::op" -> (dispatch key replay runs, why that kernel)
        self.one_launch: dict[str, tuple[str, str]] = dict(one_launch or {})
        self.graphs: list[NPUGraph] = []
        self.pools: dict[tuple, Pool] = {}
        self.capturing: NPUGraph | None = None
        self.next_stream_id = 1
        self.default_stream = None
        self.current_stream = None
        self.default_capture_stream = None
        self.limits: dict[int, dict] = {}
        self._saved: list = []

    # --- pools -------------------------------------------------------------------------------------------

    def pool(self, handle=None) -> Pool:
        if handle is None or tuple(handle) not in self.pools:
            handle = tuple(handle) if handle is not None else self.new_pool_handle()
            self.pools.setdefault(handle, Pool(handle))
        return self.pools[tuple(handle)]

    def new_pool_handle(self) -> tuple:
        handle = (0, len(self.pools) + 1)
        self.pools[handle] = Pool(handle)
        return handle

    def owner(self, tensor: torch.Tensor) -> Allocation | None:
        """The pool allocation holding `tensor`'s memory, or None."""
        pointer = tensor.untyped_storage().data_ptr()
        for pool in self.pools.values():
            found = pool.find(pointer)
            if found is not None:
                return found
        return None

    def storage_from_pointer(self, pointer: int, device, nbytes: int):
        for pool in self.pools.values():
            if pool.find(pointer) is not None:
                return torch._C._construct_storage_from_data_pointer(pointer, torch.device(device), nbytes)
        if self._captured_memory(pointer):
            return torch._C._construct_storage_from_data_pointer(pointer, torch.device(device), nbytes)
        raise RuntimeError(f"torch_npu._C._construct_storage_from_data_pointer: {pointer:#x} is not memory of an NPU "
                           "graph pool nor memory a captured graph works on: a tensor rebuilt on it would dangle on a "
                           "device (opgen's emulation refuses it)")

    def _captured_memory(self, pointer: int) -> bool:
        """`pointer` lies in memory a recorded launch works on (a caller's buffer the graph writes in place, which
        AclGraph rebuilds an output aliasing it on): alive while the graph is, as the caller keeps it on a device."""
        for graph in self.graphs:
            for launch in graph.launches:
                for tensor in pytree.tree_leaves((launch.args, launch.kwargs)):
                    if isinstance(tensor, torch.Tensor):
                        storage = tensor.untyped_storage()
                        if storage.data_ptr() <= pointer < storage.data_ptr() + max(storage.nbytes(), 1):
                            return True
        return False

    @property
    def captures(self) -> list[NPUGraph]:
        """The captures that recorded something (AclGraph's pool-initialising capture is empty)."""
        return [g for g in self.graphs if g.launches or g.kernel_runs or g.one_launch or g.failed]

    # --- a kernel's Python outside capture ----------------------------------------------------------------

    @contextlib.contextmanager
    def kernel_python(self):
        """Counts, in the yielded list's first item, calls of any kernel code captured so far (by code object)."""
        runs = [0]
        codes = set().union(*(g.kernel_code for g in self.graphs)) if self.graphs else set()
        previous = sys.getprofile()

        def count(frame, event, _arg):
            if event == "call" and frame.f_code in codes:
                runs[0] += 1

        sys.setprofile(count)
        try:
            yield runs
        finally:
            sys.setprofile(previous)

    def record_call(self, fn) -> NPUGraph:
        """`fn()` captured into a graph of its own (no AclGraph): what the kernels' Python records now."""
        probe = NPUGraph()
        with stream_context(Stream()):
            probe.capture_begin()
            try:
                fn()
            finally:
                probe.capture_end()
        self.graphs.remove(probe)
        return probe

    # --- the names -----------------------------------------------------------------------------------------

    def names(self) -> tuple[dict, dict, dict]:
        """(torch_npu.npu names, torch_npu._C names, torch_npu names)."""
        def current_stream(*_args, **_kwargs):
            return self.current_stream

        def set_stream(stream):
            self.current_stream = stream

        def get_stream_limit(stream):
            return dict(self.limits.get(getattr(stream, "stream_id", None), CORE_LIMITS))

        def set_stream_limit(stream, cube_num, vector_num):
            self.limits[stream.stream_id] = {"cube_core_num": cube_num, "vector_core_num": vector_num}

        npu = {"NPUGraph": NPUGraph, "graph": graph, "Stream": Stream, "Event": Event, "stream": stream_context,
               "current_stream": current_stream, "set_stream": set_stream, "current_device": lambda: None,
               "graph_pool_handle": self.new_pool_handle, "synchronize": synchronize, "empty_cache": empty_cache,
               "host_empty_cache": host_empty_cache, "get_stream_limit": get_stream_limit,
               "set_stream_limit": set_stream_limit, "memory_snapshot": list,
               # read by npugraph_ex's compile cache for its key (inference/_cache_compiler.py): nobody set a level
               "_get_deterministic_level": lambda: 0}
        for name in ("graph_task_update_begin", "graph_task_update_end", "graph_task_group_begin",
                     "graph_task_group_end", "ExternalEvent"):
            npu[name] = _not_emulated(name)
        c = {"_npu_getCheckpointState": lambda _device, pool: ("checkpoint", tuple(pool) if pool else None,
                                                              len(self.pool(pool).allocations) if pool else 0),
             "_npu_setCheckpointPoolState": lambda *_args: None,
             "_construct_storage_from_data_pointer": self.storage_from_pointer,
             "_construct_NPU_Tensor_From_Storage_And_Metadata": _tensor_from_metadata}
        return npu, c, {"get_npu_format": lambda _tensor: ND_FORMAT}

    def install(self, torch_npu: types.ModuleType) -> None:
        """Put the names into `torch_npu` (its `npu` namespace is also torch.npu) and make CPU tensors NPU ones."""
        if Emulation.current is not None:
            raise RuntimeError("opgen's NPU graph emulation is installed already")
        Emulation.current = self
        self.default_stream = Stream(stream_id=0)
        self.current_stream = self.default_stream
        npu_names, c_names, top_names = self.names()
        if "_C" not in vars(torch_npu):
            c_module = types.ModuleType("torch_npu._C")
            self._set(torch_npu, "_C", c_module)
        for owner, names in ((torch_npu.npu, npu_names), (torch_npu._C, c_names), (torch_npu, top_names)):
            for name, value in names.items():
                self._set(owner, name, value)
        self._set(torch.Tensor, "is_npu", property(lambda tensor: tensor.device.type == "cpu"))

    def _set(self, owner, name: str, value) -> None:
        self._saved.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)

    def uninstall(self) -> None:
        if Emulation.current is not self:
            return
        if self.capturing is not None:
            self.capturing.capture_end()
        for owner, name, value in reversed(self._saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        self._saved = []
        Emulation.current = None


Emulation.CaptureError = CaptureError  # for checks that hold only the emulation


def _tensor_from_metadata(metadata: dict, storage) -> torch.Tensor:
    """torch_npu._C._construct_NPU_Tensor_From_Storage_And_Metadata: a tensor on `storage` as `metadata` describes."""
    tensor = torch.empty(0, dtype=metadata["dtype"]).set_(storage, metadata["storage_offset"], metadata["size"],
                                                          metadata["stride"])
    return tensor.requires_grad_(bool(metadata.get("requires_grad", False)))

