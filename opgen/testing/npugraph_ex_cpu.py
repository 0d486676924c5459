"""Run npugraph_ex's compiler on CPU (opgen.testing; imports only the standard library and torch).

npugraph_ex, the torch.compile backend of torch_npu, is plain Python in the torch-npu wheel
(`torch_npu/dynamo/npugraph_ex/`); `opgen npugraph-ex fetch` extracts that directory, and only it, into
`<cache>/npugraph_ex/<torch-npu version>/npugraph_ex/` (`<cache>`: $OPGEN_CACHE_DIR, else
$XDG_CACHE_HOME/opgen, else ~/.cache/opgen). torch X.Y.Z pairs with torch-npu X.Y.Z and its post releases
X.Y.Z.postN (each wheel requires torch==X.Y.Z); the newest of them fetched is used. Installing torch-npu
itself without Ascend's CANN breaks `import torch`, so this module never does.

`Session` (a context manager) makes npugraph_ex usable for the duration of a `with` block:
- With the real torch_npu and an NPU, npugraph_ex is torch_npu's own.
- Otherwise it imports the cached npugraph_ex with the smallest stand-in for the torch_npu names that
  npugraph_ex's modules touch when they are imported and when they compile on CPU (found by trial with
  torch-npu 2.13.0): a `torch_npu` module whose `npu` namespace (also set as `torch.npu`) holds `Event`
  (an annotation), `Stream` (an annotation, also created for the capture, never used), `current_stream()`
  (its `stream_id` is read; None means "no stream") and `set_stream` (compared with graph node targets,
  never called). Any other attribute is missing, so `hasattr` probes answer False and anything else
  fails loudly.
- npugraph_ex's pattern-fusion pass is switched off on the stand-in: its patterns are written in
  torch_npu's own C++ operators (torch.ops.npu.npu_add_rms_norm, ...), which do not exist without
  torch_npu, and a graph of one custom op cannot match them. Every other npugraph_ex pass runs.
  `session.backend(fusion=True)` switches it on, for the patterns registered with
  `npugraph_ex.register_replacement`; on the stand-in the five built-in pattern families are not
  registered during the session (BUILT_IN_PATTERNS_OFF says why, and the session prints it). Patterns
  registered during a session are dropped at its end, so sessions do not see each other's patterns.
- `Session()` (compile only) replaces one piece, `AclGraph`, npugraph_ex's capture-and-replay manager:
  the concrete graph builds it at the very end of `AclConcreteGraph.optimize_graph_without_runtime`, after
  every FX pass, and npugraph_ex's generated kernel calls it with the inputs of each run. The replacement
  records that final FX graph and runs the `forward` npugraph_ex generated for capture, eagerly on CPU,
  handing it the inputs the way capture and replay do (`clone_input`: a private copy of every user input
  the graph does not mutate; mutated inputs and inputs aliased by outputs as they are).
- `Session(capture=True)` replaces nothing: npugraph_ex's own AclGraph captures and replays, on the NPU
  graph emulation of npu_graph_cpu (`session.emulation`), which adds to the stand-in exactly the
  torch_npu names AclGraph uses on that path. It is refused (`unavailable(capture=True)`) where a real NPU is.
On exit `sys.modules` (npugraph_ex and the stand-in), `sys.path`, `torch.npu`, every name the emulation
put in (and `Tensor.is_npu`), the entries npugraph_ex
adds to torch's traceable collective remaps (and their module attributes), the SIGINT/SIGTERM handlers
and the atexit hook npugraph_ex installs are as they were before; npugraph_ex is imported once per
process and re-installed on the next entry. (Operators npugraph_ex defines in its own namespaces and
torch modules it imports stay loaded, as after any import of torch code.)
"""

from __future__ import annotations

import atexit
import importlib
import importlib.metadata
import importlib.util
import re
import signal
import sys
import types
from pathlib import Path
from typing import ClassVar

from ..files import cache_root
from . import torch_compat

FETCH_HINT = "run 'opgen npugraph-ex fetch'"
BUILT_IN_PATTERNS = ("_register_addrmsnormcast_pattern", "_register_addrmsnormdynamicquant_pattern",
                     "_register_addrmsnormdynamicquant_pattern2", "_register_addrmsnormquant_patterns",
                     "_register_batchmatmultranspose_patterns")  # npugraph_ex.patterns.pattern_util's families
