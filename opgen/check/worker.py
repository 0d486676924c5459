"""The torch side of `opgen check`: one process registers the ops and climbs the rungs for each.

Run by `opgen.check.command` as `python -m opgen.check.worker JOB.json`. It writes one JSON object
per line to its original standard output (the op's own prints go to standard error):
  {"event": "usage", "message", "hint"}          bad input: nothing was run
  {"event": "op", "index", "op"}                 the ops, all resolved before any rung runs
  {"event": "start", "index", "rung"}            so the parent knows which rung a crash or hang hit
  {"event": "rung", "index", "rung", "status", "seconds", "reason", "error", "signature", "evidence"}
  {"event": "done"}
`error` is {"type", "message", "check"} of the exception a failing rung raised (`check`: the opcheck
test that failed); `signature` is set when the worker itself recognised the failure (no exception).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

from . import RUNGS

PROTOCOL = None  # the original stdout, set in main()


def emit(**event) -> None:
    PROTOCOL.write(json.dumps(event, default=str) + "\n")
    PROTOCOL.flush()


class Usage(Exception):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


class RungFailed(Exception):
    """A rung found a problem without an exception of its own: `signature` names it; `causes`, computed from the op,
    come before the row's."""

    def __init__(self, signature: str, message: str, evidence: str = "", causes: tuple[str, ...] = (),
                 next_action: str = "") -> None:
        super().__init__(message)
        self.signature, self.evidence, self.causes, self.next_action = signature, evidence, causes, next_action


class RungSkipped(Exception):
    pass


# --- resolving targets --------------------------------------------------------------------------


class Op:
    def __init__(self, name: str, overload=None, examples=None, sources=(), import_error=None, project=False):
        self.name, self.overload, self.examples = name, overload, examples
        self.sources, self.import_error, self.project = list(sources), import_error, project
        self.schema = None  # opgen's parsed schema
        self.calls: list = []  # kwargs dicts, one per example
        self.dynamic = False  # a data-dependent output size (known from a project's spec only)
        self.eager_notes: dict = {}
        self.field = ""  # a project's op: where opgen.yaml describes it ("ops[0]")
        self.fusion = []  # a project's op with `fusion:`: its forms' Fusion records (<package>/patterns.py)
        self.register = None  # ... and the package's register_fusions
        self.module = ""  # what a process imports to register the op (a project's package, or the target module)
        self.package = ""  # a project's package (its compile_cache keys npugraph_ex's cache)
        self.named = True  # named by its target (module:ns::op, a project), not found by importing a module
        self.no_inputs = ""  # why an op found by importing a module cannot be run (its rungs are skipped)
        self.derived = False  # its calls are an example opgen made up from the schema (no --inputs, no spec)


def _all_op_names() -> set[str]:
    import torch

    return set(torch._C._dispatch_get_all_op_names())


def _overload(name: str):
    import torch

    qualified, _, overload = name.partition(".")
    namespace, _, op_name = qualified.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None


def _import(module_name: str, target: str):
    """(module, None) or (None, exception info) for an exception raised by the module itself."""
    try:
        return importlib.import_module(module_name), None
    except ModuleNotFoundError as error:
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise Usage(f"{target}: cannot import module {module_name!r} ({error})",
                        "run from the directory that holds it, or add that directory to PYTHONPATH") from None
        return None, _error_info(error)
    except Exception as error:  # noqa: BLE001  (the registering module itself fails: that is a diagnosis)
        return None, _error_info(error)


def resolve(targets: list[dict]) -> list[Op]:
    from .ownership import own_ops, recording_definitions

    ops: list[Op] = []
    for target in targets:
        if target["kind"] == "project":
            ops.extend(_resolve_project(target))
            continue
        before = _all_op_names() if not target["op"] else set()
        with recording_definitions() as defined:
            module, error = _import(target["module"], target["text"])
        sources = [getattr(module, "__file__", None)] if module else []
        if error is not None:
            ops.append(Op(target["op"] or target["text"], import_error=error))
            continue
        names, elsewhere = [target["op"]], {}
        if not target["op"]:
            names, elsewhere = own_ops(module, sorted(_all_op_names() - before), defined)
            if elsewhere:
                by_file: dict[str, list[str]] = {}
                for name, where in sorted(elsewhere.items()):
                    by_file.setdefault(where, []).append(name)
                emit(event="note", message=f"{target['text']}: left out {len(elsewhere)} op(s) its imports define: "
                     + "; ".join(f"{', '.join(names)} ({where})" for where, names in by_file.items()))
        if not names:
            raise Usage(f"{target['text']}: importing {target['module']!r} registered no operator of its own"
                        + (f" ({len(elsewhere)} defined by other modules it imports)" if elsewhere else ""),
                        f"name the op: {target['module']}:namespace::op")
        for name in names:
            overload = _overload(name)
            if overload is None:
                raise Usage(f"{target['text']}: no operator {name!r} after importing {target['module']!r}",
                            "check the name (namespace::op or namespace::op.overload)")
            where = defined.get(name)  # the file whose import defined it (a package's submodule)
            ops.append(Op(_full_name(overload), overload, sources=[where] if where else [s for s in sources if s]))
            ops[-1].module, ops[-1].named = target["module"], bool(target["op"])
    return ops


