"""Checks over the records of every linted file (ops are matched across files).

Schema-level problems go through the parser and `opgen.contract` (one rule set); this module only
adds what needs the registration code: which kernels, fakes and libraries exist, and what they do.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import defaultdict

from ..contract import AUTOGRAD_HINT, AUTOGRAD_NOT_FUNCTIONAL, Diagnostic, Rule, check_ops, check_schema
from ..schema import SchemaError, parse_schema
from ..schema.model import Schema, is_tensor_like
from ..schema.parser import span_column
from . import rules as R
from .records import UNKNOWN, Definition, FileRecord, Function, Registration, Where

# Dispatch keys a Python registration may name, and the misspellings that are certainly meant as one.
DISPATCH_KEYS = (
    "CPU", "CUDA", "HIP", "XLA", "MPS", "IPU", "XPU", "HPU", "VE", "Lazy", "MTIA", "PrivateUse1", "PrivateUse2",
    "PrivateUse3", "Meta", "BackendSelect", "Python", "Functionalize", "ADInplaceOrView", "Autograd",
    "AutogradCPU", "AutogradCUDA", "AutogradXLA", "AutogradMPS", "AutogradXPU", "AutogradPrivateUse1",
    "AutogradNestedTensor", "AutogradOther", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutogradNestedTensor", "FuncTorchBatched",
    "Batched", "SparseCPU", "SparseCUDA", "NestedTensorCPU", "NestedTensorCUDA", "QuantizedCPU", "QuantizedCUDA",
    "AutocastCPU", "AutocastCUDA", "AutocastXPU", "AutocastPrivateUse1", "Conjugate", "Negative", "ZeroTensor",
    "SparseCsrCPU", "SparseCsrCUDA", "NestedTensor", "Dense", "Sparse", "Tracer", "FuncTorchDynamicLayerBackMode",
    "FuncTorchDynamicLayerFrontMode", "PythonTLSSnapshot", "PythonDispatcher", "PreDispatch", "AutocastMPS",
    "Undefined", "CatchAll", "Default",
)
_KEYS_BY_FOLD = {key.lower(): key for key in DISPATCH_KEYS}
KEY_FIXES = {"npu": "PrivateUse1", "privateuseone": "PrivateUse1", "autogradnpu": "AutogradPrivateUse1"}
# Kernels that also run on fake tensors, so the op needs no separate fake.
FAKE_CAPABLE_KEYS = frozenset({"CompositeExplicitAutograd", "CompositeImplicitAutograd", "Meta", "fake"})
CAPTURE_KEYS = frozenset({"PrivateUse1", "CUDA"})
# Keys of real device kernels; an op implemented only at other keys (BackendSelect, Python, Autograd)
# handles fake tensors by other means, so the no-fake rule stays quiet for it.
BACKEND_KEYS = frozenset({"CPU", "CUDA", "HIP", "XLA", "MPS", "IPU", "XPU", "HPU", "MTIA", "PrivateUse1", "VE",
                          "Lazy", "MAIA"})
CLASS_TYPE = re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\.[A-Za-z_][\w.]*")


def suggest_key(value: str) -> str | None:
    """The key a misspelled one means, or None when `value` is fine or not certainly a typo."""
    if value in _KEYS_BY_FOLD.values():
        return None
    folded = value.lower()
    return KEY_FIXES.get(folded) or _KEYS_BY_FOLD.get(folded)


def _diag(rule: Rule, message: str, where: Where, *, fix=None, severity: str | None = None) -> Diagnostic:
    return Diagnostic(rule.code, severity or rule.severity, message, path=where.path, line=where.line,
                      column=where.column, fix=fix)


class _Op:
    """What is known about one op across files."""

    __slots__ = ("definition", "fakes", "kernels", "schema")

    def __init__(self, definition: Definition, schema: Schema | None) -> None:
        self.definition = definition
        self.schema = schema
        self.kernels: list[Registration] = []
        self.fakes: list[Registration] = []


def check_records(records: list[FileRecord]) -> list[Diagnostic]:
    from .fix import add_mutation_annotation, remove_namespace, replace_literal

    found: list[Diagnostic] = []
    ops: dict[tuple, _Op] = {}
    by_name: dict[tuple, list[_Op]] = defaultdict(list)
    schemas: list[Schema] = []
    side_effect = set()
    unresolved_side_effect = False
    autograd: set = set()
    unresolved_fakes: set = set()
    opaque: set = set()
    for record in records:
        opaque |= record.opaque_namespaces
        found.extend(record.diagnostics)
        side_effect |= record.side_effect_ops
        autograd |= record.autograd_ops
        unresolved_side_effect |= record.unresolved_side_effect
        unresolved_fakes |= record.unresolved_fake_namespaces

    # Definitions: parse every schema once; schema-level rules come from the contract.
    imported: dict[tuple[str, str], Function | None] = {}
    for record in records:
        for definition in record.definitions:
            schema, problems = _schema_of(definition, replace_literal, remove_namespace)
            found.extend(problems)
            if schema is None and definition.schema_text is not None:
                opaque.add(definition.namespace)  # defined, but unreadable: say nothing about its kernels
                continue
            if definition.kernel is not None and definition.kernel.imported_from is not None:
                definition.kernel = _resolve_import(definition.kernel, imported)
            op = _Op(definition, schema)
            key = _op_key(definition)
            first = ops.get(key)
            if first is not None and first.definition.style == definition.style == "library" \
                    and first.definition.unconditional and definition.unconditional:  # not `if not hasattr(...)`
                found.append(_diag(R.DUPLICATE_OP, f"{_op_name(definition)} is defined again (first at "
                                   f"{_loc(first.definition.where)}); torch refuses the second definition at import: "
                                   "delete one, or name another overload", definition.where))
            ops.setdefault(key, op)
            by_name[key[:2]].append(op)
            if schema is not None and definition.style == "library" and not schema.overload:
                schemas.append(schema)  # check_ops compares the default overloads of `foo` and `foo_`
    # Registrations: attach to ops (a kernel or fake imported from another file is read from there).
    dangling: list[Registration] = []
    for record in records:
        for registration in record.registrations:
            function = registration.function
            if function is not None and function.imported_from is not None:
                registration.function = _resolve_import(function, imported)
            op = _find(ops, by_name, registration)
            if op is None:
                dangling.append(registration)
            elif registration.role == "fake":
                op.fakes.append(registration)
            else:
                op.kernels.append(registration)

    for op in ops.values():
        found.extend(_check_op(op, side_effect, unresolved_side_effect, unresolved_fakes, add_mutation_annotation,
                               autograd))
    found.extend(_check_dangling(records, [r for r in dangling if r.namespace not in opaque], ops, by_name))
    found.extend(_check_dispatch_keys(records, replace_literal))
    found.extend(_check_libraries(records))
    defined_at: dict[str, Where] = {}
    for op in ops.values():
        if op.schema is not None:
            defined_at.setdefault(op.schema.qualified_name, op.definition.where)
    for diagnostic in check_ops(schemas):
        where = defined_at.get(diagnostic.op)
        if where is not None:
            found.append(Diagnostic(diagnostic.code, diagnostic.severity, diagnostic.text(), path=where.path,
                                    line=where.line, column=where.column))
    return found


def _resolve_import(placeholder: Function, cache: dict) -> Function | None:
    from .collect import function_in_file

    seen = set()
    function = placeholder
    while function is not None and function.imported_from is not None:  # re-exports: follow a few hops
        key = (function.imported_from, function.name)
        if key in seen or len(seen) > 4:
            return None
        seen.add(key)
        if key not in cache:
            cache[key] = function_in_file(*key)
        function = cache[key]
    return function


def _schema_of(definition: Definition, replace_literal, remove_namespace) -> tuple[Schema | None, list[Diagnostic]]:
    where = definition.where
    if definition.schema_text is None:
        return None, []
    problems: list[Diagnostic] = []
    try:
        schema = parse_schema(definition.schema_text)
    except SchemaError as error:
        if error.message.startswith("unknown type") and CLASS_TYPE.search(definition.schema_text):
            return None, []  # a custom class / opaque type (`__torch__.torch.classes.x.Y`): torch resolves it
        column = where.column
        if definition.schema_column is not None and error.column is not None:
            column = max(definition.schema_column + error.column - 1, 1)
        hint = f" ({error.hint})" if error.hint else ""
        problems.append(Diagnostic(R.SCHEMA_INVALID.code, R.SCHEMA_INVALID.severity,
                                   f"invalid schema: {error.message}{hint}", path=where.path, line=where.line,
                                   column=column))
        return None, problems
    if definition.library_namespace is not None and definition.style == "library":
        fix = None
        if definition.library_namespace == schema.namespace and definition.schema_literal is not None:
            fix = remove_namespace(where.path, definition.schema_literal, schema.namespace)
        problems.append(_diag(R.NAMESPACE_IN_DEFINE,
                              f"define() schema starts with '{schema.namespace}::' inside Library "
                              f"'{definition.library_namespace}'; write \"{schema.signature(with_namespace=False)}\"",
                              where, fix=fix))
    return schema, problems


def _schema_where(op: _Op, key) -> Where:
    """Where a schema part (a `span_column` key, None: the op name) is in the code."""
    where = op.definition.where
    if op.definition.schema_column is None or op.schema is None:
        return where
    column = span_column(op.schema, key or "name")
    if column is None or column <= op.definition.name_offset:  # that part is not inside the literal
        return where
    literal = op.definition.schema_literal
    return Where(where.path, literal.line if literal else where.line, op.definition.schema_column + column - 1)


_PACKAGES: dict[str, str] = {}


def _package_of(path: str) -> str:
    """The top package directory of a file (ops whose namespace the code does not show belong to it)."""
    directory = os.path.dirname(os.path.abspath(path))
    package = _PACKAGES.get(directory)
    if package is None:
        from .records import package_root

        package = _PACKAGES[directory] = package_root(path)
    return package


def _op_key(definition: Definition) -> tuple:
    """(namespace, name, overload); an op with no readable namespace is keyed by its package instead,
    so two packages linted together that both define `f` keep both."""
    namespace = definition.namespace
    if namespace is None:
        namespace = ("package", _package_of(definition.where.path))
    return (namespace, definition.name, definition.overload)


def _op_name(definition: Definition) -> str:
    name = f"{definition.namespace}::{definition.name}" if definition.namespace else definition.name
    return name + ("." + definition.overload if definition.overload else "")


def _find(ops, by_name, registration: Registration) -> _Op | None:
    if registration.namespace is None:
        candidates = [op for (ns, name), group in by_name.items() if name == registration.name for op in group]
        if registration.overload is not None:
            candidates = [op for op in candidates if op.definition.overload == registration.overload]
        if len(candidates) > 1:  # the same bare name in several packages: the registration's own package
            package = _package_of(registration.where.path)
            candidates = [op for op in candidates if _package_of(op.definition.where.path) == package]
        return candidates[0] if len(candidates) == 1 else None
    if registration.overload is None:
        op = ops.get((registration.namespace, registration.name, ""))
        if op is None:
            # A CustomOpDef method or a namespace-less vLLM op may match by name only.
            group = by_name.get((registration.namespace, registration.name), [])
            return group[0] if registration.custom_op_target and len(group) == 1 else None
        return op
    op = ops.get((registration.namespace, registration.name, registration.overload))
    if op is None:
        group = by_name.get((("package", _package_of(registration.where.path)), registration.name), [])
        return group[0] if len(group) == 1 else None
    return op


def _tags_for_contract(definition: Definition) -> tuple[str, ...] | None:
    return definition.tags  # None: tags we could not read, assumed neither present nor absent


def _check_op(op: _Op, side_effect, unresolved_side_effect, unresolved_fakes, add_mutation_annotation,
              autograd=frozenset()):
    found: list[Diagnostic] = []
    definition = op.definition
    schema = op.schema
    name = f"{definition.namespace}::{definition.name}" if definition.namespace else definition.name
    if definition.overload:
        name += "." + definition.overload
    has_formula = (definition.namespace, definition.name, definition.overload or "") in autograd
    marked = unresolved_side_effect or (definition.namespace, definition.name) in side_effect
    if schema is not None:
        for diagnostic in check_schema(schema, tags=_tags_for_contract(definition), side_effect_marked=marked,
                                       style=definition.style if definition.style == "library" else None,
                                       generating=False,
                                       autograd=has_formula):
            if definition.style == "custom_op" and diagnostic.code == R.NOT_INFERRABLE.code:
                continue  # an explicit schema= is exactly what that rule asks for
            where = _schema_where(op, diagnostic.part)
            found.append(Diagnostic(diagnostic.code, diagnostic.severity, diagnostic.text(),
                                    path=where.path, line=where.line, column=where.column))
    elif definition.style == "custom_op" and definition.kernel is not None:
        found.extend(_check_inferred(definition, name, marked, has_formula))

    if definition.style == "custom_op":
        found.extend(_check_mutates_args(definition, name))

    found.extend(_check_fake_coverage(op, name, unresolved_fakes))
    for registration in op.kernels:
        function = registration.function
        if function is None:
            continue
        found.extend(_check_kernel_mutation(op, registration, function, name, add_mutation_annotation))
        if registration.key in CAPTURE_KEYS:
            for finding in _unique(function.capture_unsafe):
                found.append(_diag(R.CAPTURE_UNSAFE, f"{registration.key} kernel of {name} uses {finding.what}, "
                                   "which fails under graph capture; keep random state and scalars on the device",
                                   Where(function.where.path, finding.line, finding.column)))
    for registration in op.fakes:
        if registration.function is not None:
            found.extend(_check_fake(op, registration, registration.function, name))
    if definition.style == "custom_op" and definition.kernel is not None and not definition.fake_from_kernel \
            and definition.api != "direct_register_custom_op":  # that helper skips custom_op's aliasing check
        for finding in _unique(definition.kernel.returned_params):
            found.append(_diag(R.KERNEL_RETURNS_INPUT, f"the kernel {definition.kernel.name}() of custom_op {name} "
                               f"returns its input {finding.param!r}; torch raises when the op is called (outputs "
                               "must not alias inputs): return nothing from an in-place op, or a new tensor",
                               Where(definition.kernel.where.path, finding.line, finding.column)))
    if any(d.code == R.UNDECLARED_MUTATION.code for d in found):  # it writes: "mutates nothing" is wrong
        found = [d for d in found if d.code != R.SIDE_EFFECT_ONLY.code]
    return found


def _unique(findings):
    seen = set()
    for finding in findings:
        if (finding.line, finding.what) not in seen:
            seen.add((finding.line, finding.what))
            yield finding


def _check_inferred(definition: Definition, name: str, marked: bool, has_formula: bool = False) -> list[Diagnostic]:
    """custom_op without schema=: the side-effect rule from the annotations (None return, nothing mutated),
    and no autograd formula for an op that mutates (OPG113)."""
    function = definition.kernel
    returns_nothing = function.returns_annotation in ("None",)
    mutates = definition.mutates_args
    if has_formula and isinstance(mutates, (tuple, list)) and mutates:
        return [_diag(AUTOGRAD_NOT_FUNCTIONAL, f"{name}: a mutable op cannot have an autograd formula: it writes "
                      f"{', '.join(map(repr, mutates))}; {AUTOGRAD_HINT}", definition.where)]
    if returns_nothing and (mutates == () or mutates == []) and not marked:
        rule = R.SIDE_EFFECT_ONLY
        return [_diag(rule, f"{name}: returns nothing and mutates nothing, so compiled graphs drop it; mark it with "
                      "torch.fx.node.has_side_effect(op), or list the tensors it writes in mutates_args",
                      definition.where)]
    return []


def _check_mutates_args(definition: Definition, name: str) -> list[Diagnostic]:
    mutates = definition.mutates_args
    where = definition.mutates_where or definition.where
    if mutates == "unknown":
        return [_diag(R.MUTATES_ARGS_UNKNOWN, f"{name}: mutates_args=\"unknown\" marks every tensor as written, so "
                      "functionalization copies each one back after every call; list the parameters the kernel "
                      "writes, e.g. mutates_args=() or (\"x\",)", where)]
    if isinstance(mutates, str):
        return [_diag(R.MUTATES_ARGS_UNKNOWN_PARAM, f"{name}: mutates_args={mutates!r} is a string, not a list of "
                      f"names; write mutates_args=({mutates!r},)", where)]
    if not isinstance(mutates, tuple) or definition.kernel is None:
        return []
    params = {p.name for p in definition.kernel.params if p.kind in ("positional", "kwonly")}
    if any(p.kind in ("varargs", "varkw") for p in definition.kernel.params):
        return []
    found = []
    for item in mutates:
        if isinstance(item, str) and item not in params:
            close = difflib.get_close_matches(item, sorted(params), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"parameters are {', '.join(sorted(params)) or 'none'}"
            found.append(_diag(R.MUTATES_ARGS_UNKNOWN_PARAM, f"{name}: mutates_args names {item!r}, which is not a "
                               f"parameter of {definition.kernel.name}(); {hint}", where))
    return found


def _check_fake_coverage(op: _Op, name: str, unresolved_fakes) -> list[Diagnostic]:
    definition = op.definition
    schema = op.schema
    found = []
    real_fakes = [r for r in op.fakes if r.key == "fake"]
    metas = [r for r in op.fakes if r.key == "Meta"]
    if real_fakes and metas:
        later = max(real_fakes + metas, key=lambda r: (r.where.path, r.where.line))
        other = metas[0] if later.key == "fake" else real_fakes[0]
        found.append(_diag(R.META_AND_FAKE, f"{name} has both a Meta kernel ({_loc(metas[0].where)}) and "
                           f"register_fake ({_loc(real_fakes[0].where)}); delete the Meta kernel",
                           later.where if later is not other else real_fakes[0].where))
    if definition.namespace in unresolved_fakes or None in unresolved_fakes:
        return found
    if definition.tags is None or set(definition.tags or ()) & {"inplace", "out"} or definition.fake_from_kernel:
        return found
    if schema is not None and schema.is_mutable and not schema.returns and not schema.varret:
        return found  # torch generates a trivial fake for mutating ops that return nothing
    if schema is None and definition.kernel is not None and definition.kernel.returns_annotation == "None" \
            and definition.mutates_args not in ((), []):
        return found
    if definition.style == "custom_op" and definition.namespace is not None:
        if real_fakes:
            return found
        if metas:
            found.append(_diag(R.NO_FAKE, f"{name} is a custom_op with only a Meta kernel, which FakeTensorMode "
                               "ignores; register it with @<op>.register_fake instead", definition.where))
            return found
        if any(k.key == "CompositeImplicitAutograd" for k in op.kernels):
            return found
    elif op.fakes or any(k.key in FAKE_CAPABLE_KEYS or k.key is UNKNOWN for k in op.kernels):
        return found
    elif not op.kernels or any(k.key not in BACKEND_KEYS for k in op.kernels):
        return found  # kernels only in C++ / at BackendSelect, Python, Autograd keys: we cannot tell
    if definition.namespace is None and not op.kernels:
        return found
    found.append(_diag(R.NO_FAKE, f"{name} has no fake or Meta kernel in the linted files, so it cannot enter a "
                       f"compiled graph; add @torch.library.register_fake(\"{name}\")", definition.where))
    return found


def _loc(where: Where) -> str:
    return f"{where.path}:{where.line}"


def _argument_for(schema: Schema, function: Function, param_name: str):
    """The schema argument a kernel parameter binds to (by position, keyword-only by name)."""
    positional = [p for p in function.params if p.kind == "positional"]
    names = [p.name for p in positional]
    if param_name in names:
        index = names.index(param_name)
        if index < len(schema.positional):
            return schema.positional[index]
        return None
    return schema.argument(param_name)


def _check_kernel_mutation(op, registration, function, name, add_mutation_annotation) -> list[Diagnostic]:
    if registration.key in ("Meta", "fake") or not function.mutations:
        return []
    definition = op.definition
    found = []
    reported = set()
    for finding in function.mutations:
        if finding.param in reported:
            continue
        where = Where(function.where.path, finding.line, finding.column)
        if op.schema is not None:
            argument = _argument_for(op.schema, function, finding.param)
            if argument is None or not is_tensor_like(argument.type) or argument.is_write:
                continue
            if argument.alias is not None:
                continue
            fix = None
            if definition.schema_literal is not None:
                fix = add_mutation_annotation(definition.where.path, definition, op.schema, argument)
            found.append(_diag(R.UNDECLARED_MUTATION, f"kernel {function.name}() {finding.what} {finding.param!r}, but "
                               f"the schema of {name} does not mark it written; declare 'Tensor(a!) "
                               f"{argument.name}'", where, fix=fix))
        elif isinstance(definition.mutates_args, tuple):
            param = function.param(finding.param)
            if param is None or finding.param in definition.mutates_args:
                continue
            if param.annotation and "Tensor" not in param.annotation:
                continue
            found.append(_diag(R.UNDECLARED_MUTATION, f"kernel {function.name}() {finding.what} {finding.param!r}, "
                               f"but mutates_args of {name} does not list it; add {finding.param!r} to mutates_args",
                               where))
        else:
            continue
        reported.add(finding.param)
    return found


def _check_fake(op: _Op, registration: Registration, function: Function, name: str) -> list[Diagnostic]:
    found = []
    path = function.where.path
    kind = "Meta kernel" if registration.key == "Meta" else "fake"
    if function.todo is not None:
        todo = function.todo
        found.append(_diag(R.TODO_FAKE, f"the {kind} {function.name}() of {name} is a TODO skeleton "
                           f"({todo.what}); write its shape/dtype rule", Where(path, todo.line, todo.column)))
        return found
    reads = [f for f in function.data_reads if not (function.uses_get_ctx and f.what.strip(".()") in
                                                      ("nonzero", "torch.nonzero"))]
    for finding in _unique(reads):
        found.append(_diag(R.FAKE_READS_DATA, f"the {kind} of {name} reads tensor data with {finding.what}; compute "
                           "sizes from .shape, or use torch.library.get_ctx().new_dynamic_size()",
                           Where(path, finding.line, finding.column)))
    aliased = op.schema is not None and any(r.alias for r in op.schema.returns)
    tagged = op.definition.tags is None or bool(set(op.definition.tags) & {"inplace", "out"})
    kernels = _kernel_functions(op)
    if not aliased and not tagged:
        kernel_too = any(k.returned_params for k in kernels)
        for finding in _unique(function.returned_params):
            if kernel_too:  # the op's contract is broken, not only the fake
                message = (f"the {kind} of {name} returns its input {finding.param!r}, and so does its kernel, but "
                           "the schema declares no alias: compiled graphs and opcheck assume a new tensor; return a "
                           "new tensor from both, or declare the alias in the schema (`Tensor(a) x -> Tensor(a)`)")
            else:
                message = (f"the {kind} of {name} returns its input {finding.param!r} while the kernel returns a new "
                           f"tensor; return a new tensor such as torch.empty_like({finding.param})")
            found.append(_diag(R.FAKE_RETURNS_INPUT, message, Where(path, finding.line, finding.column)))
    if function not in kernels and not any(k.device_less_allocs for k in kernels):
        # a kernel that allocates on the default device itself makes an op whose outputs live there
        for finding in _unique(function.device_less_allocs):
            found.append(_diag(R.FAKE_ALLOC_NO_DEVICE, f"the {kind} of {name} calls {finding.what}() without "
                               "device=; pass device=<input>.device (or use new_empty/empty_like)",
                               Where(path, finding.line, finding.column)))
    devices = _op_devices(op)
    if devices and function not in kernels:
        kernel_fixed = {f.what for k in kernels for f in k.fixed_device_allocs}
        for finding in _unique(function.fixed_device_allocs):
            fixed = finding.param
            if finding.what in kernel_fixed or devices <= {fixed} or fixed == "meta" and registration.key == "Meta":
                continue  # a Meta kernel computes on meta tensors: device="meta" is its device
            found.append(_diag(R.FAKE_ALLOC_NO_DEVICE, f"the {kind} of {name} allocates with {finding.what} although "
                               f"the op has {'/'.join(sorted(devices))} kernels: the fake output is on the wrong "
                               "device; pass device=<input>.device", Where(path, finding.line, finding.column)))
    found.extend(_check_fake_signature(op, function, name, kind))
    return found


def _kernel_functions(op: _Op) -> list[Function]:
    """The functions that compute the op for real (not its fakes or Meta kernels)."""
    found = [r.function for r in op.kernels if r.function is not None and r.key not in ("Meta", "fake")]
    if op.definition.kernel is not None:
        found.append(op.definition.kernel)
    return found


DEVICE_OF_KEY = {"CPU": "cpu", "CUDA": "cuda", "PrivateUse1": "npu", "XPU": "xpu", "MPS": "mps", "HIP": "cuda"}


def _op_devices(op: _Op) -> set[str]:
    """Device types the op has kernels for ('cpu', 'cuda', 'npu', ...), as far as the linted files show."""
    devices = {DEVICE_OF_KEY[r.key] for r in op.kernels if r.key in DEVICE_OF_KEY}
    for key in op.definition.device_types or ():  # custom_op device_types, as dispatch keys
        if key in DEVICE_OF_KEY:
            devices.add(DEVICE_OF_KEY[key])
    return devices


def _check_fake_signature(op: _Op, function: Function, name: str, kind: str) -> list[Diagnostic]:
    if any(p.kind in ("varargs", "varkw") for p in function.params):
        return []
    where = function.where
    expected = _expected_params(op)
    if expected is None:
        return []
    positional = [p for p in function.params if p.kind == "positional"]
    kwonly = {p.name: p for p in function.params if p.kind == "kwonly"}
    exp_positional = [e for e in expected if not e[2]]
    exp_kwonly = {e[0]: e for e in expected if e[2]}
    # torch calls the fake with the positional arguments by position (a rename breaks nothing) and
    # drops trailing arguments equal to their schema default; keyword-only ones come by name.
    problems = []
    for index, (exp_name, exp_default, _kw) in enumerate(exp_positional):
        if index >= len(positional):
            problems.append(f"is missing parameter {exp_name!r} (torch passes it by position)")
            break
        param = positional[index]
        if exp_default[0] and not param.has_default:
            problems.append(f"gives {param.name!r} no default, the schema {exp_default[1]!r} (torch omits an argument "
                            "equal to its default: TypeError)")
            break
    for extra in positional[len(exp_positional):]:
        if extra.name not in exp_kwonly and not extra.has_default:
            problems.append(f"has parameter {extra.name!r} the schema does not have")
            break
    for exp_name, exp_default, _kw in exp_kwonly.values():
        param = kwonly.get(exp_name) or next((p for p in positional if p.name == exp_name), None)
        if param is None:
            problems.append(f"is missing keyword-only parameter {exp_name!r} (torch passes it by name)")
        elif exp_default[0] and not param.has_default:
            problems.append(f"gives {param.name!r} no default, the schema {exp_default[1]!r} (torch omits an argument "
                            "equal to its default: TypeError)")
    for extra, param in kwonly.items():
        if extra not in exp_kwonly and not param.has_default:
            problems.append(f"has keyword-only parameter {extra!r} the schema does not have")
    if not problems:
        return []
    signature = ", ".join(_render_expected(expected))
    return [_diag(R.FAKE_SIGNATURE, f"the {kind} {function.name}() of {name} {problems[0]}; use ({signature})",
                  where)]


def _render_expected(expected) -> list[str]:
    out = []
    star = False
    for exp_name, default, kwonly in expected:
        if kwonly and not star:
            out.append("*")
            star = True
        out.append(exp_name + (f"={default[1]!r}" if default[0] else ""))
    return out


def _expected_params(op: _Op):
    """[(name, (has_default, default), kwonly)] the fake should take, or None when unknown."""
    if op.schema is not None:
        if op.schema.varargs:
            return None
        result = []
        for argument in op.schema.arguments:
            default = argument.default if argument.has_default else None
            result.append((argument.name, (argument.has_default, default), argument.kwarg_only))
        return result
    kernel = op.definition.kernel
    if kernel is None or any(p.kind in ("varargs", "varkw") for p in kernel.params):
        return None
    return [(p.name, (p.has_default, p.default), p.kind == "kwonly")
            for p in kernel.params]


def _check_dangling(records, dangling: list[Registration], ops, by_name) -> list[Diagnostic]:
    found = []
    defined_here = defaultdict(set)  # path -> namespaces the file defines ops in
    for record in records:
        for definition in record.definitions:
            defined_here[record.path].add(definition.namespace)
    names_by_ns = defaultdict(set)
    for (ns, name) in by_name:
        names_by_ns[ns].add(name)
    for registration in dangling:
        ns = registration.namespace
        if ns is None or registration.custom_op_target:
            continue
        group = by_name.get((ns, registration.name))
        if group and registration.overload is None:
            overloads = sorted(op.definition.overload for op in group)
            if "" not in overloads:
                qualified = f"{registration.name}.{overloads[0]}"
                found.append(_diag(R.OVERLOAD_LOST, f"{registration.api}(\"{registration.name}\") targets the default "
                                   f"overload, but {ns}::{registration.name} is only defined as "
                                   f"{', '.join(registration.name + '.' + o for o in overloads)}; "
                                   f"write \"{qualified}\"", registration.where))
            continue
        if group:
            overloads = sorted(op.definition.overload or "<default>" for op in group)
            if not difflib.get_close_matches(registration.overload, overloads, n=1, cutoff=0.6):
                continue  # another overload, probably defined in C++ or a file not linted
            found.append(_diag(R.IMPL_UNDEFINED, f"{registration.api}() registers {ns}::{registration.name}."
                               f"{registration.overload}, which no linted file defines (overloads: "
                               f"{', '.join(overloads)}); fix the overload name", registration.where))
            continue
        if ns not in defined_here.get(registration.where.path, ()):
            continue
        close = difflib.get_close_matches(registration.name, sorted(names_by_ns[ns]), n=1, cutoff=0.75)
        if not close:
            continue  # an unrelated name: most likely defined in C++ or in a file not linted
        found.append(_diag(R.IMPL_UNDEFINED, f"{registration.api}() registers {ns}::{registration.name}, which no "
                           f"linted file defines; did you mean {close[0]!r}?", registration.where))
    return found


def _check_dispatch_keys(records, replace_literal) -> list[Diagnostic]:
    found = []
    for record in records:
        for key in record.dispatch_keys:
            right = suggest_key(key.value)
            if right is None or record.npu_renamed and key.value in ("NPU", "AutogradNPU"):
                continue  # torch_npu renames PrivateUse1 to npu, after which torch parses "NPU"
            fix = replace_literal(key.where.path, key.literal, right) if key.literal is not None else None
            found.append(_diag(R.DISPATCH_KEY_SPELLING, f"dispatch key {key.value!r} does not exist; write "
                               f"{right!r}", key.where, fix=fix))
    return found


def _check_libraries(records) -> list[Diagnostic]:
    found = []
    first_def: dict[str, Where] = {}
    for record in records:
        for library in record.libraries:
            if library.kind != "DEF" or library.scoped or not library.module_level:
                continue
            previous = first_def.get(library.namespace)
            if previous is None:
                first_def[library.namespace] = library.where
                continue
            found.append(_diag(R.DUPLICATE_DEF, f"Library({library.namespace!r}, \"DEF\") again (first at "
                               f"{_loc(previous)}); torch allows one DEF per namespace, use \"FRAGMENT\" here",
                               library.where))
    return found