BUILT_IN_PATTERNS_OFF = ("npugraph_ex's built-in fusion patterns (add_rms_norm_cast, add_rms_norm_dynamic_quant, "
                         "add_rms_norm_quant, batch_matmul_transpose) are not registered: they are written in "
                         "torch_npu's operators (torch.ops.npu.npu_add_rms_norm, ...), which the CPU stand-in for "
                         "torch_npu does not define; the patterns registered with npugraph_ex.register_replacement run")
PACKAGE = "npugraph_ex"
EMULATION = ".npu_graph_cpu"  # opgen/testing/npu_graph_cpu.py
RECORD = "opgen-fetch.json"
RELEASE = re.compile(r"\d+\.\d+\.\d+")  # torch's X.Y.Z
FIRST_LINE = (2, 7)  # torch-npu ships npugraph_ex from its 2.7.1 post releases on (opgen/npugraph_ex/fetch.py)
_MISSING = object()


def torch_release() -> str | None:
    """The installed torch's X.Y.Z (from its metadata, without importing torch); None when it is absent. Found once
    per process: each look-up reads every folder on sys.path (a run of several projects' tests asks hundreds of
    times), and the torch a process runs does not change under it."""
    if not _TORCH_RELEASE:
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return None
        match = RELEASE.match(version)
        _TORCH_RELEASE.append(match.group(0) if match else version)
    return _TORCH_RELEASE[0]


_TORCH_RELEASE: list[str] = []


def line_lacks_npugraph_ex(release: str) -> bool:
    """torch `release` is older than every torch-npu line that has npugraph_ex: nothing to fetch, ever."""
    match = re.match(r"(\d+)\.(\d+)", release)
    return match is not None and (int(match.group(1)), int(match.group(2))) < FIRST_LINE


def install_dir(version: str) -> Path:
    """Where `opgen npugraph-ex fetch` puts torch-npu `version`'s npugraph_ex (the directory for sys.path)."""
    return cache_root() / PACKAGE / version


def serves(torch_npu_version: str, release: str) -> tuple[int, int] | None:
    """How well torch-npu `torch_npu_version` serves torch `release` (higher is better: its patch, its post
    number or -1), None when it does not: X.Y.C or X.Y.C.postN with C <= Z for a torch release X.Y.Z (torch 2.14.1
    runs torch-npu 2.14.0's npugraph_ex: not every torch patch release gets a torch-npu); any other `release`
    (X.Y.Z.postN, X.Y.Zrc1) is served by itself alone."""
    if RELEASE.fullmatch(release) is None:
        return (0, 0) if torch_npu_version == release else None
    major, minor, patch = release.split(".")
    match = re.fullmatch(re.escape(f"{major}.{minor}.") + r"(\d+)(?:\.post(\d+))?", torch_npu_version)
    if match is None or int(match.group(1)) > int(patch):
        return None
    return (int(match.group(1)), int(match.group(2) or -1))


def looked_in(version: str) -> str:
    """Where `find(version)` looks, for messages."""
    line = version.rpartition(".")[0]
    posts = f" and the {line}.x up to {version}.postN beside it" if RELEASE.fullmatch(version) else ""
    return f"{install_dir(version)}{posts}"


def find(version: str | None = None) -> Path | None:
    """The fetched npugraph_ex for torch-npu `version` (default: the installed torch's X.Y.Z), or None.

    For a torch release X.Y.Z the newest fetched torch-npu that `serves` it wins: X.Y.Z.postN, X.Y.Z, then the
    earlier X.Y releases."""
    version = version or torch_release()
    if version is None:
        return None
    root = cache_root() / PACKAGE
    candidates = [(post, path) for path in (root.iterdir() if root.is_dir() else ())
                  if (post := serves(path.name, version)) is not None]
    for _, directory in sorted(candidates, reverse=True):
        if (directory / PACKAGE / "__init__.py").is_file() and (directory / RECORD).is_file():
            return directory
    return None


