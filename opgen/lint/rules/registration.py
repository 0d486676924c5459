"""Registration rules (OPG2xx): what the `define` / `impl` / `register_fake` / `custom_op` calls say,
matched across every linted file. Each rule's check stands right above it."""

from __future__ import annotations

import difflib
from collections import defaultdict

from ...contract import ALIASED_RETURN, ERROR, WARNING
from ..dispatch_keys import FAKE_CAPABLE_KEYS, MARKERS, TORCH_KEYS, is_backend_key
from ..fix import Edit
from ..records import UNKNOWN, Literal, Where, is_test_module, one_process, package_of
from .base import Invalid, LintOp, Project, code_example, diag, lib_example, lint_rule, loc, write_convention

# Dispatch keys a Python registration may name (torch's own list), and the misspellings that are certainly
# meant as one.
DISPATCH_KEYS = tuple(sorted(TORCH_KEYS - frozenset(MARKERS))) + ("CatchAll", "Default")
_KEYS_BY_FOLD = {key.lower(): key for key in DISPATCH_KEYS}
KEY_FIXES = {"npu": "PrivateUse1", "privateuseone": "PrivateUse1", "autogradnpu": "AutogradPrivateUse1"}


def suggest_key(value: str) -> str | None:
    """The key a misspelled one means, or None when `value` is fine or not certainly a typo."""
    if value in _KEYS_BY_FOLD.values():
        return None
    folded = value.lower()
    return KEY_FIXES.get(folded) or _KEYS_BY_FOLD.get(folded)


def replace_literal(path: str, literal: Literal, new_value: str) -> Edit:
    return Edit(path, literal.line, literal.offset, literal.offset + len(literal.value), new_value,
                f"replace {literal.value!r} with {new_value!r}")


def remove_namespace(path: str, literal: Literal, namespace: str) -> Edit | None:
    prefix = namespace + "::"
    stripped = literal.value.lstrip()
    if not stripped.startswith(prefix):
        return None
    start = literal.offset + (len(literal.value) - len(stripped))
    return Edit(path, literal.line, start, start + len(prefix), "", f"remove '{prefix}'")


def _syntax_error(project: Project):
    for record in project.records:
        problem = record.unreadable
        if problem is not None:
            message = (f"cannot parse this file: {problem.reason}; fix the syntax error" if problem.parsed
                       else f"cannot read this file: {problem.reason}")
            yield diag(SYNTAX_ERROR, message, Where(record.path, problem.line, problem.column))


SYNTAX_ERROR = lint_rule(
    "OPG200", "syntax-error", ERROR, "the file does not parse as Python",
    """
opgen lint reads registrations with Python's own parser; a file it cannot parse is reported once, at
the position the parser gives, and nothing else is checked in it. Fix the syntax error.
""",
    valid=[lib_example('lib.define("scale(Tensor x) -> Tensor")\n')],
    invalid=[Invalid(lib_example('lib.define("scale(Tensor x) -> Tensor"\nlib.impl("scale", None, "CPU")\n'), 5)],
    check=_syntax_error, scope="project",
)


def _namespace_in_define(project: Project):
    for op in project.definitions:
        definition, schema = op.definition, op.schema
        if schema is None or definition.library_namespace is None or definition.style != "library":
            continue
        fix = None
        if definition.library_namespace == schema.namespace and definition.schema_literal is not None:
            fix = remove_namespace(definition.where.path, definition.schema_literal, schema.namespace)
        yield diag(NAMESPACE_IN_DEFINE, f"define() schema starts with '{schema.namespace}::' inside Library "
                   f"'{definition.library_namespace}'; write \"{schema.signature(with_namespace=False)}\"",
                   definition.where, fix=fix)


NAMESPACE_IN_DEFINE = lint_rule(
    "OPG201", "namespace-in-define", ERROR, "`Library.define` schema carries a namespace: drop the `ns::` prefix",
    """
`Library(ns, ...).define("ns::f(...)")` is accepted, but torch records the op as `ns::ns::f`, and
clearing the op cache at exit then fails ("too many values to unpack"); a different namespace is
refused outright. The Library already names the namespace: write `define("f(...)")`.
`--fix` removes the prefix when it is the Library's own namespace.
""",
    valid=[lib_example('lib.define("scale(Tensor x, float s) -> Tensor")\n')],
    invalid=[Invalid(lib_example('lib.define("myops::scale(Tensor x, float s) -> Tensor")\n'), 5,
                     fixed=lib_example('lib.define("scale(Tensor x, float s) -> Tensor")\n'))],
    fixable=True,
    check=_namespace_in_define, scope="project",
)