def _resolve_project(target: dict) -> list[Op]:
    from ..spec.load import load_spec

    spec = load_spec(str(Path(target["path"]) / "opgen.yaml"))
    sys.path.insert(0, target["path"])
    _module, error = _import(spec.package, target["text"])
    if error is not None:
        return [Op(f"{spec.namespace}::{op.schema.name}", import_error=error) for op in spec.ops]
    source = str(Path(target["path"]) / spec.package / "ops.py")
    patterns = None
    if any(op_spec.fusion for op_spec in spec.ops):
        patterns, error = _import(f"{spec.package}.patterns", target["text"])
        if error is not None:
            return [Op(f"{spec.namespace}::{op.schema.name}", import_error=error) for op in spec.ops]
    fusions: dict = {}
    for fusion in patterns.FUSIONS if patterns else ():
        fusions.setdefault(fusion.overload, []).append(fusion)  # its forms
    found = []
    for op_spec in spec.ops:
        name = f"{spec.namespace}::{op_spec.schema.name}" + (f".{op_spec.schema.overload}"
                                                               if op_spec.schema.overload else "")
        overload = _overload(name)
        if overload is None and importlib.util.find_spec(f"{spec.package}.ops") is not None:
            # registered lazily (by ops.py, which the package does not import): checked, and a process importing
            # only the package (the compile_cache rung's) finds the op missing
            _import(f"{spec.package}.ops", target["text"])
            overload = _overload(name)
        if overload is None:
            raise Usage(f"{target['text']}: importing {spec.package!r} did not register {name}",
                        "regenerate the project (opgen new) or check its package")
        found.append(Op(name, overload, examples=op_spec.examples, sources=[source], project=True))
        found[-1].dynamic = op_spec.is_dynamic
        found[-1].field = f"ops[{op_spec.index}]"
        found[-1].fusion = fusions.get(overload, [])
        found[-1].register = patterns.register_fusions if patterns else None
        found[-1].module = found[-1].package = spec.package
    return found


def _full_name(overload) -> str:
    schema = overload._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def prepare_inputs(ops: list[Op], inputs_path: str | None) -> None:
    """Parse each op's schema with opgen and pick its examples: --inputs, the spec, or derived."""
    from ..errors import OpgenError
    from ..schema.parser import parse_torch_schema
    from ..spec.load import derive_example, load_inputs_text

    for op in ops:
        if op.overload is not None:
            try:
                op.schema = parse_torch_schema(str(op.overload._schema))
            except OpgenError:
                op.schema = None
    given: dict = {}
    if inputs_path:
        schemas = {op.name: op.schema for op in ops if op.schema is not None}
        try:
            text = Path(inputs_path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise Usage(f"--inputs {inputs_path}: cannot read it ({error})") from None
        ignored: list[str] = []
        try:
            given = load_inputs_text(text, inputs_path, schemas, ignored)
        except OpgenError as error:  # the parent renders it again: without its own "error: "
            raise Usage(error.render().removeprefix("error: "), "") from None
        if ignored:
            emit(event="note", message=f"--inputs {inputs_path}: no checked op named " + ", ".join(ignored)
                 + ": left out")
    for op in ops:
        if op.overload is None:
            continue
        examples = given.get(op.name) or op.examples
        if not examples and op.schema is not None:
            derived = derive_example(op.schema)
            examples = (derived,) if derived is not None else ()
            op.derived = derived is not None
        if not examples:
            kinds = ", ".join(f"{a.name}: {a.type}" for a in op.schema.arguments) if op.schema else str(
                op.overload._schema)
            message = f"no inputs: opgen cannot make up arguments for ({kinds})"
            hint = ("give them with --inputs FILE, a YAML list like `- {x: {shape: [4, 8], dtype: float32}}` "
                    "(the syntax of a spec's examples, docs/spec.md)")
            if op.named:
                raise Usage(f"{op.name}: {message}", hint)
            op.no_inputs = f"{message}: {hint}"  # one op of a module: the others still run
            continue
        op.calls = [_values(example.values) for example in examples]


def _values(values: dict) -> dict:
    return {name: value for name, value in values.items()}


def _make(value, g):
    import torch

    from ..schema.model import EnumWord
    from ..spec.model import TensorValue

    if isinstance(value, TensorValue):
        dtype = getattr(torch, value.dtype)
        if value.values is not None:
            return torch.tensor(_lists(value.values), dtype=dtype)
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(value.shape, generator=g, dtype=torch.float32).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, value.shape, generator=g).bool()
        return torch.randint(0, 8, value.shape, generator=g).to(dtype)
    if isinstance(value, EnumWord):
        return getattr(torch, value.word)
    if isinstance(value, tuple):
        return [_make(item, g) for item in value]
    return value


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, tuple) else value


def calls(op: Op, seed: int = 0) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [{name: _make(value, g) for name, value in call.items()} for call in op.calls]


# --- helpers --------------------------------------------------------------------------------------


