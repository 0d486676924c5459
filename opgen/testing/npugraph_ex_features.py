"""npugraph_ex's production features around each op, on CPU (opgen.testing; `opgen check` runs it too).

Imports only the standard library, torch and the checks beside it. The features a served model turns on next
to capture & replay, each run with npugraph_ex's own code (torch-npu 2.13.0, `opgen npugraph-ex fetch`) on the
emulated NPU graph of npu_graph_cpu:

  compile cache  `CompileCache`: `npugraph_ex.inference.cache_compile` compiles a one-op module and saves it; a fresh
                 Python process that imports only the op's package loads it and calls it: the cache loaded (nothing
                 compiled again, no "broken cache" cleared), the same values as the reference; and a changed fake
                 under the warm cache is not loaded: the package's `compile_cache.cache_dir` is another directory
                 (npugraph_ex's own key holds nothing of the op). One fresh process per project, for every op.
  capture limit  `assert_capture_limit`: one graph for two sizes (dynamic=True), each size captured once and
                 replayed with new values; with `capture_limit=1` the second size falls back to eager, as configured,
                 and every later call runs eagerly, each call equal to the reference.
  streams        `assert_on_a_second_stream`: the op on a second stream inside the compiled graph, on an NPU only;
                 on CPU it skips (STREAMS_NOT_RUN says why), and the capture tier refuses a kernel that synchronizes
                 a stream or an event (npu_graph_cpu), the misuse a multi-stream scope cannot survive.

Each check raises CheckFailed with a `kind` for `opgen check`'s signature table, or skips saying why.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import torch
from torch.fx.experimental import _config as symbolic_shapes_config
from torch.utils import _pytree as pytree

from . import torch_compat
from .capture import _assert_matches_reference, _calls_with_reused_buffers, npu_unavailable, npugraph_ex_cpu
from .capture_cpu import _new_values
from .compiled import skip_a_refused_doubling
from .failures import CheckFailed, outputs_are_new_memory, skip
from .op import Op, call_as_declared
from .values import clone, copy_into, tensor_map

Call = dict
STREAMS_NOT_RUN = ("npugraph_ex's multi-stream scopes run on an NPU only: Dynamo traces `with torch.npu.stream(s):` "
                   "through torch_npu's device interface, whose streams are torch.Stream objects of device type npu, "
                   "which exists only once torch_npu renames the PrivateUse1 backend (once per process, for good); "
                   "the emulated NPU graph is one synchronous timeline besides, on which a missing wait between "
                   "streams cannot show (docs/npugraph_ex.md)")


class OpModule(torch.nn.Module):
    """A module whose forward calls one op: its tensors are the forward's arguments, the rest fixed at build time
    (cache_compile takes only a bound method of a torch.nn.Module)."""

    def __init__(self, overload, call: Call) -> None:
        super().__init__()
        self.overload = overload
        self.call_op = call_as_declared(overload)
        leaves, self.spec = pytree.tree_flatten(call)
        self.tensor_at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        self.constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]

    def extra_repr(self) -> str:  # str(module) is part of npugraph_ex's cache key
        return f"{self.overload}, {self.spec}, constants={self.constants}"

    def arguments(self, call: Call) -> list:
        leaves = pytree.tree_leaves(call)
        return [leaves[i] for i in self.tensor_at]

    def forward(self, *tensors):
        leaves = list(self.constants)
        for index, tensor in zip(self.tensor_at, tensors, strict=True):
            leaves[index] = tensor
        return self.call_op(**pytree.tree_unflatten(leaves, self.spec))


def _config(npugraph_ex, **options):
    config = npugraph_ex.CompilerConfig()
    config.mode = "npugraph_ex"
    # its patterns are torch_npu's C++ ops (npugraph_ex_cpu)
    torch_compat.set_npugraph_ex_option(config, "pattern_fusion_pass", False)
    for key, value in options.items():
        torch_compat.set_npugraph_ex_option(config, key, value)
    return config


def _reference(op: Op) -> Callable[[Call], object]:
    return (lambda call: op.reference(**call)) if op.reference is not None else op


class _Warnings(logging.Handler):
    """npugraph_ex's logged warnings ("Clear broken cache ...", "Skip cache ..."): its cache swallows load errors."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record) -> None:
        self.seen.append(record.getMessage())

    def __enter__(self):
        logging.getLogger("npugraph_ex").addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("npugraph_ex").removeHandler(self)