def _dangling(project: Project):
    """The registrations no op matched whose target is a namespace we can judge, with the overloads their own
    package defines: what another package defines says nothing about a typo here (an `aten::f.out` defined in
    Python next to torch's C++ `aten::f`), so each package is judged as when linted alone."""
    for registration in project.dangling:
        if registration.namespace is not None and not registration.custom_op_target:
            package = package_of(registration.where.path)
            group = [op for op in project.by_name.get((registration.namespace, registration.name), ())
                     if package_of(op.definition.where.path) == package]
            yield registration, group


def _impl_undefined(project: Project):
    defined_here = defaultdict(set)  # path -> namespaces the file defines ops in
    for record in project.records:
        for definition in record.definitions:
            defined_here[record.path].add(definition.namespace)
    names_by_ns = defaultdict(set)  # (namespace, package) -> the names defined there
    for (ns, name), group in project.by_name.items():
        for op in group:
            names_by_ns[ns, package_of(op.definition.where.path)].add(name)
    for registration, group in _dangling(project):
        ns = registration.namespace
        if group and registration.overload is None:
            continue  # OPG203's case
        if group:
            overloads = sorted(op.definition.overload or "<default>" for op in group)
            if not difflib.get_close_matches(registration.overload, overloads, n=1, cutoff=0.6):
                continue  # another overload, probably defined in C++ or a file not linted
            yield diag(IMPL_UNDEFINED, f"{registration.api}() registers {ns}::{registration.name}."
                       f"{registration.overload}, which no linted file defines (overloads: "
                       f"{', '.join(overloads)}); fix the overload name", registration.where)
            continue
        if ns not in defined_here.get(registration.where.path, ()):
            continue
        close = difflib.get_close_matches(registration.name, sorted(names_by_ns[ns, package_of(registration.where.path)]),
                                          n=1, cutoff=0.75)
        if not close:
            continue  # an unrelated name: most likely defined in C++ or in a file not linted
        yield diag(IMPL_UNDEFINED, f"{registration.api}() registers {ns}::{registration.name}, which no "
                   f"linted file defines; did you mean {close[0]!r}?", registration.where)