def _error_info(error: BaseException) -> dict:
    check = None
    if isinstance(error, AssertionError) and type(error.__cause__).__name__ == "OpCheckError":
        error = error.__cause__  # opgen.testing.opcheck names the files to look at; opcheck's own error is the diagnosis
    if type(error).__name__ == "OpCheckError":
        match = re.search(r"(test_\w+) failed", str(error))
        check = match.group(1) if match else None
        if error.__cause__ is not None:  # the exception the opcheck test saw is the diagnosis
            cause = error.__cause__
            return {"type": _type_name(cause), "message": str(cause), "check": check,
                    "where": _where(cause)}
    return {"type": _type_name(error), "message": str(error), "check": check, "where": _where(error)}


def _type_name(error: BaseException) -> str:
    cls = type(error)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"


def _where(error: BaseException) -> str:
    """The innermost frame outside torch and opgen: usually the user's kernel or fake."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        path = frame.filename
        library = any(f"{os.sep}{name}{os.sep}" in path for name in ("torch", "opgen", "npugraph_ex"))
        if not library and not path.startswith("<"):
            return f"{path}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return ""


def _checks():
    """opgen.testing: the generated tests' checks, run here too (imported on first use: it imports torch)."""
    from .. import testing

    return testing


def _target(op: Op):
    """The op as opgen.testing sees it (outside a generated project: no spec fields, no kernel file). A
    torch.Tag.inplace/out op returns the arguments whose alias sets its returns carry."""
    schema = op.overload._schema
    tags = {t.name for t in op.overload.tags}  # by name: torch.Tag.inplace is new in torch 2.13
    tag = "inplace" if "inplace" in tags else "out" if "out" in tags else ""
    returned = ()
    if tag:
        sets = {frozenset(a.alias_info.before_set): a.name for a in schema.arguments if a.alias_info is not None}
        returned = tuple(sets.get(frozenset(r.alias_info.before_set), "") for r in schema.returns if r.alias_info)
    random = "nondeterministic_seeded" in tags  # its draws are compared seeded
    return _checks().Op(op.overload, returned=returned, tag=tag, dynamic=op.dynamic, random=random)


def _outcome_of_skip(error: BaseException) -> str | None:
    """The reason when `error` is a check's skip (pytest's, or opgen.testing.SkipCheck without pytest)."""
    if type(error).__name__ in ("Skipped", "SkipCheck"):
        return str(getattr(error, "msg", None) or error)
    return None


def _mutated(op: Op) -> list[str]:
    return [a.name for a in op.overload._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


# --- the rungs ------------------------------------------------------------------------------------


def rung_static(op: Op) -> str:
    """opgen's contract rules on the schema, and `opgen lint` on the files that register the op."""
    from ..contract import ERROR, NOT_INFERRABLE, check_schema

    if op.schema is None:
        raise RungSkipped("opgen cannot parse the schema torch reports: " + str(op.overload._schema))
    tags = tuple(str(t).split(".")[-1] for t in op.overload.tags)
    # OPG107 advises how to write a custom_op registration; this op is registered already, whatever its style
    contract = [d for d in check_schema(op.schema, tags=tags, generating=False) if d.code != NOT_INFERRABLE.code]
    found = [d for d in contract if d.severity == ERROR]
    notes = [f"{d.code} {d.message}" for d in contract if d.severity != ERROR]
    lint_paths = [p for p in op.sources if p and p.endswith(".py") and os.path.isfile(p)]
    if lint_paths:
        from ..lint.config import LintConfig
        from ..lint.engine import lint_paths as run_lint

        short = op.name.split("::")[-1].split(".")[0]
        mentions = re.compile(rf"(?<![\w]){re.escape(short)}(?![\w])")
        for diagnostic in run_lint(lint_paths, LintConfig(root=os.path.dirname(lint_paths[0]))).diagnostics:
            if not mentions.search(diagnostic.message):
                continue  # another op of the same file
            if diagnostic.severity == ERROR:
                found.append(diagnostic)
            else:
                notes.append(f"{diagnostic.code} {diagnostic.message}")
    if found:
        first = found[0]
        where = f"{first.path}:{first.line}: " if first.path else ""
        text = "\n".join(f"{d.code} {d.message}" + (f" (hint: {d.hint})" if d.hint else "") for d in found)
        raise RungFailed(f"rule:{first.code}", f"{where}{first.code} {first.message}", text)
    linted = f"lint: {', '.join(lint_paths)}" if lint_paths else "lint: no readable source"
    return "; ".join([f"contract rules pass; {linted}", *notes])


_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "nonzero")