def skip_for_a_stand_in(op: Op, error: BaseException) -> None:
    """Skip, saying why, when `error` is the NPU graph refusing to capture the CPU kernel that stands in for the op's
    device kernel (a stub still): that kernel is not what the device will capture, and the capture tier judges the
    op's plumbing and names what the device kernel must not do; a feature of npugraph_ex cannot be judged on it."""
    cause = error
    while cause is not None and type(cause).__name__ != "CaptureError":
        cause = cause.__cause__
    name = op.overload.name()
    if cause is None or not op.cpu_kernel or op.cpu_kernel not in str(cause) or not any(
            torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in ("PrivateUse1", "CUDA")):
        return
    first = str(cause).strip().splitlines()
    skip(f"{op.qualname}: its CPU kernel ({op.cpu_kernel}) stands in for the device kernel, and the NPU graph "
                f"refuses to capture it ({first[0] if first else type(cause).__name__}): the feature is judged once "
                "the device kernel exists (test_<op>_npugraph_ex_capture_replay_on_cpu says what it must not do)")


def _session(loader):
    """An entered capture session (its emulation also has the name cache_compile reads for its key)."""
    session = loader.Session(capture=True)
    session.__enter__()
    return session


# --- compile cache ------------------------------------------------------------------------------------------------