def _real_torch_npu() -> bool:
    """torch_npu is importable and sees an NPU (then npugraph_ex is torch_npu's own)."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return bool(torch.npu.is_available())


def unavailable(capture: bool = False) -> str | None:
    """Why npugraph_ex cannot run here, or None. `capture`: capture and replay on the CPU emulation, which a
    machine with a real NPU does not need (its NPU tier captures for real)."""
    if _real_torch_npu():
        return ("an NPU is present: the NPU tier captures and replays on it (test_<op>_npugraph_ex_capture_replay)"
                if capture else None)
    if torch_release() is None:
        return "torch is not installed"
    if find() is None and line_lacks_npugraph_ex(torch_release()):
        return (f"npugraph_ex does not exist for torch {torch_release()}: torch-npu ships it from its 2.7.1 post "
                "releases on, so these tiers run on torch 2.7 or later")
    if find() is None:
        return f"npugraph_ex not found: {FETCH_HINT} (looked in {looked_in(torch_release())})"
    return None


def emulation_module() -> types.ModuleType:
    """npu_graph_cpu, the NPU graph emulation beside this module (it imports torch, so only a capture session
    loads it)."""
    return importlib.import_module(EMULATION, __package__)


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        raise AttributeError(f"{self.__name__}.{name} is not part of opgen's CPU stand-in for torch_npu")


def _stand_in() -> types.ModuleType:
    """The torch_npu names npugraph_ex touches on CPU (see the module docstring)."""

    class Event:
        def __init__(self, *_args, **_kwargs):
            raise RuntimeError("torch.npu.Event needs an NPU (opgen's CPU stand-in for torch_npu)")

    class Stream:
        """Created by npugraph_ex's generated code for the capture, which the CPU run replaces."""

        def __init__(self, *args, **kwargs):
            pass

    def set_stream(*_args, **_kwargs):
        raise RuntimeError("torch.npu.set_stream needs an NPU (opgen's CPU stand-in for torch_npu)")

    npu = _StandInModule("torch_npu.npu")
    npu.Event, npu.Stream, npu.set_stream = Event, Stream, set_stream
    npu.current_stream = lambda *_args, **_kwargs: types.SimpleNamespace(stream_id=None)
    torch_npu = _StandInModule("torch_npu")
    torch_npu.npu = npu
    return torch_npu


class _Loaded:
    """npugraph_ex imported once per process: its modules, and whether it runs on the stand-in."""

    modules: dict | None = None
    stand_in: types.ModuleType | None = None
    eager_acl_graph: type | None = None
    told = False  # BUILT_IN_PATTERNS_OFF printed (once per process)
    # (a dict of torch's, {key: its value before or _MISSING}, {key: npugraph_ex's value})
    torch_changes: ClassVar[list] = []


def _torch_dicts() -> list:
    """The torch dicts npugraph_ex's import writes into (adjust_traceable_collective_remaps)."""
    import torch.distributed._functional_collectives as functional_collectives

    return [functional_collectives.traceable_collective_remaps, vars(functional_collectives)]


def _apply_torch_changes(undo: bool) -> None:
    for mapping, before, after in _Loaded.torch_changes:
        for key in after:
            value = before[key] if undo else after[key]
            if value is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = value


def _eager_acl_graph(acl_graph_module) -> type:
    """AclGraph with capture and replay replaced by one eager run of the `forward` npugraph_ex generated."""

    class EagerAclGraph(acl_graph_module.AclGraph):
        def __init__(self, fx_graph=None, fx_forward=None, config=None):
            # AclGraph.__init__ asks torch_npu for the current NPU; nothing else of it is needed here
            self._fx_graph, self._fx_forward, self._config = fx_graph, fx_forward, config or {}
            self._fx_graph_name = None
            self._cache_info = None
            if fx_graph is not None and Session.current is not None:
                Session.current.graphs.append(fx_graph)  # the final FX graph, after every npugraph_ex pass

        def load(self, aclgraph_cache_info):
            # AclGraph.load creates an NPU memory pool; only the input bookkeeping is kept
            self._cache_info = aclgraph_cache_info
            self._fx_graph_name = aclgraph_cache_info.fx_graph_name

        def __call__(self, *args, **kwargs):
            if Session.current is not None:
                Session.current.runs += 1
            info = self._cache_info
            args = list(args)
            if info is not None and self.config.get("clone_input", True):
                # as AclGraph.capture + process_input: the graph reads private copies of unmutated user inputs
                for name, index in info.user_inputs_mapping.items():
                    if name in (info.mutated_user_inputs or ()) or index in (info.userinput_ref_with_output or {}):
                        continue
                    if hasattr(args[index], "clone"):
                        args[index] = args[index].clone()
            if self.fx_forward is None:
                return self.fx_graph(*args, **kwargs)
            return self.fx_forward(*args, node_info=[], is_capturing=True, **kwargs)

    return EagerAclGraph