class _HostSyncProbe:
    """Records host syncs (`.item()`, `.cpu()`, ...) and random-number calls made by a kernel's Python code:
    they pass on CPU but fail under graph capture. Patches torch.Tensor and torch for the duration."""

    RANDOM = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli", "multinomial",
              "normal", "randperm")

    def __enter__(self):
        import torch

        self.seen: list[str] = []
        self.saved = []
        for name in _SYNC_METHODS:
            self._wrap(torch.Tensor, name, f"Tensor.{name}()")
        for name in self.RANDOM:
            if hasattr(torch, name):
                self._wrap(torch, name, f"torch.{name}")
        for name in ("uniform_", "normal_", "bernoulli_", "random_", "exponential_"):
            self._wrap(torch.Tensor, name, f"Tensor.{name}()")
        return self

    def _wrap(self, owner, name, label):
        original = owner.__dict__.get(name, getattr(owner, name))
        seen = self.seen

        def probe(*args, **kwargs):
            seen.append(label)
            return original(*args, **kwargs)

        self.saved.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, probe)

    def __exit__(self, *exc) -> None:
        for owner, name, value in reversed(self.saved):
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


_ABSENT = object()


def rung_eager(op: Op) -> str:
    import torch

    keys = _kernel_keys(op)
    cpu_kernel = "CPU" in keys or keys & {"CompositeExplicitAutograd", "CompositeImplicitAutograd"}
    device = "PrivateUse1" if "PrivateUse1" in keys else "CUDA" if "CUDA" in keys else None
    if not cpu_kernel and device is not None and not _device_available(device):
        op.eager_notes["device_only"] = True
        raise RungSkipped(f"the op has a {device} kernel only and this machine has no "
                          f"{'NPU' if device == 'PrivateUse1' else 'CUDA GPU'}")
    from ..testing.values import clone

    with torch.no_grad():
        for call in calls(op):
            first = _refused_inputs(op, call) if op.derived else op.overload(**clone(call))
            with _HostSyncProbe() as probe:
                second = op.overload(**clone(call))
        try:
            torch.testing.assert_close(first, second, equal_nan=True)
        except AssertionError:
            op.eager_notes["nondeterministic"] = True
        sync_labels = {f"Tensor.{name}()" for name in _SYNC_METHODS}  # not "ends with _()": __float__() does
        op.eager_notes["syncs"] = sorted({label for label in probe.seen if label in sync_labels})
        op.eager_notes["random"] = sorted({label for label in probe.seen if label not in op.eager_notes["syncs"]})
    note = f"{len(op.calls)} example(s) ran on CPU"
    if op.eager_notes.get("nondeterministic"):
        note += "; two runs on the same inputs differ"
    return note


def _refused_inputs(op: Op, call: dict):
    """The op's result on an example opgen made up; where the kernel raises what no row of the table knows (its own
    check of a dtype, a size, a value the schema cannot say), the made-up inputs are the suspect, not the op."""
    from ..testing.values import clone
    from .signatures import classify

    try:
        return op.overload(**clone(call))
    except Exception as error:
        info = _error_info(error)
        if classify("eager", info) is not None:
            raise
        made_up = ", ".join(f"{name}: {_describe(value)}" for name, value in call.items())
        raise RungFailed("derived-inputs-refused", f"{info['type']}: {_first_line(info['message'])}",
                         evidence=f"eager: {info['type']}: {_first_line(info['message'])} (on the inputs opgen made "
                                  f"up: {made_up})") from None


def _describe(value) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    return repr(value)


def _kernel_keys(op: Op) -> set[str]:
    import torch

    keys = ("CPU", "CUDA", "PrivateUse1", "Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
    return {k for k in keys if torch._C._dispatch_has_kernel_for_dispatch_key(op.overload._schema.name, k)}


KERNEL_KEYS = ("CPU", "CUDA", "PrivateUse1", "Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
               "Autograd", "AutogradCPU", "AutogradPrivateUse1", "ADInplaceOrView", "Python")


def dispatch_keys(op: Op) -> set[str]:
    """The dispatch keys at which the op (this overload) has a kernel registered: what the explanations may claim."""
    import torch

    return {key for key in KERNEL_KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(op.name, key)}


def _device_available(key: str) -> bool:
    import torch

    if key == "CUDA":
        return torch.cuda.is_available()
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and getattr(npu, "is_available", lambda: False)())


def rung_opcheck(op: Op, train: bool) -> str:
    import torch

    from ..testing.op import OPCHECK_UTILS_DYNAMIC
    from ..testing.schema_check import needs_own_schema_check
    from ..testing.values import tensor_map, tensors

    checks = _checks()
    target = _target(op)
    examples = calls(op)
    for call in examples:
        try:
            checks.opcheck(target, [call], test_utils=None if op.project else OPCHECK_UTILS_DYNAMIC)
        except Exception as error:  # re-raised; an undeclared write is named with its schema line
            _blame_undeclared_write(op, error)
            raise
        if train and tensors(call) and any(t.is_floating_point() for t in tensors(call)):
            checks.opcheck_with_requires_grad(target, [call])
            grad_call = tensor_map(lambda t: t.detach().clone().requires_grad_(t.is_floating_point()), call)
            outputs = [t for t in tensors(op.overload(**grad_call)) if t.requires_grad]
            if outputs:
                torch.autograd.grad(sum(t.float().sum() for t in outputs), [
                    t for t in tensors(grad_call) if t.requires_grad], allow_unused=True)
    schema = ("schema (opgen's: float8 values, bit for bit)" if any(map(needs_own_schema_check, examples))
              else "schema")
    return f"opcheck: {schema}, fake tensors, AOT dispatch" + (" (with requires_grad=True)" if train else "")