class CompileCache:
    """The compile-cache round trip of every op `add`ed (one per test module, for its package): each op's module is
    compiled and saved in this process, then loaded in a fresh process that imports only the packages, on the first
    `assert_round_trip`; each op's result is kept for its test. The caches of every package of the process (projects
    tested together) are loaded by one fresh process."""

    pending: ClassVar[list[CompileCache]] = []  # every instance whose round trip has not run yet

    def __init__(self, package: str, cache_module: str | None = "", batch: bool = True) -> None:
        """`package`: the module the loading process imports; `cache_module`: the module whose `cache_dir` names
        the cache directory (default: the package's compile_cache; None: none, a directory of its own); `batch`:
        run with the other pending instances at the first `assert_round_trip` (else call `run`)."""
        self.package = package
        self.cache_module = f"{package}.compile_cache" if cache_module == "" else cache_module
        self.ops: dict[str, tuple[Op, Callable[[int], Call]]] = {}
        self.results: dict[str, object] | None = None
        self.root = ""
        self.cache_dir = ""
        if batch:
            CompileCache.pending.append(self)

    def add(self, op: Op, make_call: Callable[[int], Call]) -> None:
        self.ops[op.qualname] = (op, make_call)

    def case(self, op: Op, make_call: Callable[[int], Call]) -> Callable:
        """A decorator for the op's test: `add`s the op when the test module is imported, before any test runs."""
        self.add(op, make_call)
        return lambda test: test

    def assert_round_trip(self, op: Op) -> str:
        if self.results is None:
            batch, CompileCache.pending = [c for c in CompileCache.pending if c.results is None], []
            _round_trip([*batch, *([self] if self not in batch else [])])
        result = self.results[op.qualname]
        if isinstance(result, BaseException):
            skip_for_a_stand_in(op, result)
            raise result
        print(result)
        return result

    # --- this process --------------------------------------------------------------------------------------------

    def compile_all(self, loader) -> list[str]:
        """Compile and save every op's module; the ops whose cache the fresh process is to load."""
        import importlib

        importlib.import_module(self.package)
        self.root = tempfile.mkdtemp(prefix="opgen-compile-cache-")
        if self.cache_module is None:
            self.cache_dir = os.path.join(self.root, "cache")
        else:
            self.cache_dir = importlib.import_module(self.cache_module).cache_dir(self.root)
        self.results, loading = {}, []
        for qualname, (op, make_call) in self.ops.items():
            try:
                self.results[qualname] = self._compile(loader, op, make_call, len(loading))
                loading.append(qualname)
            except AssertionError as failed:
                self.results[qualname] = failed if isinstance(failed, CheckFailed) else CheckFailed(
                    str(failed), "compiled-differs")
            except Exception as error:  # noqa: BLE001  (the op's own test raises it: a TODO fake, ...)
                self.results[qualname] = error
            except BaseException as error:  # a skip (no CPU reference kernel yet, ...)
                if type(error).__name__ not in ("Skipped", "SkipCheck", "XFailed"):
                    raise
                self.results[qualname] = error
        return loading

    def _compile(self, loader, op: Op, make_call, index: int) -> str:
        """Compile the op's module with cache_compile (three calls, new values, each against the reference) and keep
        the inputs and expected results of a fourth call for the loading process."""
        reference = _reference(op)
        calls = list(_calls_with_reused_buffers(op, _new_values(make_call, reference), (0, 1, 2, 3)))
        module = OpModule(op.overload, calls[0])
        torch.compiler.reset()
        session = _session(loader)
        try:
            npugraph_ex = sys.modules["npugraph_ex"]  # imported by the session
            config = _config(npugraph_ex)
            cached = npugraph_ex.inference.cache_compile(module.forward, config=config, dynamic=False,
                                                         cache_dir=self.cache_dir)
            with torch.no_grad(), _Warnings() as logged:
                for number, call in enumerate(calls[:3], start=1):
                    reference_call = clone(call)
                    expected = reference(reference_call)
                    with outputs_are_new_memory():
                        actual = clone(cached(*module.arguments(call)))
                    _compare(op, f"compiled with cache_compile, call {number}", actual, expected, call, reference_call)
            cache_bin = npugraph_ex.inference._cache_compiler.CompiledModel.get_cache_bin(
                module.forward, config=config, dynamic=False, cache_dir=self.cache_dir)
        finally:
            session.__exit__(None, None, None)
        if not os.path.isfile(cache_bin):
            raise CheckFailed(f"{op.qualname}: npugraph_ex's cache_compile saved no cache for a module calling "
                                     f"the op ({cache_bin} is missing); its warnings: {logged.seen or 'none'}",
                                     "compile-cache-not-saved")
        last = calls[3]
        reference_call = clone(last)
        expected = reference(reference_call)
        torch.save({"call": last, "expected": expected, "written": {name: reference_call[name] for name in op.written},
                    "overload": str(op.overload), "qualname": op.qualname},
                   os.path.join(self.root, f"op{index}.pt"))
        return cache_bin

    def run(self, loader, process: FreshProcess) -> None:
        """Compile every op here, then load each in `process`; then remove the cache folder (every run makes one)."""
        loading = self.compile_all(loader)
        try:
            try:
                loaded = [process.load(self.package, self.cache_dir, os.path.join(self.root, f"op{index}"),
                                       self.cache_module or "") for index in range(len(loading))]
            except CheckFailed as failed:
                loaded = failed
            self.judge(loading, loaded)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def judge(self, loading: list[str], loaded: list[dict] | BaseException) -> None:
        for index, qualname in enumerate(loading):
            if isinstance(loaded, BaseException):
                self.results[qualname] = loaded
            else:
                self.results[qualname] = self._judge(self.ops[qualname][0], self.results[qualname], loaded[index],
                                                     index)

    def _judge(self, op: Op, cache_bin: str, loaded: dict, index: int):
        where = f"a fresh process importing only {self.package}"
        if loaded.get("missing_op"):
            return CheckFailed(
                f"{op.qualname}: the graph cached by npugraph_ex calls {op.overload}, which {where} does not register: "
                f"{loaded['error']}\n  the cached code calls torch.ops.<namespace>.<op> directly, so the op must be "
                f"registered when {self.package} is imported (register it at import in {self.package}/__init__.py, not "
                "lazily on first use or in another module)", "compile-cache-op-not-registered")
        if loaded.get("error"):
            return CheckFailed(f"{op.qualname}: calling the cached graph in {where} raised {loaded['error']}",
                                      "compile-cache-not-loaded")
        if loaded.get("cache_dir", self.cache_dir) != self.cache_dir:
            return CheckFailed(
                f"{op.qualname}: {where} names another cache directory than the process that saved the cache "
                f"({loaded['cache_dir']}, not {self.cache_dir}): {self.cache_module}.graph_digest() differs "
                "between processes, so no cache is ever found", "compile-cache-not-loaded")
        if not loaded["loaded"] or loaded["compiled"]:
            return CheckFailed(
                f"{op.qualname}: {where} did not load the cache {cache_bin}: it compiled again (Dynamo graphs: "
                f"{loaded['compiled']}); npugraph_ex's warnings: {loaded['warnings'] or 'none'}",
                "compile-cache-not-loaded")
        if not loaded.get("new_key_after_fake_change", True):
            return CheckFailed(
                f"{op.qualname}: a fake changed under the warm cache would load the graph compiled for the old one: "
                f"{self.cache_module}.cache_dir() gave the same directory after the op's fake was replaced "
                f"({self.cache_dir}), and npugraph_ex's own cache key holds nothing of the op; put what the graph "
                "depends on into graph_digest(), or clear the cache after changing the op", "compile-cache-stale")
        saved = torch.load(os.path.join(self.root, f"op{index}.pt"), weights_only=False)
        got = torch.load(os.path.join(self.root, f"op{index}.out.pt"), weights_only=False)
        try:
            _compare(op, f"the cache loaded in {where}", got["result"], saved["expected"], got["call"],
                     {**got["call"], **saved["written"]})
        except AssertionError as differs:
            return CheckFailed(str(differs), "compiled-differs")
        stale = (f"with the op's fake replaced, {self.cache_module}.cache_dir() named another directory, so a changed "
                 "op never loads the old graph" if self.cache_module else
                 "npugraph_ex's cache key holds nothing of the op: clear the cache after changing its schema or fake "
                 "(a package generated by opgen names a directory per version, compile_cache.cache_dir)")
        return (f"{op.qualname}: npugraph_ex's cache_compile compiled a module calling the op (3 calls equal to the "
                f"reference) and saved it; {where} loaded it (no Dynamo graph compiled, no broken cache cleared) and "
                f"its call gave the reference's values; {stale}")