IMPL_UNDEFINED = lint_rule(
    "OPG202", "impl-undefined", ERROR, "a kernel or fake is registered for an op no linted file defines",
    """
A kernel for `ns::f` registered next to the definitions of namespace `ns`, where no linted file
defines `f` but one defines a close name, is a typo: torch defers the registration and never uses
it. To stay quiet about ops defined in C++ or in files you did not lint, it only fires when the same
file defines ops of that namespace and a defined name is close to the registered one.
""",
    valid=[lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CPU")
        lib.impl("scale", lambda x: torch.empty_like(x), "Meta")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("sclae", lambda x: x * 2, "CPU")
    """), 6)],
    check=_impl_undefined, scope="project",
)


def _overload_lost(project: Project):
    for registration, group in _dangling(project):
        if not group or registration.overload is not None:
            continue
        overloads = sorted(op.definition.overload for op in group)
        if "" not in overloads:
            ns = registration.namespace
            qualified = f"{registration.name}.{overloads[0]}"
            yield diag(OVERLOAD_LOST, f"{registration.api}(\"{registration.name}\") targets the default "
                       f"overload, but {ns}::{registration.name} is only defined as "
                       f"{', '.join(registration.name + '.' + o for o in overloads)}; "
                       f"write \"{qualified}\"", registration.where)


OVERLOAD_LOST = lint_rule(
    "OPG203", "overload-lost", ERROR, "`impl(\"f\", ...)` for an op defined only as `f.overload`: name the overload",
    """
`define("f.out(...)")` returns "f", without the overload; `impl("f", ...)` and `register_fake("ns::f")`
then target the default overload `f`, which does not exist, and the kernel is never used.
Write `impl("f.out", ...)`.
""",
    valid=[lib_example("""
        lib.define("f.out(Tensor x, *, Tensor(a!) out) -> ()")
        lib.impl("f.out", lambda x, *, out: out.copy_(x), "CPU")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("f.out(Tensor x, *, Tensor(a!) out) -> ()")
        lib.impl("f", lambda x, *, out: out.copy_(x), "CPU")
    """), 6)],
    check=_overload_lost, scope="project",
)


def _dispatch_key_spelling(project: Project):
    for record in project.records:
        for key in record.dispatch_keys:
            right = suggest_key(key.value)
            if right is None or record.npu_renamed and key.value in ("NPU", "AutogradNPU"):
                continue  # torch_npu renames PrivateUse1 to npu, after which torch parses "NPU"
            fix = replace_literal(key.where.path, key.literal, right) if key.literal is not None else None
            yield diag(DISPATCH_KEY_SPELLING, f"dispatch key {key.value!r} does not exist; write {right!r}",
                       key.where, fix=fix)


DISPATCH_KEY_SPELLING = lint_rule(
    "OPG204", "dispatch-key-spelling", ERROR,
    "misspelled dispatch key (`\"npu\"` -> `\"PrivateUse1\"`, `\"cpu\"` -> `\"CPU\"`)",
    """
Dispatch keys are case-sensitive: `Library.impl(..., "cpu")` fails with "could not parse dispatch key",
and there is no `NPU` key: Ascend NPU kernels register for `PrivateUse1`. Checked where only keys are
accepted (`Library(ns, "IMPL", key)`, `lib.impl(..., key)`, `impl(lib, name, key)`, `fallback`,
`direct_register_custom_op(dispatch_key=)`); device types such as `"cpu"`/`"npu"` are right in
`custom_op(device_types=)`, `register_kernel` and `torch.library.impl("ns::op", "cpu")`.
`--fix` rewrites the key.
""",
    valid=[code_example("""
        from torch.library import Library

        lib = Library("myops", "IMPL", "PrivateUse1")
    """)],
    invalid=[Invalid(code_example("""
        from torch.library import Library

        lib = Library("myops", "IMPL", "NPU")
    """), 3, fixed=code_example("""
        from torch.library import Library

        lib = Library("myops", "IMPL", "PrivateUse1")
    """))],
    fixable=True,
    check=_dispatch_key_spelling, scope="project",
)


def _entry_points(project: Project) -> set[str]:
    return {record.path for record in project.records if record.entry_point}


def _duplicate_def(project: Project):
    entry_points = _entry_points(project)
    first_def: dict[str, list[Where]] = {}
    for record in project.records:
        for library in record.libraries:
            if library.kind != "DEF" or library.scoped or not library.module_level:
                continue
            earlier = first_def.setdefault(library.namespace, [])
            met = [w for w in earlier if one_process(w.path, library.where.path, entry_points)]
            earlier.append(library.where)
            if not met:
                continue
            previous = met[0]
            yield diag(DUPLICATE_DEF, f"Library({library.namespace!r}, \"DEF\") again (first at "
                       f"{loc(previous)}); torch allows one DEF per namespace, use \"FRAGMENT\" here", library.where)


DUPLICATE_DEF = lint_rule(
    "OPG205", "duplicate-def-library", ERROR, "`Library(ns, \"DEF\")` twice for one namespace: use \"FRAGMENT\"",
    """
Only one `Library(ns, "DEF")` (TORCH_LIBRARY) may exist per namespace; the second raises "Only a single
TORCH_LIBRARY can be used to register the namespace" as soon as both modules are imported. Use
`Library(ns, "FRAGMENT")` in every other file that adds definitions. Module-level libraries only
(a `_scoped_library` or a Library made inside a function is short-lived).
""",
    valid=[code_example("""
        from torch.library import Library

        defs = Library("myops", "DEF")
        more = Library("myops", "FRAGMENT")
    """)],
    invalid=[Invalid(code_example("""
        from torch.library import Library

        defs = Library("myops", "DEF")
        more = Library("myops", "DEF")
    """), 4)],
    check=_duplicate_def, scope="project",
)


def _mutates_args_unknown_name(op: LintOp, project: Project):
    definition = op.definition
    mutates = definition.mutates_args
    if definition.style != "custom_op" or mutates == "unknown":
        return
    where = definition.mutates_where or definition.where
    if isinstance(mutates, str):
        yield diag(MUTATES_ARGS_UNKNOWN_PARAM, f"{op.name}: mutates_args={mutates!r} is a string, not a list of "
                   f"names; write mutates_args=({mutates!r},)", where)
        return
    if not isinstance(mutates, tuple) or definition.kernel is None:
        return
    params = {p.name for p in definition.kernel.params if p.kind in ("positional", "kwonly")}
    if any(p.kind in ("varargs", "varkw") for p in definition.kernel.params):
        return
    for item in mutates:
        if isinstance(item, str) and item not in params:
            close = difflib.get_close_matches(item, sorted(params), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"parameters are {', '.join(sorted(params)) or 'none'}"
            yield diag(MUTATES_ARGS_UNKNOWN_PARAM, f"{op.name}: mutates_args names {item!r}, which is not a "
                       f"parameter of {definition.kernel.name}(); {hint}", where)


MUTATES_ARGS_UNKNOWN_PARAM = lint_rule(
    "OPG206", "mutates-args-unknown-name", ERROR, "`mutates_args` names something that is not a parameter",
    """
`custom_op(..., mutates_args=("y",))` where the function has no parameter `y` fails at import with
"in mutates_args were not found in the custom op's signature"; a plain string other than "unknown"
(`mutates_args="x"`) is refused too (write `("x",)`).
""",
    valid=[code_example("""
        import torch


        @torch.library.custom_op("myops::fill_", mutates_args=("x",))
        def fill_(x: torch.Tensor, v: float) -> None:
            x.fill_(v)
    """)],
    invalid=[Invalid(code_example("""
        import torch


        @torch.library.custom_op("myops::fill_", mutates_args=("y",))
        def fill_(x: torch.Tensor, v: float) -> None:
            x.fill_(v)
    """), 4)],
    check=_mutates_args_unknown_name, scope="op",
)


def _mutates_args_unknown(op: LintOp, project: Project):
    definition = op.definition
    if definition.style == "custom_op" and definition.mutates_args == "unknown":
        yield diag(MUTATES_ARGS_UNKNOWN, f"{op.name}: mutates_args=\"unknown\" marks every tensor as written, so "
                   "functionalization copies each one back after every call; list the parameters the kernel "
                   "writes, e.g. mutates_args=() or (\"x\",)", definition.mutates_where or definition.where)


MUTATES_ARGS_UNKNOWN = lint_rule(
    "OPG207", "mutates-args-unknown", WARNING, "`mutates_args=\"unknown\"`: every tensor argument counts as written (opt-in)",
    """
`mutates_args="unknown"` is legal and documented: it declares EVERY tensor argument as written, so
functionalization copies all of them back after each call, the compiler cannot reorder around the
op, and a write to the wrong tensor goes unnoticed. It is a cost, not a bug, so the rule is opt-in:
`--select OPG207` (a prefix such as OPG2 does not enable it). Name the parameters the kernel writes:
`mutates_args=("cache",)`, or `()`.
""",
    valid=[code_example("""
        import torch


        @torch.library.custom_op("myops::double", mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @double.register_fake
        def _(x):
            return torch.empty_like(x)
    """)],
    invalid=[Invalid(code_example("""
        import torch


        @torch.library.custom_op("myops::double", mutates_args="unknown")
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @double.register_fake
        def _(x):
            return torch.empty_like(x)
    """), 4)],
    opt_in=True,
    check=_mutates_args_unknown, scope="op",
)


def _no_fake(op: LintOp, project: Project):
    if not op.seen or _no_fake_needed(op, project) or is_test_module(op.definition.where.path):
        return  # an op a test defines may only have its schema read: no compiled caller is shown
    definition = op.definition
    if definition.style == "custom_op" and definition.namespace is not None:
        if any(r.key == "fake" for r in op.fakes) or any(k.key in ("CompositeImplicitAutograd", UNKNOWN)
                                                          for k in op.kernels):
            return
        if any(r.key == "Meta" for r in op.fakes):
            yield diag(NO_FAKE, f"{op.name} is a custom_op with only a Meta kernel, which FakeTensorMode "
                       "ignores; register it with @<op>.register_fake instead", definition.where)
            return
    elif not _only_device_kernels(op):
        return
    if definition.namespace is None and not op.kernels:
        return
    yield diag(NO_FAKE, f"{op.name} has no fake or Meta kernel in the linted files, so it cannot enter a "
               f"compiled graph; add @torch.library.register_fake(\"{op.name}\")", definition.where)


def _no_fake_needed(op: LintOp, project: Project) -> bool:
    """Whether torch makes the fake itself, or the code cannot say: a fake is registered under a name we could
    not read that may be this op's, the op is tagged inplace/out (or its tags are unknown), a triton_op
    (traced on fake tensors), or a mutating op returning nothing (torch generates a trivial fake)."""
    definition, schema = op.definition, op.schema
    if project.maybe_named(op, "fake"):
        return True
    if definition.tags is None or set(definition.tags or ()) & {"inplace", "out"} or definition.fake_from_kernel:
        return True
    if schema is not None and schema.is_mutable and not schema.returns and not schema.varret:
        return True
    return schema is None and definition.kernel is not None and definition.kernel.returns_annotation == "None" \
        and definition.mutates_args not in ((), [])


def _only_device_kernels(op: LintOp) -> bool:
    """A Library op whose kernels the code shows, all at device keys, and no fake: a kernel that runs on fake
    tensors (Meta, the composite keys) or one at a functionality key (BackendSelect, Python, Autograd) may
    serve fake tensors, and without kernels (C++) we cannot tell."""
    if op.fakes or any(k.key in FAKE_CAPABLE_KEYS or k.key is UNKNOWN for k in op.kernels):
        return False
    return bool(op.kernels) and all(is_backend_key(k.key) for k in op.kernels)


NO_FAKE = lint_rule(
    "OPG208", "no-fake", WARNING, "the op has no fake/Meta kernel in any linted file: it cannot enter a graph",
    """
torch.compile, export and the capture tiers (npugraph_ex, CUDA graphs) trace with fake tensors; an op
with no fake (`register_fake`) or Meta kernel stops the trace: "Operator does not support running with
fake tensors" (Library) or "There was no fake impl registered" (custom_op, a hard error even without
fullgraph). Register one with `register_fake`.
Stays quiet when no fake is needed or it cannot tell: a kernel for CompositeExplicitAutograd /
CompositeImplicitAutograd (`types="default"`, a custom_op without device_types is NOT enough) runs on
fake tensors; mutating ops returning `()` and ops tagged inplace/out get a trivial fake from torch;
ops whose kernels the linted files do not show (C++), or registered only at BackendSelect, Python or
Autograd keys, are not judged. For custom_op a Meta kernel is not enough (FakeTensorMode ignores it).
An op a test module (`test_*.py`, `*_test.py`) defines is not judged: the test may only read its schema,
so that no compiled caller fails is all the code shows (a suspicion, not a proven failure).
""",
    valid=[lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CPU")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """), code_example("""
        import torch


        @torch.library.custom_op("myops::conv2d.padding", mutates_args=())
        def conv2d_padding(x: torch.Tensor) -> torch.Tensor:
            return x.clone()


        @torch.library.register_fake("myops::conv2d.padding")  # the overload custom_op's name carries
        def _(x):
            return torch.empty_like(x)
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CPU")
    """), 5), Invalid(code_example("""
        import torch


        @torch.library.custom_op("myops::conv2d.padding", mutates_args=())
        def conv2d_padding(x: torch.Tensor) -> torch.Tensor:
            return x.clone()


        @torch.library.register_fake("myops::conv2d")  # the default overload: another op
        def _(x):
            return torch.empty_like(x)
    """), 4)],
    check=_no_fake, scope="op",
)