_SCHEMA_WRITE = re.compile(r"Argument (\w+) is not defined (?:as mutable but was mutated|to alias output but was "
                           r"aliasing)")


def _blame_undeclared_write(op: Op, error: Exception) -> None:
    """torch's schema check names one argument, and says "aliasing" before "mutated" for an op that writes `x` and
    returns it: the kernel run once on copies tells which arguments it writes and which returns are those arguments,
    so the diagnosis is the undeclared write, with the schema line that declares it."""
    from ..testing.values import clone
    from .declare import declaring_schema, written_and_returned

    message = _error_info(error)["message"]
    if op.schema is None or not _SCHEMA_WRITE.search(message):
        return
    written, returned = written_and_returned(op.overload, calls(op)[0], clone)
    if not written:
        return  # a view or the input itself returned, nothing written: the view-return row
    line, custom = declaring_schema(op.schema, op.overload, written, returned)
    names = ", ".join(map(repr, written))
    action = (f"declare what the kernel writes: mutates_args=[{names}] (the schema becomes `{line}`)" if custom else
              f"declare what the kernel writes: define the op as `{line}`")
    if returned:
        action += "; the kernel returns nothing for a written argument (the caller holds it)"
    raise RungFailed("undeclared-mutation", f"the kernel writes {names}, which the schema does not mark (a!)",
                     f"{_first_line(message)}\nwritten by the kernel: {names}", next_action=action)


def rung_aot_eager(op: Op) -> str:
    checks = _checks()
    for seed in (0, 1):
        try:
            checks.assert_compiled_matches_eager(_target(op), calls(op, seed))
        except AssertionError as error:
            _blame_randomness(op, error)
            raise
    return "fullgraph=True, outputs and mutated inputs equal eager"


def _blame_randomness(op: Op, error: AssertionError) -> None:
    """A compiled result that differs from eager because the kernel is not deterministic is a random-op finding."""
    if op.eager_notes.get("nondeterministic") or op.eager_notes.get("random"):
        random = ", ".join(op.eager_notes.get("random") or []) or "two eager runs differ"
        raise RungFailed("random-op", f"{error}".splitlines()[0], f"the kernel is not deterministic ({random})")


def rung_npugraph_ex(op: Op) -> str:
    from ..npugraph_ex import loader

    reason = loader().unavailable()
    if reason is not None:
        raise RungSkipped(reason)
    checks = _checks()
    graphs = 0
    for index in range(len(op.calls)):
        try:
            checks.assert_npugraph_ex_compiles_on_cpu(_target(op), lambda seed, index=index: calls(op, seed)[index])
        except checks.CheckFailed as failed:
            if failed.kind == "npugraph_ex-op-missing":
                _blame_elimination(op, str(failed))
            _blame_randomness(op, failed)
            raise RungFailed(failed.kind, str(failed).splitlines()[0], str(failed)) from None
        except AssertionError as error:
            _blame_randomness(op, error)
            raise
        except BaseException as error:  # pytest's xfail (a BaseException): a copy npugraph_ex is known to leave
            if type(error).__name__ == "XFailed":
                raise RungFailed("npugraph_ex-leftover-copy", "npugraph_ex left a copy of a mutated buffer, paid at "
                                 "every replay", str(error)) from None
            if isinstance(error, Exception):
                _blame_data_dependence(op, error)
            raise
        graphs += 1
    # host syncs and random numbers in the kernel are the capture rung's findings (captured, with the kernel's line)
    return (f"{graphs} graph(s) through npugraph_ex's passes, three calls each equal to eager, mutated buffers "
            "written in place")