class Session:
    """`with Session() as session:` compile with `session.backend()`; `session.graphs` holds the final FX
    graph of each compiled graph and `session.runs` counts the runs that reached capture/replay.
    `Session(capture=True)`: AclGraph captures and replays on `session.emulation` (npu_graph_cpu);
    `one_launch` names ops it records as one launch each (npu_graph_cpu.Emulation)."""

    current: Session | None = None

    def __init__(self, capture: bool = False, one_launch: dict | None = None):
        self.graphs: list = []
        self.runs = 0
        self.capture = capture
        self.one_launch = one_launch  # for the emulation: ops captured as one launch ({"ns::op": (key, why)})
        self.emulation = None
        self._saved: dict = {}

    def backend(self, *, fusion: bool = False, **options):
        """npugraph_ex's own backend: CompilerConfig, mode npugraph_ex, the backend's decompositions and AOT.
        `fusion`: its pattern-fusion pass on (the registered patterns; module docstring)."""
        npugraph_ex = _Loaded.modules[PACKAGE]
        config = npugraph_ex.CompilerConfig()
        config.mode = "npugraph_ex"
        if _Loaded.stand_in is not None and not fusion:
            # its patterns are torch_npu's C++ ops (module docstring)
            torch_compat.set_npugraph_ex_option(config, "pattern_fusion_pass", False)
        if _Loaded.stand_in is not None and fusion and "built_in_patterns" not in self._saved:
            util = _Loaded.modules[f"{PACKAGE}.patterns.pattern_util"]
            self._saved["built_in_patterns"] = {name: getattr(util, name) for name in BUILT_IN_PATTERNS}
            for name in BUILT_IN_PATTERNS:
                setattr(util, name, lambda *_args, **_kwargs: None)
            if not _Loaded.told:
                print(f"npugraph_ex_cpu: {BUILT_IN_PATTERNS_OFF}")
                _Loaded.told = True
        for key, value in options.items():
            torch_compat.set_npugraph_ex_option(config, key, value)
        return npugraph_ex.get_npu_backend(compiler_config=config)

    def __enter__(self):
        import torch

        if Session.current is not None:
            raise RuntimeError("npugraph_ex_cpu.Session is not re-entrant")
        reason = unavailable(self.capture)
        if reason is not None:
            raise RuntimeError(reason)
        self._saved = {"path": list(sys.path), "npu": getattr(torch, "npu", _MISSING),
                       "modules": {name: sys.modules[name] for name in _our_modules(sys.modules)}}
        try:
            if _Loaded.modules is None:
                _first_import()
            else:
                if _Loaded.stand_in is not None:
                    sys.modules["torch_npu"] = _Loaded.stand_in
                    torch.npu = _Loaded.stand_in.npu
                sys.modules.update(_Loaded.modules)
                _apply_torch_changes(undo=False)
            if self.capture:
                self.emulation = emulation_module().Emulation(self.one_launch)
                self.emulation.install(_Loaded.stand_in)
            else:
                acl_graph = _Loaded.modules[f"{PACKAGE}._acl_concrete_graph.acl_graph"]
                converter = _Loaded.modules[f"{PACKAGE}._acl_concrete_graph.fx2acl_converter"]
                self._saved["acl_graph"] = (acl_graph.AclGraph, converter.AclGraph)
                acl_graph.AclGraph = converter.AclGraph = _Loaded.eager_acl_graph
            self._saved["patterns"] = _registered_patterns()
        except BaseException:
            self._restore()
            raise
        Session.current = self
        return self

    def __exit__(self, *exc_info) -> None:
        Session.current = None
        self._restore()

    def _restore(self) -> None:
        import torch

        if self.emulation is not None:
            self.emulation.uninstall()
        if "acl_graph" in self._saved:
            acl_graph = _Loaded.modules[f"{PACKAGE}._acl_concrete_graph.acl_graph"]
            converter = _Loaded.modules[f"{PACKAGE}._acl_concrete_graph.fx2acl_converter"]
            acl_graph.AclGraph, converter.AclGraph = self._saved.pop("acl_graph")
        if "patterns" in self._saved:
            _restore_patterns(self._saved.pop("patterns"))
        if "built_in_patterns" in self._saved:
            util = _Loaded.modules[f"{PACKAGE}.patterns.pattern_util"]
            for name, function in self._saved.pop("built_in_patterns").items():
                setattr(util, name, function)
        if _Loaded.modules is not None and _Loaded.stand_in is None:
            return  # the real torch_npu: it stays, with its npugraph_ex
        if _Loaded.modules is not None:
            # keep every npugraph_ex module, lazily imported ones included, for the next entry
            _Loaded.modules.update({name: sys.modules[name] for name in _our_modules(sys.modules)
                                    if name.startswith(PACKAGE)})
        _apply_torch_changes(undo=True)
        for name in _our_modules(sys.modules):
            if name not in self._saved["modules"]:
                del sys.modules[name]
        sys.modules.update(self._saved["modules"])
        sys.path[:] = self._saved["path"]
        if self._saved["npu"] is _MISSING:
            if hasattr(torch, "npu"):
                del torch.npu
        else:
            torch.npu = self._saved["npu"]