def _meta_and_fake(op: LintOp, project: Project):
    real_fakes = [r for r in op.fakes if r.key == "fake"]
    metas = [r for r in op.fakes if r.key == "Meta"]
    if real_fakes and metas:
        later = max(real_fakes + metas, key=lambda r: (r.where.path, r.where.line))
        other = metas[0] if later.key == "fake" else real_fakes[0]
        yield diag(META_AND_FAKE, f"{op.name} has both a Meta kernel ({loc(metas[0].where)}) and "
                   f"register_fake ({loc(real_fakes[0].where)}); delete the Meta kernel",
                   later.where if later is not other else real_fakes[0].where)


META_AND_FAKE = lint_rule(
    "OPG209", "meta-and-fake", WARNING, "both a Meta kernel and `register_fake` for one op: keep only register_fake",
    """
With both, FakeTensorMode uses the fake while meta tensors use whichever Meta kernel was registered
last, so the two silently disagree as soon as one is edited; with `allow_override=False` torch refuses
the pair. `register_fake` serves both: delete the Meta kernel.
""",
    valid=[lib_example("""
        lib.define("scale(Tensor x) -> Tensor")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: torch.empty_like(x), "Meta")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """), 9)],
    check=_meta_and_fake, scope="op",
)


def _duplicate_op(project: Project):
    entry_points = _entry_points(project)
    first: dict[tuple, list] = {}
    for op in project.definitions:
        definition = op.definition
        if definition.style != "library" or not definition.unconditional:  # not `if not hasattr(...)`
            continue
        earlier_ones = first.setdefault(op.key, [])
        met = [d for d in earlier_ones if one_process(d.where.path, definition.where.path, entry_points)]
        earlier_ones.append(definition)
        if met:
            earlier = met[0]
            yield diag(DUPLICATE_OP, f"{op.name} is defined again (first at {loc(earlier.where)}); torch refuses "
                       "the second definition at import: delete one, or name another overload", definition.where)