def data_dependent_sizes(op: Op) -> list[str]:
    """The outputs whose size the op's fake leaves to the data (unbacked sizes), on its first example."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

    from ..testing.values import tensor_map, tensors

    try:
        with FakeTensorMode(shape_env=ShapeEnv()) as mode:
            result = op.overload(**tensor_map(mode.from_tensor, calls(op)[0]))
    except Exception:  # noqa: BLE001  (a fake that cannot run is the other rungs' finding)
        return []
    return [f"output {index} {list(t.shape)}" for index, t in enumerate(tensors(result))
            if isinstance(t, torch.Tensor) and free_unbacked_symbols(t)]


def _blame_data_dependence(op: Op, error: Exception) -> None:
    """npugraph_ex's compiler failing on an op whose output size depends on data: said in opgen's words."""
    sizes = data_dependent_sizes(op)
    if not sizes:
        return
    op.dynamic = True
    raise RungFailed("npugraph_ex-dynamic-output", f"{op.name} has a data-dependent output size ({', '.join(sizes)}: "
                     "its fake leaves the size to the input values): npugraph_ex cannot compile it, and a captured "
                     "graph could not return a size known only when the kernel runs",
                     f"npugraph_ex raised: {type(error).__name__}: {_first_line(str(error))}") from None


def _blame_elimination(op: Op, evidence: str) -> None:
    """The op is not in the graph npugraph_ex captures: decomposed before it (a kernel tracing goes through) or
    eliminated."""
    traced = _decomposition(op)
    if traced is None:
        raise RungFailed("npugraph_ex-op-eliminated", f"{op.name} is not in the graph npugraph_ex captures", evidence)
    code, instead = traced
    detail = f"{op.name} traced alone (make_fx):\n{code}\n{evidence}"
    keys = dispatch_keys(op)
    if "CompositeImplicitAutograd" in keys:
        raise RungFailed("npugraph_ex-op-decomposed", f"{op.name} is decomposed into aten ops before "
                         "npugraph_ex sees it (its CompositeImplicitAutograd kernel is inlined)", detail)
    above = [key for key in ("Autograd", "AutogradCPU", "ADInplaceOrView", "Python") if key in keys]
    by = f"its {'/'.join(above)} kernel" if above else "a kernel the dispatcher runs before its own"
    calls_made = ", ".join(instead) or "no op"
    raise RungFailed("npugraph_ex-op-decomposed", f"{op.name} is replaced by {calls_made} before npugraph_ex sees it: "
                     f"it has no CompositeImplicitAutograd kernel; {by} calls {calls_made} in its place", detail,
                     causes=((f"{by} (an autograd formula or a wrapper registered there) calls {calls_made} "
                              "instead of redispatching to the op itself, so tracing records those ops, not the op"),))


def _decomposition(op: Op) -> tuple[str, list[str]] | None:
    """The op traced alone (make_fx, no dead-code elimination) when it is not in that trace: (the code, the ops it
    became). None when the op is traced as itself."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    call = calls(op)[0]
    names = [name for name, value in call.items() if isinstance(value, torch.Tensor)]

    def alone(*tensors):
        return op.overload(**{**call, **dict(zip(names, tensors))})

    with torch.no_grad():
        traced = make_fx(alone)(*[call[name] for name in names])
    targets = [n.target for n in traced.graph.nodes if n.op == "call_function"]
    if op.overload in targets:
        return None
    return traced.code.strip(), sorted({str(target) for target in targets})


def rung_fusion(op: Op) -> str:
    """A generated project's op with `fusion:`, each of its forms: where it applies, the composite computes what the
    op computes and the op keeps the composite's layouts, and a model written with it gets the op under npugraph_ex
    (on CPU, when fetched) and Inductor's pattern pass."""
    from dataclasses import replace

    from ..npugraph_ex import loader

    if not op.project:
        raise RungSkipped("fusion patterns come from `fusion:` in a generated project's opgen.yaml: give the project "
                          "directory")
    if not op.fusion:
        raise RungSkipped(f"no `fusion:` for {op.name} in opgen.yaml")
    checks = _checks()
    target = replace(_target(op), field=op.field)
    fired, skipped = [], []
    routes = [route for route in ("npugraph_ex", "inductor") if any(route in form.targets for form in op.fusion)]
    try:
        for form in op.fusion:
            checks.assert_fusion_matches_the_op(target, form, lambda seed: calls(op, seed))
            checks.assert_fusion_keeps_layouts(target, form, lambda seed: calls(op, seed))
        for route in routes:
            reason = loader().unavailable() if route == "npugraph_ex" else None
            if reason is not None:
                skipped.append(f"{route} ({reason})")
                continue
            for form in op.fusion:
                first = checks.first_fusion_call(form, lambda seed: calls(op, seed))
                checks.assert_fusion_fires(target, form, op.register, first, route)
            fired.append(route)
    except checks.CheckFailed as failed:
        raise RungFailed(failed.kind, str(failed).splitlines()[0], str(failed)) from None
    field = op.fusion[0].field.split(".forms")[0]
    if not fired:
        raise RungSkipped(f"{field} could fire under none of its targets here: " + ", ".join(skipped))
    note = f"; not run under {', '.join(skipped)}" if skipped else ""
    forms = f" ({len(op.fusion)} forms)" if len(op.fusion) > 1 else ""
    return (f"{field}{forms} fires on its composite under {' and '.join(fired)}, no node of it left; the composite "
            f"computes what the op computes where the fusion applies, and the op keeps its layouts{note}")


def rung_capture(op: Op) -> str:
    """npugraph_ex capture/replay with a real NPU; CUDA graphs with a CUDA GPU; else npugraph_ex's own AclGraph
    over the NPU graph emulation on CPU (after `opgen npugraph-ex fetch`)."""
    import torch

    if _device_available("PrivateUse1"):
        device, key, options = "npu", "PrivateUse1", {"backend": "npugraph_ex"}
    elif torch.cuda.is_available():
        device, key, options = "cuda", "CUDA", {"mode": "reduce-overhead"}
    else:
        return _capture_on_cpu(op)
    if not _kernel_keys(op) & {key, "CompositeExplicitAutograd", "CompositeImplicitAutograd"}:
        raise RungSkipped(f"the op has no {key} kernel to capture on this machine's {device}")
    checks = _checks()
    for index in range(len(op.calls)):
        checks.assert_capture_replay(_target(op), lambda seed, index=index: calls(op, seed)[index], device, **options)
    return f"captured and replayed on {device}, equal to the CPU kernel"