def _pattern_pass():
    """npugraph_ex's one PatternMatcherPass, which register_replacement fills and its fusion pass applies."""
    return _Loaded.modules[f"{PACKAGE}.patterns.pattern_pass_manager"]._pattern_manager().pass_dict


def _registered_patterns() -> tuple[dict, dict]:
    patterns = _pattern_pass()
    return ({key: list(value) for key, value in patterns.patterns.items()},
            {key: list(value) for key, value in patterns.seen_patterns.items()})


def _restore_patterns(saved: tuple[dict, dict]) -> None:
    patterns = _pattern_pass()
    for registry, before in zip((patterns.patterns, patterns.seen_patterns), saved, strict=True):
        registry.clear()
        registry.update({key: list(value) for key, value in before.items()})


def _our_modules(modules) -> list[str]:
    return [name for name in list(modules) if name.split(".")[0] in (PACKAGE, "torch_npu")]


def _first_import() -> None:
    """Import npugraph_ex (under the stand-in unless torch_npu has an NPU); undo its process-wide hooks."""
    import torch

    if _real_torch_npu():
        import torch_npu  # noqa: F401  (registers npugraph_ex as an alias of torch_npu.dynamo.npugraph_ex)

        module = importlib.import_module(PACKAGE)
        stand_in = None
    else:
        stand_in = _stand_in()
        sys.modules["torch_npu"] = stand_in
        torch.npu = stand_in.npu
        sys.path.insert(0, str(find()))
        handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        snapshots = [(mapping, dict(mapping)) for mapping in _torch_dicts()]
        try:
            module = importlib.import_module(PACKAGE)
        finally:
            for mapping, before in snapshots:
                changed = [key for key, value in mapping.items() if key not in before or before[key] is not value]
                _Loaded.torch_changes.append((mapping, {key: before.get(key, _MISSING) for key in changed},
                                              {key: mapping[key] for key in changed}))
            for signum, handler in handlers.items():
                if signal.getsignal(signum) is not handler and handler is not None:
                    signal.signal(signum, handler)
        # its exit hook re-imports modules that need torch_npu; the stand-in is gone by then
        for hook in torch_compat.npugraph_ex_exit_hooks(module):
            atexit.unregister(hook)
    acl_graph = importlib.import_module(f"{PACKAGE}._acl_concrete_graph.acl_graph")
    importlib.import_module(f"{PACKAGE}._acl_concrete_graph.fx2acl_converter")
    importlib.import_module(f"{PACKAGE}.patterns.pattern_util")
    _Loaded.modules = {name: sys.modules[name] for name in _our_modules(sys.modules) if name.startswith(PACKAGE)}
    _Loaded.stand_in = stand_in
    _Loaded.eager_acl_graph = _eager_acl_graph(acl_graph)