def _round_trip(caches: list[CompileCache]) -> None:
    """Compile every cache's ops here, then load them all in one fresh process."""
    try:
        loader = npugraph_ex_cpu(capture=True)
    except BaseException:  # the skip (npugraph_ex not fetched): the caches stay pending for the next test
        CompileCache.pending.extend(caches)
        raise
    import importlib

    roots = [str(Path(importlib.import_module(cache.package).__file__).resolve().parents[1]) for cache in caches]
    process = FreshProcess(roots)  # started first: its imports overlap the compiles here
    try:
        for cache in caches:
            cache.run(loader, process)
    finally:
        process.close()


class FreshProcess:
    """A Python process that has imported nothing but torch, npugraph_ex's loader and what it is asked to import:
    it loads the compile caches it is given (`load`) and calls them, one request at a time (a line of JSON each
    way, `serve` on its side)."""

    def __init__(self, paths: list[str]) -> None:
        # the folder holding this package (opgen's), whether or not opgen is installed there
        root = str(Path(__file__).resolve().parents[__name__.count(".")])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *paths, os.environ.get("PYTHONPATH", "")])}
        self.died: str | None = None  # how it died, once it has
        self.process = subprocess.Popen([sys.executable, "-c", f"import {__name__} as f; f.serve()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)

    def load(self, module: str, cache_dir: str, files: str, cache_module: str = "") -> dict:
        """Import `module`, load the cache of the call saved at `files`.pt from `cache_dir`, call it (outputs to
        `files`.out.pt); with `cache_module` (a package's compile_cache), replace the op's fake and ask it again."""
        request = {"module": module, "cache_dir": cache_dir, "files": files, "cache_module": cache_module}
        line = ""
        if self.died is None:
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                line = self.process.stdout.readline()
            except (OSError, ValueError):  # a broken pipe: it died
                line = ""
            if not line:
                self.process.kill()
                _, stderr = self.process.communicate()
                self.died = f"exit {self.process.returncode}:\n{stderr[-3000:]}"
        if not line:
            raise CheckFailed(f"the process loading the compile cache died ({self.died})",
                                     "compile-cache-not-loaded")
        return json.loads(line)

    def close(self) -> None:
        if self.died is None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            pipe.close()


def serve() -> None:
    """The fresh process's side of FreshProcess: one JSON request per line on stdin, one JSON reply per line."""
    from . import npugraph_ex_cpu as loader

    replies = sys.stdout
    sys.stdout = sys.stderr  # what the op prints must not corrupt the replies
    if loader.unavailable(capture=True) is None:
        with loader.Session(capture=True):  # npugraph_ex imported while the other process still compiles
            pass
    for line in sys.stdin:
        try:
            result = _serve_one(loader, json.loads(line))
        except Exception as error:  # noqa: BLE001  (the parent names it; the next request still runs)
            result = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(result) + "\n")
        replies.flush()


def _serve_one(loader, request: dict) -> dict:
    import importlib

    importlib.import_module(request["module"])
    saved = torch.load(f"{request['files']}.pt", weights_only=False)
    cache_dir, cache_module = request["cache_dir"], None
    if request["cache_module"]:  # the directory this process computes itself, as a served model would
        cache_module = importlib.import_module(request["cache_module"])
        cache_dir = cache_module.cache_dir(os.path.dirname(request["cache_dir"]))
    result = _load_one(loader, saved, cache_dir, f"{request['files']}.out.pt")
    result["cache_dir"] = cache_dir
    if cache_module is not None and not result["missing_op"]:
        result["new_key_after_fake_change"] = _new_key_after_fake_change(cache_module, saved["qualname"], cache_dir)
    return result


def _compare(op: Op, where: str, actual, expected, call: Call, reference_call: Call) -> None:
    _assert_matches_reference(op, actual, expected, f"{where}: output", "cpu", reference_call)
    for name in op.written:
        _assert_matches_reference(op, call[name], reference_call[name], f"{where}: mutated argument {name!r}",
                                  "cpu", reference_call, name)


def _load_one(loader, saved: dict, cache_dir: str, out: str) -> dict:
    result = {"loaded": False, "compiled": 0, "warnings": [], "error": "", "missing_op": False}
    namespace, _, rest = saved["overload"].partition(".")
    name, _, overload = rest.partition(".")
    try:
        overload_object = getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError) as error:
        return {**result, "missing_op": True, "error": f"{type(error).__name__}: {error}"}
    call = saved["call"]
    module = OpModule(overload_object, call)
    torch._dynamo.utils.counters.clear()
    session = _session(loader)
    try:
        npugraph_ex = sys.modules["npugraph_ex"]  # imported by the session
        cached = npugraph_ex.inference.cache_compile(module.forward, config=_config(npugraph_ex), dynamic=False,
                                                     cache_dir=cache_dir)
        with torch.no_grad(), _Warnings() as logged:
            try:
                output = clone(cached(*module.arguments(call)))
            except Exception as error:  # noqa: BLE001  (reported to the parent, which names it)
                text = f"{type(error).__name__}: {error}"
                missing = "_OpNamespace" in text and "object has no attribute" in text  # torch.ops.<ns>.<op> absent
                return {**result, "error": text, "missing_op": missing}
        result["warnings"] = logged.seen
        result["loaded"] = isinstance(cached._compiled_model, types.FunctionType)
        result["compiled"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    finally:
        session.__exit__(None, None, None)
    torch.save({"result": output, "call": call}, out)
    return result


def _new_key_after_fake_change(cache_module, qualname: str, cache_dir: str) -> bool:
    """The op's fake replaced (another function, as after an edit): the package names a new cache directory. The
    replacement is undone afterwards (a custom_op keeps its fake on the op; a Library op's goes away with the
    library it was registered with), so that the next op of the package is looked up under the digest it was saved
    with."""
    from torch._library.custom_ops import OPDEFS

    def changed_fake(*args, **kwargs):
        raise NotImplementedError("a fake standing for an edited one: never called")

    base = os.path.dirname(cache_dir)
    before = cache_module.cache_dir(base)
    opdef = OPDEFS.get(qualname)
    saved = getattr(opdef, "_abstract_fn", None)
    probe = torch.library.Library(qualname.split("::")[0], "FRAGMENT")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_compat.register_fake_over(qualname, changed_fake, probe)
    try:
        return cache_module.cache_dir(base) != before
    finally:
        if opdef is not None:
            opdef._abstract_fn = saved
        probe._destroy()


# --- capture limit --------------------------------------------------------------------------------------------------


def assert_capture_limit(op: Op, calls: list[Call], derived: bool = False) -> str:
    """One graph for two sizes (`calls`, dynamic=True): each size captured once, then replayed with new values; with
    capture_limit=1 the second size falls back to eager for good, as configured. Every call equals the reference.
    `derived`: opgen made the second call (as for assert_compiles_once, whose pair this is; duck sizing off too)."""
    loader = npugraph_ex_cpu(capture=True)
    reference = _reference(op)
    if derived:
        skip_a_refused_doubling(op, calls, "the reference", reference)
    try:
        return _capture_limit(op, loader, reference, calls)
    except Exception as error:
        skip_for_a_stand_in(op, error)
        raise


def _capture_limit(op: Op, loader, reference: Callable, calls: list[Call]) -> str:
    first, second = calls
    sizes = [first, second, first, second]
    notes = []
    for limit, captures in ((2, 2), (1, 1)):
        torch.compiler.reset()
        torch._dynamo.utils.counters.clear()
        session = loader.Session(capture=True)
        with session, torch.no_grad(), warnings.catch_warnings(record=True) as caught, \
                symbolic_shapes_config.patch(use_duck_shape=False):
            warnings.simplefilter("always")
            # npugraph_ex (imported by the session) names the option by its CompilerConfig field when it falls back
            limit_field = torch_compat.npugraph_ex_option_field(sys.modules["npugraph_ex"].CompilerConfig(),
                                                                "capture_limit")
            compiled = torch.compile(op.as_declared(),
                                     backend=session.backend(capture_limit=limit), fullgraph=True, dynamic=True)
            buffers = {}  # a written argument stays one buffer per size (a new one would recapture)
            python_runs = 0  # of the kernel's Python in calls 3 and 4: none when they replay, some when eager
            for number, base in enumerate(sizes, start=1):
                call = tensor_map(_new_random, base) if number > 2 else clone(base)
                for name in op.written:
                    kept = buffers.setdefault((id(base), name), call[name])
                    copy_into(kept, call[name])
                    call[name] = kept
                reference_call = clone(call)
                expected = reference(reference_call)
                with session.emulation.kernel_python() as ran, outputs_are_new_memory():
                    actual = clone(compiled(**call))
                python_runs += ran[0] if number > 2 else 0
                try:
                    _compare(op, f"capture_limit={limit}, call {number}", actual, expected, call, reference_call)
                except AssertionError as differs:
                    raise CheckFailed(f"{differs}\n(one graph for two sizes under npugraph_ex, dynamic=True)",
                                             "capture-limit") from None
        graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        if graphs != 1:
            raise CheckFailed(
                f"{op.qualname}: Dynamo compiled {graphs} graphs for two sizes with dynamic=True: the op's fake "
                "specialises on a size (a branch or a Python int taken from a shape), so each size gets a graph of "
                "its own, captured by an AclGraph of its own, and npugraph_ex's capture_limit (graph keys per graph) "
                "never applies; compute the fake's shapes from the input sizes without branching on them",
                "capture-limit")
        # npugraph_ex drops its counters when it falls back to eager: the NPU graphs captured tell
        got = len(session.emulation.captures)
        limit_warned = any(f"{limit_field} reached" in str(w.message) for w in caught)
        replayed = python_runs == 0 and all(graph.replays == 2 for graph in session.emulation.captures)
        if got != captures or limit_warned != (limit == 1) or replayed != (limit == 2):
            raise CheckFailed(
                f"{op.qualname}: with capture_limit={limit}, two sizes called twice each should make npugraph_ex "
                f"capture {captures} graph(s){' and fall back to eager' if limit == 1 else ''}; it captured {got}, "
                f"the warning \"{limit_field} reached\" {'was' if limit_warned else 'was not'} given, "
                f"and the repeated sizes "
                f"{'replayed' if replayed else 'ran the kernel (eager)'}",
                "capture-limit")
        notes.append(f"capture_limit={limit}: {got} capture(s)" + (", then eager for the second size on" if limit == 1
                                                                  else ", both sizes replayed with new values"))
    report = (f"{op.qualname}: one npugraph_ex graph for two sizes (dynamic=True) on the emulated NPU graph; "
              + "; ".join(notes) + "; every call equal to the reference")
    print(report)
    return report


def _new_random(tensor: torch.Tensor) -> torch.Tensor:
    """New values of the same kind for a replay: floating tensors redrawn, others kept (indices stay valid)."""
    if tensor.dtype.is_floating_point:
        return torch.randn(tensor.shape, dtype=torch.float32).to(tensor.dtype)
    return tensor.clone()


# --- streams --------------------------------------------------------------------------------------------------------


def assert_on_a_second_stream(op: Op, make_call: Callable[[int], Call]) -> str:
    """On an NPU: the op called inside `with torch.npu.stream(side):` of a function compiled by npugraph_ex (its
    multi-stream scope), the caller's stream waiting for the side stream before the outputs are used; three calls
    with new values, written buffers reused, each against the reference. On CPU it skips (STREAMS_NOT_RUN); the
    capture tier there refuses a kernel that synchronizes a stream or an event, the misuse a scope cannot survive."""
    reason = npu_unavailable()
    if reason is not None:
        skip(f"{op.qualname}: {STREAMS_NOT_RUN}; {reason}")
    reference = _reference(op)
    side = torch.npu.Stream()

    def on_a_second_stream(**kwargs):
        side.wait_stream(torch.npu.current_stream())
        with torch.npu.stream(side):
            result = op.as_declared()(**kwargs)
        torch.npu.current_stream().wait_stream(side)
        return result

    torch.compiler.reset()
    compiled = torch.compile(on_a_second_stream, backend="npugraph_ex", fullgraph=True, dynamic=False)
    with torch.no_grad():
        for number, call in enumerate(_calls_with_reused_buffers(
                op, lambda seed: tensor_map(lambda t: t.to("npu"), make_call(seed)), (0, 1, 2)), start=1):
            cpu_call = tensor_map(lambda t: t.to("cpu"), call)
            expected = reference(cpu_call)
            with outputs_are_new_memory():
                actual = clone(compiled(**call))
            _assert_matches_reference(op, actual, expected, f"on a second stream, call {number}: output", "npu",
                                      cpu_call)
            for name in op.written:
                _assert_matches_reference(op, call[name], cpu_call[name],
                                          f"on a second stream, call {number}: mutated argument {name!r}", "npu",
                                          cpu_call, name)
    return f"{op.qualname}: called on a second stream inside npugraph_ex's graph, 3 calls equal to the reference"