def _capture_on_cpu(op: Op) -> str:
    """npugraph_ex's AclGraph captures and replays the op on the emulated NPU graph (tests/npu_graph_cpu.py)."""
    _capture_unavailable(op, "no NPU and no CUDA GPU, and capture on CPU needs npugraph_ex")
    checks = _checks()
    reports = []
    for index in range(len(op.calls)):
        try:
            reports.append(checks.assert_npugraph_ex_capture_replay_on_cpu(
                _target(op), lambda seed, index=index: calls(op, seed)[index], allow_random=False))
        except checks.CheckFailed as failed:
            raise _failed(failed) from None
    head = reports[0].splitlines()[0].split(": ", 1)[-1]
    return f"{len(reports)} example(s): {head}"


# --- npugraph_ex's production features ------------------------------------------------------------------


def _features():
    """opgen.testing.npugraph_ex_features (npugraph_ex's compile cache, capture limit, streams)."""
    from ..testing import npugraph_ex_features

    return npugraph_ex_features


class _FreshProcess:
    """One process loading compile caches for every op of the run (torch and npugraph_ex imported once there)."""

    process = None

    @classmethod
    def start(cls) -> None:
        from ..npugraph_ex import loader

        if cls.process is None and loader().unavailable(capture=True) is None:
            cls.process = _features().FreshProcess([os.getcwd(), *sys.path])

    @classmethod
    def get(cls):
        if cls.process is None:
            cls.process = _features().FreshProcess([os.getcwd(), *sys.path])
        return cls.process

    @classmethod
    def close(cls) -> None:
        if cls.process is not None:
            cls.process.close()
            cls.process = None


def _capture_unavailable(op: Op, needs: str = "npugraph_ex on CPU") -> None:
    """Skip a rung capturing on CPU where npugraph_ex cannot (`needs` says what the rung needs), or for an op a
    capture does not take."""
    from ..npugraph_ex import loader

    reason = loader().unavailable(capture=True)
    if reason is not None:
        raise RungSkipped(f"{needs}: {reason}")
    if op.eager_notes.get("device_only"):
        raise RungSkipped("the op has no CPU kernel to compare a capture on CPU with (see the eager rung)")
    sizes = [] if op.dynamic else data_dependent_sizes(op)
    if op.dynamic or sizes:
        raise RungSkipped(f"{op.name} has a data-dependent output size{' (' + ', '.join(sizes) + ')' if sizes else ''}: "
                          "a captured graph cannot return a size known only when the kernel runs")


def _failed(failed) -> RungFailed:
    """A check's failure as the rung's: its first line the reason, the kernel line it names first in the evidence."""
    lines = [line.strip() for line in str(failed).splitlines() if line.strip()]
    kernel_line = next((line for line in lines[1:] if re.match(r"\S+:\d+: ", line)), "")
    evidence = ([f"at {kernel_line}"] if kernel_line else []) + [line for line in lines[1:] if line != kernel_line]
    return RungFailed(failed.kind, lines[0], "\n".join(evidence))


def rung_compile_cache(op: Op) -> str:
    """npugraph_ex's cache_compile: a module calling the op saved here, loaded by a fresh process importing only the
    op's module (a project's package, keyed by its compile_cache), the same values, nothing compiled again."""
    _capture_unavailable(op)
    from ..testing.capture import npugraph_ex_cpu

    features, checks = _features(), _checks()
    cache_module = None
    if op.package:
        cache_module = f"{op.package}.compile_cache"
        if importlib.util.find_spec(cache_module) is None:
            cache_module = None  # a project generated before opgen wrote compile_cache.py
    cache = features.CompileCache(op.module, cache_module=cache_module, batch=False)
    target = _target(op)
    cache.add(target, lambda seed: calls(op, seed)[0])
    cache.run(npugraph_ex_cpu(capture=True), _FreshProcess.get())
    result = cache.results[target.qualname]
    if isinstance(result, checks.CheckFailed):
        raise _failed(result)
    if isinstance(result, BaseException):
        raise result
    return result.split(": ", 1)[-1]


def _two_sizes(op: Op) -> tuple[list[dict], bool] | None:
    """Two calls that differ only in tensor sizes, and whether opgen made the second (opgen.spec.two_sizes: the
    generated tests choose theirs by the same rule)."""
    from ..spec.two_sizes import choose_two_sizes

    found = choose_two_sizes(op.calls)
    if found is None:
        return None
    if found.pair is not None:
        return [op.calls[found.pair[0]], op.calls[found.pair[1]]], False
    return [op.calls[0], found.doubled], True


def rung_capture_limit(op: Op) -> str:
    """One npugraph_ex graph for two sizes (dynamic=True): each captured and replayed; capture_limit=1 runs eagerly."""
    _capture_unavailable(op)
    found = _two_sizes(op)
    if found is None:
        raise RungSkipped(f"no two calls of {op.name} that differ only in sizes: give two with --inputs")
    pair, derived = found
    checks = _checks()
    import torch

    g = torch.Generator().manual_seed(0)
    sized = [{name: _make(value, g) for name, value in call.items()} for call in pair]
    try:
        report = _features().assert_capture_limit(_target(op), sized, derived=derived)
    except checks.CheckFailed as failed:
        raise _failed(failed) from None
    return report.split(": ", 1)[-1]