DUPLICATE_OP = lint_rule(
    "OPG210", "duplicate-op-definition", ERROR, "the same op (name and overload) is defined twice",
    """
`define("f(...)")` for an op that is already defined fails at import: "Tried to register an operator
(ns::f) with the same name and overload name multiple times", whether both definitions are in one
file or in two modules of the package. Delete one, or give it another overload name (`f.out`).
Ops are matched by namespace, name and overload; ops without a readable namespace by package.
""",
    valid=[lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.define("scale.out(Tensor x, *, Tensor(a!) out) -> ()")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.define("scale(Tensor x) -> Tensor")
    """), 6)],
    check=_duplicate_op, scope="project",
)


def _untagged_write_convention(op: LintOp, project: Project):
    definition, schema = op.definition, op.schema
    if schema is None or definition.style != "library" or definition.tags != ():
        return
    tag = write_convention(schema)
    if tag is None:
        return
    how = (f"define it with tags=(torch.Tag.{tag},) (torch >= 2.13)" if tag != "aten" else
           "return nothing ('-> ()'; no torch.Tag takes this schema: Tag.out wants every written argument "
           "keyword-only and returned, Tag.inplace only the first one)")
    yield diag(UNTAGGED_WRITE_CONVENTION, f"{op.name} follows ATen's {'out/in-place' if tag == 'aten' else tag} "
               "convention (it returns the tensor it writes) without a tag: torch.export keeps it, but "
               "torch.compile of a caller fails (\"Found a custom (non-ATen) operator whose output has alias "
               f"annotations\"); to make it compile-safe, {how}", definition.where)


UNTAGGED_WRITE_CONVENTION = lint_rule(
    "OPG211", "untagged-write-convention", WARNING,
    "an `.out` / in-place overload in ATen's convention without `torch.Tag.out`/`inplace` (opt-in)",
    """
`foo.out(..., *, Tensor(a!) out) -> Tensor(a!)` (and `foo_(Tensor(a!) self, ...) -> Tensor(a!)`) is ATen's
out / in-place convention: torch accepts the schema, `torch.export` keeps the op, and runtimes insert such
overloads after export (ExecuTorch's out variants), so they are never traced by torch.compile. Only
torch.compile (or `run_decompositions`) of a caller fails: "Found a custom (non-ATen) operator whose output
has alias annotations". That is a limit, not a bug, so the rule is opt-in (`--select OPG211`); and such a
schema is not reported as OPG102 (aliased-return), exactly as in op_plugin / native_functions YAML. To make
the op compile-safe, tag it: `lib.define(schema, tags=(torch.Tag.out,))` (torch >= 2.13 has the tags; torch
then also generates its fake). A return that aliases without following the convention is still OPG102.
""",
    valid=[lib_example("""
        lib.define("scale.out(Tensor x, float s, *, Tensor(a!) out) -> Tensor(a!)", tags=(torch.Tag.out,))
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale.out(Tensor x, float s, *, Tensor(a!) out) -> Tensor(a!)")
    """), 5)],
    opt_in=True,
    check=_untagged_write_convention, scope="op", supersedes=(ALIASED_RETURN,),
)