def rung_streams(op: Op) -> str:
    """The op on a second stream inside npugraph_ex's graph: on an NPU (elsewhere a skip saying why)."""
    checks = _checks()
    try:
        return _features().assert_on_a_second_stream(_target(op), lambda seed: calls(op, seed)[0])
    except checks.CheckFailed as failed:
        raise _failed(failed) from None


# --- driver ---------------------------------------------------------------------------------------


RUNG_FUNCTIONS = {"static": rung_static, "eager": rung_eager, "aot_eager": rung_aot_eager,
                  "npugraph_ex": rung_npugraph_ex, "fusion": rung_fusion, "capture": rung_capture,
                  "compile_cache": rung_compile_cache, "capture_limit": rung_capture_limit, "streams": rung_streams}


def run_rung(op: Op, rung: str, job: dict) -> dict:
    started = time.perf_counter()
    result = {"status": "pass", "reason": ""}
    try:
        if rung in ("opcheck", "aot_eager", "npugraph_ex", "fusion") and op.eager_notes.get("device_only"):
            raise RungSkipped("no kernel for CPU and no device for the kernel the op has (see the eager rung)")
        result["reason"] = (rung_opcheck(op, job.get("train", False)) if rung == "opcheck" else
                            RUNG_FUNCTIONS[rung](op))
    except RungSkipped as skip:
        result = {"status": "skip", "reason": str(skip)}
    except RungFailed as failed:
        result = {"status": "fail", "reason": str(failed), "signature": failed.signature, "evidence": failed.evidence,
                  "causes": list(failed.causes), "next_action": failed.next_action}
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001  (a check's skip; else any exception of the op is the evidence)
        reason = _outcome_of_skip(error)
        if reason is None:
            info = _error_info(error)
            result = {"status": "fail", "reason": f"{info['type']}: {_first_line(info['message'])}", "error": info}
        else:
            result = {"status": "skip", "reason": reason}
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def _first_line(text: str) -> str:
    """The message's key line: the first, or for a backend failure the error after "raised:"."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("backend=") and "raised:" in lines[0] and len(lines) > 1:
        return lines[1]
    return lines[0] if lines else ""


def main(argv: list[str]) -> int:
    global PROTOCOL
    PROTOCOL = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the op's prints must not corrupt the protocol
    sys.stdout = sys.stderr
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    started = time.perf_counter()
    try:
        import torch  # noqa: F401
    except ImportError as error:
        emit(event="usage", message=f"opgen check needs torch, which cannot be imported ({error})",
             hint="pip install torch")
        return 0
    emit(event="started")  # the parent's --timeout clock starts here: the target's import is the first step it times
    try:
        ops = resolve(job["targets"])
        prepare_inputs(ops, job.get("inputs"))
    except Usage as usage:
        emit(event="usage", message=usage.message, hint=usage.hint)
        return 0
    import_seconds = round(time.perf_counter() - started, 3)
    if "compile_cache" not in job.get("skip", ()) and any(op.overload is not None for op in ops):
        _FreshProcess.start()  # its imports (torch, npugraph_ex) overlap the rungs before compile_cache
    resume = job.get("resume") or {}
    first_op, after = resume.get("op", 0), resume.get("after")
    for index, op in enumerate(ops):
        emit(event="op", index=index, op=op.name, keys=sorted(dispatch_keys(op)) if op.overload is not None else None)
    for index, op in enumerate(ops):
        if index < first_op:
            continue
        start_after = after if index == first_op else None
        if start_after is None:
            if op.import_error is not None:
                emit(event="rung", index=index, rung="import", status="fail", seconds=import_seconds,
                     reason=f"{op.import_error['type']}: {_first_line(op.import_error['message'])}",
                     error=op.import_error)
                continue
            emit(event="rung", index=index, rung="import", status="pass", seconds=import_seconds,
                 reason="registered by " + (", ".join(op.sources) or "its module"))
        rungs = list(RUNGS[1:])
        if start_after in rungs:
            rungs = rungs[rungs.index(start_after) + 1:]
        failed = start_after is not None
        for rung in rungs:
            if rung in job.get("skip", ()):
                emit(event="rung", index=index, rung=rung, status="skip", seconds=0.0, reason="skipped with --skip")
                continue
            if failed and not job.get("keep_going"):
                emit(event="rung", index=index, rung=rung, status="skip", seconds=0.0,
                     reason="not run: an earlier rung failed (--keep-going runs it)")
                continue
            if op.no_inputs and rung != "static":
                emit(event="rung", index=index, rung=rung, status="skip", seconds=0.0, reason=op.no_inputs)
                continue
            emit(event="start", index=index, rung=rung)
            result = run_rung(op, rung, job)
            emit(event="rung", index=index, rung=rung, **result)
            failed = failed or result["status"] == "fail"
    _FreshProcess.close()
    emit(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
