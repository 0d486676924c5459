"""Kernel and fake body rules (OPG3xx): what the registered functions do, read from their code. Each
rule's check stands right above it."""

from __future__ import annotations

import textwrap

from ...contract import ERROR, SIDE_EFFECT_ONLY, WARNING
from ...schema.model import Schema, is_tensor_like
from ..dispatch_keys import device_of_key
from ..fix import Edit
from ..records import Function, Registration, Where, is_test_module
from .base import Invalid, LintOp, Project, code_example, diag, inferred_schema, lib_example, lint_rule, unique

CAPTURE_KEYS = frozenset({"PrivateUse1", "CUDA"})


def _kernel_functions(op: LintOp) -> list[Function]:
    """The functions that compute the op for real (not its fakes or Meta kernels)."""
    found = [r.function for r in op.kernels if r.function is not None and r.key not in ("Meta", "fake")]
    if op.definition.kernel is not None:
        found.append(op.definition.kernel)
    return found


def _op_devices(op: LintOp) -> set[str]:
    """Device types the op has kernels for ('cpu', 'cuda', 'npu', ...), as far as the linted files show."""
    keys = [r.key for r in op.kernels] + list(op.definition.device_types or ())  # custom_op device_types, as keys
    return {device for key in keys if isinstance(key, str) and (device := device_of_key(key)) is not None}


def _fakes(op: LintOp):
    """(registration, function, kind) of each fake / Meta kernel whose code we read and that is written (a
    TODO skeleton is OPG306's finding alone)."""
    for registration in op.fakes:
        function = registration.function
        if function is not None and function.todo is None:
            yield registration, function, "Meta kernel" if registration.key == "Meta" else "fake"


def _argument_for(schema: Schema, function: Function, param_name: str):
    """The schema argument a kernel parameter binds to (by position, keyword-only by name)."""
    positional = [p for p in function.params if p.kind == "positional"]
    names = [p.name for p in positional]
    if param_name in names:
        index = names.index(param_name)
        if index < len(schema.positional):
            return schema.positional[index]
    return schema.argument(param_name)  # keyword-only arguments reach a Python kernel by name


def add_mutation_annotation(path: str, definition, schema, argument) -> Edit | None:
    """`Tensor x` -> `Tensor(b!) x` inside the define() literal, with a letter no other argument uses."""
    from ...schema.parser import span_column

    literal = definition.schema_literal
    if literal is None or definition.style != "library":
        return None
    column = span_column(schema, ("arg", argument.name))
    if column is None:
        return None
    index = column - 1 - definition.name_offset
    if index < 0 or not literal.value.startswith("Tensor", index):
        return None
    after = index + len("Tensor")
    if after < len(literal.value) and literal.value[after] == "(":
        return None
    used = {letter for a in schema.arguments if a.alias for letter in (*a.alias.before, *a.alias.after)}
    used |= {letter for r in schema.returns if r.alias for letter in (*r.alias.before, *r.alias.after)}
    letter = next(c for c in "abcdefghijklmnopqrstuvwxyz" if c not in used)
    at = literal.offset + after
    return Edit(path, literal.line, at, at, f"({letter}!)", f"declare {argument.name!r} as written: "
                f"'Tensor({letter}!) {argument.name}'")


def _undeclared_mutation(op: LintOp, project: Project):
    for registration in op.kernels:
        if registration.function is not None:
            yield from _kernel_mutation(op, registration, registration.function)


def _kernel_mutation(op: LintOp, registration: Registration, function: Function):
    if registration.key in ("Meta", "fake") or not function.mutations:
        return
    definition = op.definition
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
            hint = f"declare 'Tensor(a!) {argument.name}'"
            if definition.api.startswith("torch._custom_op"):  # their schema is inferred with no write
                hint = (f"{definition.api} cannot declare a write: define the op with "
                        f"torch.library.custom_op(..., mutates_args=({argument.name!r},))")
            yield diag(UNDECLARED_MUTATION, f"kernel {function.name}() {finding.what} {finding.param!r}, but the "
                       f"schema of {op.name} does not mark it written; {hint}", where, fix=fix)
        elif isinstance(definition.mutates_args, tuple):
            param = function.param(finding.param)
            if param is None or finding.param in definition.mutates_args:
                continue
            if param.annotation and "Tensor" not in param.annotation:
                continue
            yield diag(UNDECLARED_MUTATION, f"kernel {function.name}() {finding.what} {finding.param!r}, but "
                       f"mutates_args of {op.name} does not list it; add {finding.param!r} to mutates_args", where)
        else:
            continue
        reported.add(finding.param)


UNDECLARED_MUTATION = lint_rule(
    "OPG301", "undeclared-mutation", ERROR, "the kernel writes a tensor argument the schema does not mark `(a!)`",
    """
A kernel that writes an argument (`x.add_()`, `x.copy_()`, `x[...] = v`, `x += v`, `out=x`) while the
schema says it does not is silently wrong under torch.compile: the "functional" op is dead-code
eliminated, or its write lands in a copy (npugraph_ex clones inputs). Declare it: `Tensor(a!) x` in
the schema, or add the name to `mutates_args`. Only certain writes are reported (to the parameter
itself, a slice, a view or `.data` of it, and not after the parameter is re-bound). `--fix` adds the
annotation to a literal `define()` schema. An op this rule reports gets no OPG104 ("mutates nothing"):
it writes.
""",
    valid=[lib_example("""
        lib.define("fill(Tensor(a!) x, float v) -> ()")


        def fill(x, v):
            x.fill_(v)


        lib.impl("fill", fill, "CPU")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("fill(Tensor x, float v) -> ()")


        def fill(x, v):
            x.fill_(v)


        lib.impl("fill", fill, "CPU")
    """), 9, fixed=lib_example("""
        lib.define("fill(Tensor(a!) x, float v) -> ()")


        def fill(x, v):
            x.fill_(v)


        lib.impl("fill", fill, "CPU")
    """))],
    fixable=True,
    check=_undeclared_mutation, scope="op", supersedes=(SIDE_EFFECT_ONLY,),
)


def _fake(body: str, kernel: str = "") -> str:
    """A Library op `rows(Tensor x) -> Tensor` and its fake; `body` is the fake's body, from line 10 (11 with
    the one-line `kernel` registration, which goes on line 6)."""
    return lib_example("""
        lib.define("rows(Tensor x) -> Tensor")
    """) + kernel + "\n\n" + code_example("""
        @torch.library.register_fake("myops::rows")
        def _(x):
    """) + textwrap.indent(code_example(body), "    ")


def _fake_reads_data(op: LintOp, project: Project):
    for _registration, function, kind in _fakes(op):
        reads = [f for f in function.data_reads if not (function.uses_get_ctx and f.what.strip(".()") in
                                                          ("nonzero", "torch.nonzero"))]
        for finding in unique(reads):
            yield diag(FAKE_READS_DATA, f"the {kind} of {op.name} reads tensor data with {finding.what}; compute "
                       "sizes from .shape, or use torch.library.get_ctx().new_dynamic_size()",
                       Where(function.where.path, finding.line, finding.column))


FAKE_READS_DATA = lint_rule(
    "OPG302", "fake-reads-data", ERROR, "a fake/Meta kernel reads tensor data (`.item()`, `.tolist()`, `.cpu()`, ...)",
    """
Fake tensors have no data: `.item()`, `.tolist()`, `.numpy()` raise or force a graph break, `.cpu()`
moves the fake to the wrong device, and `nonzero()` has a data-dependent size. Compute sizes from
`x.shape`; for a data-dependent size use `torch.library.get_ctx().new_dynamic_size()` (a fake that
calls `get_ctx()` may use nonzero-like ops).
""",
    valid=[_fake("""
        n = torch.library.get_ctx().new_dynamic_size()
        return x.new_empty(n, x.shape[1])
    """)],
    invalid=[Invalid(_fake("""
        n = int(x.sum().item())
        return x.new_empty(n)
    """), 10)],
    check=_fake_reads_data, scope="op",
)


def _fake_returns_input(op: LintOp, project: Project):
    aliased = op.schema is not None and any(r.alias for r in op.schema.returns)
    tagged = op.definition.tags is None or bool(set(op.definition.tags) & {"inplace", "out"})
    if aliased or tagged:
        return
    kernels = _kernel_functions(op)
    kernel_too = any(k.returned_params for k in kernels)
    for _registration, function, kind in _fakes(op):
        for finding in unique(function.returned_params):
            if not op.seen and (not kernels or any(finding.param in {f.param for f in k.returned_params}
                                                   for k in kernels)):
                continue  # the schema is unseen: only a kernel returning a new tensor says no alias is declared
            message = _returns_input_message(op, kind, finding.param, kernels, kernel_too)
            yield diag(FAKE_RETURNS_INPUT, message, Where(function.where.path, finding.line, finding.column))


def _returns_input_message(op: LintOp, kind: str, param: str, kernels: list[Function], kernel_too: bool) -> str:
    """What the fake does against what the op's schema and kernels say: returning an input where the op returns
    nothing, where the kernel returns that input too (the contract is broken, not only the fake), or where the
    kernel returns a new tensor."""
    head = f"the {kind} of {op.name} returns its input {param!r}"
    argument = op.schema.argument(param) if op.schema is not None else None
    written = argument is not None and argument.is_write
    if op.schema is not None and not op.schema.returns and not op.schema.varret:
        return (f"{head}, but the op returns nothing (its schema returns `()`: FakeTensorMode raises \"expected "
                f"... to return None\"); return None")
    alias = f"`Tensor(a!) {param} -> Tensor(a!)`" if written else f"`Tensor(a) {param} -> Tensor(a)`"
    if kernel_too:
        return (f"{head}, and so does its kernel, but the schema declares no alias: compiled graphs and opcheck "
                f"assume a new tensor; return a new tensor from both, or declare the alias in the schema ({alias})")
    if kernels:
        return f"{head} while the kernel returns a new tensor; return a new tensor such as torch.empty_like({param})"
    return (f"{head}, but the schema declares no alias: compiled graphs assume a new tensor; return a new tensor "
            f"such as torch.empty_like({param})")


FAKE_RETURNS_INPUT = lint_rule(
    "OPG303", "fake-returns-input", ERROR, "a fake/Meta kernel returns an input: return a new tensor",
    """
The op's outputs must not alias its inputs (the schema has no alias annotation); a fake that returns
its argument tells the compiler they do, and opcheck fails "outputs_alias_inputs". Return
`torch.empty_like(x)` (or `x.new_empty(...)`). Not reported for ops tagged inplace/out or whose
schema returns an alias.
""",
    valid=[_fake("return torch.empty_like(x)\n")],
    invalid=[Invalid(_fake("return x\n"), 10)],
    check=_fake_returns_input, scope="op",
)


DEVICE_GENERIC_KEYS = frozenset({"CompositeExplicitAutograd", "CompositeImplicitAutograd"})


def _fake_alloc_without_device(op: LintOp, project: Project):
    kernels = _kernel_functions(op)
    devices = _op_devices(op)
    kernel_fixed = {f.what for k in kernels for f in k.fixed_device_allocs}
    # the op's outputs are off the default device where the code shows a kernel off the CPU, or one for
    # every device (a composite key, a custom_op without device_types: its outputs are on the input's device)
    elsewhere = bool(devices - {"cpu", "meta"}) or any(r.key in DEVICE_GENERIC_KEYS for r in op.kernels)
    # a kernel allocating on the default device, or returning a tensor it made on the host (a CPU handle),
    # has outputs there: a fake allocating there may be describing them
    host_output = any(k.host_returns for k in kernels)
    default_device_kernel = host_output or any(k.device_less_allocs or k.makes_on_default_device for k in kernels)
    for registration, function, kind in _fakes(op):
        path = function.where.path
        if registration.key == "Meta":  # called on meta tensors, whatever else the op has
            for finding in unique(function.device_less_allocs):
                yield diag(FAKE_ALLOC_NO_DEVICE, f"the Meta kernel of {op.name} calls {finding.what}() without "
                           "device=: on meta tensors it returns a CPU tensor (FakeTensorMode: \"tensor's device "
                           "must be 'meta'\"); pass device=<input>.device (or use new_empty/empty_like)",
                           Where(path, finding.line, finding.column))
        elif elsewhere and function not in kernels and not default_device_kernel:
            for finding in unique(function.device_less_allocs):
                yield diag(FAKE_ALLOC_NO_DEVICE, f"the {kind} of {op.name} calls {finding.what}() without device=; "
                           "pass device=<input>.device (or use new_empty/empty_like)",
                           Where(path, finding.line, finding.column))
        if not devices or function in kernels:
            continue
        for finding in unique(function.fixed_device_allocs):
            fixed = finding.param
            if finding.what in kernel_fixed or devices <= {fixed} or fixed == "meta" and registration.key == "Meta" \
                    or fixed == "cpu" and host_output:
                continue  # a Meta kernel computes on meta tensors: device="meta" is its device
            yield diag(FAKE_ALLOC_NO_DEVICE, f"the {kind} of {op.name} allocates with {finding.what} although the "
                       f"op has {'/'.join(sorted(devices))} kernels: the fake output is on the wrong device; pass "
                       "device=<input>.device", Where(path, finding.line, finding.column))


FAKE_ALLOC_NO_DEVICE = lint_rule(
    "OPG304", "fake-alloc-without-device", ERROR,
    "a fake/Meta kernel allocates without `device=`: pass the input's device",
    """
`torch.empty(shape)` in a fake creates a CPU tensor; for an op that runs on another device (the code shows
a CUDA / PrivateUse1 / ... kernel for it, or a device-generic one: CompositeExplicitAutograd /
CompositeImplicitAutograd, a custom_op without device_types) the traced graph then has the wrong device
and capture fails. A kernel registered at the Meta key is always wrong so: it is called on meta tensors,
and under FakeTensorMode torch raises "tensor's device must be 'meta', got cpu instead". Use
`x.new_empty(shape)`, `torch.empty_like(x)`, or `torch.empty(shape, device=x.device, dtype=x.dtype)`. A
`register_fake` is not reported where the code shows only CPU kernels (or none: kernels in C++; its
outputs may well be on the default device), nor where the op's kernel itself allocates on the default
device. Also reported: a fake that allocates on a hard-coded device other than those the op has kernels for.
""",
    valid=[_fake("return torch.empty(x.shape[0], device=x.device, dtype=x.dtype)\n",
                 kernel='lib.impl("rows", lambda x: x[: int(x.sum())].clone(), "CUDA")\n'),
           _fake("return torch.empty(x.shape[0], dtype=x.dtype)\n",
                 kernel='lib.impl("rows", lambda x: x[: int(x.sum())].clone(), "CPU")\n')],
    invalid=[Invalid(_fake("return torch.empty(x.shape[0], dtype=x.dtype)\n",
                           kernel='lib.impl("rows", lambda x: x[: int(x.sum())].clone(), "CUDA")\n'), 11)],
    check=_fake_alloc_without_device, scope="op",
)


def _fake_signature_mismatch(op: LintOp, project: Project):
    for _registration, function, kind in _fakes(op):
        yield from _fake_signature(op, function, kind)


def _fake_signature(op: LintOp, function: Function, kind: str):
    if any(p.kind in ("varargs", "varkw") for p in function.params):
        return
    expected = _expected_params(op)
    if expected is None:
        return
    problem = (_missing_problem(op, function, expected) or _order_problem(function, expected)
               or _positional_problem(op, function, expected) or _keyword_problem(function, expected))
    if problem:
        signature = ", ".join(_render_expected(expected))
        yield diag(FAKE_SIGNATURE, f"the {kind} {function.name}() of {op.name} {problem}; use ({signature})",
                   function.where)


def _missing_problem(op: LintOp, function: Function, expected) -> str | None:
    """A fake with fewer positional parameters than torch passes: named by what it lacks (a fake missing two
    parameters is not "taking one where the schema has another"), and whether every call fails."""
    positional = [p for p in function.params if p.kind == "positional"]
    exp_positional = [e for e in expected if not e[2]]
    refused = _refused_by_kernels(op)
    lacking = [e for e in exp_positional[len(positional):] if not (e[1] == (True, None) and e[0] in refused)]
    if not lacking:
        return None
    taken = {p.name for p in function.params}
    by_name = [e for e in exp_positional if e[0] not in taken]
    missing = by_name if len(by_name) == len(lacking) else lacking
    always = any(not e[1][0] for e in missing)
    names = " and ".join(repr(e[0]) for e in missing)
    when = "every call raises TypeError" if always else "a call passing them raises TypeError"
    return (f"is missing parameter{'s' if len(missing) > 1 else ''} {names} (torch passes "
            f"{len(exp_positional)} arguments by position: {when})")


def _order_problem(function: Function, expected) -> str | None:
    """A positional parameter named like another argument of the schema: torch passes by position, so it
    silently receives that other argument's value (renamed parameters are fine; swapped ones are not)."""
    names = {e[0] for e in expected}
    exp_positional = [e[0] for e in expected if not e[2]]
    positional = [p for p in function.params if p.kind == "positional"]
    for index, param in enumerate(positional[:len(exp_positional)]):
        if param.name != exp_positional[index] and param.name in names:
            return (f"takes {param.name!r} where the schema has {exp_positional[index]!r} (torch passes arguments "
                    f"by position: {param.name!r} receives the value of {exp_positional[index]!r}, a wrong result "
                    "without an error)")
    return None


def _positional_problem(op: LintOp, function: Function, expected) -> str | None:
    """What breaks the positional part of torch's call: torch passes positional arguments by position (a
    rename breaks nothing) and drops trailing arguments equal to their schema default. A trailing `None`
    argument every kernel refuses otherwise (`if offsets is not None: raise`) never reaches the fake of a
    call that works."""
    positional = [p for p in function.params if p.kind == "positional"]
    exp_positional = [e for e in expected if not e[2]]
    exp_kwonly = {e[0] for e in expected if e[2]}
    refused = _refused_by_kernels(op)
    for index, (exp_name, exp_default, _kw) in enumerate(exp_positional):
        if index >= len(positional):
            if exp_default == (True, None) and exp_name in refused:
                continue
            return f"is missing parameter {exp_name!r} (torch passes it by position)"
        param = positional[index]
        if exp_default[0] and not param.has_default:
            return _no_default(param.name, exp_default[1])
    for extra in positional[len(exp_positional):]:
        if extra.name not in exp_kwonly and not extra.has_default:
            return f"has parameter {extra.name!r} the schema does not have"
    return None


def _keyword_problem(function: Function, expected) -> str | None:
    """What breaks the keyword-only part: torch passes keyword-only arguments by name."""
    positional = [p for p in function.params if p.kind == "positional"]
    kwonly = {p.name: p for p in function.params if p.kind == "kwonly"}
    exp_kwonly = {e[0]: e for e in expected if e[2]}
    for exp_name, exp_default, _kw in exp_kwonly.values():
        param = kwonly.get(exp_name) or next((p for p in positional if p.name == exp_name), None)
        if param is None:
            return f"is missing keyword-only parameter {exp_name!r} (torch passes it by name)"
        if exp_default[0] and not param.has_default:
            return _no_default(param.name, exp_default[1])
    for extra, param in kwonly.items():
        if extra not in exp_kwonly and not param.has_default:
            return f"has keyword-only parameter {extra!r} the schema does not have"
    return None


def _no_default(name: str, default) -> str:
    shown = "[" + ", ".join(map(repr, default)) + "]" if isinstance(default, (tuple, list)) else repr(default)
    return (f"gives {name!r} no default, the schema {shown} (torch omits an argument equal to its default: "
            "TypeError)")


def _refused_by_kernels(op: LintOp) -> set[str]:
    """Parameters whose non-None value every kernel of the op raises on (none when no kernel is read)."""
    kernels = _kernel_functions(op)
    if not kernels:
        return set()
    return set.intersection(*(set(k.refuses) for k in kernels))


def _render_expected(expected) -> list[str]:
    out = []
    star = False
    for exp_name, default, kwonly in expected:
        if kwonly and not star:
            out.append("*")
            star = True
        value = default[1]
        shown = "[" + ", ".join(map(repr, value)) + "]" if isinstance(value, (tuple, list)) else repr(value)
        out.append(exp_name + (f"={shown}" if default[0] else ""))
    return out


def _expected_params(op: LintOp):
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


FAKE_SIGNATURE = lint_rule(
    "OPG305", "fake-signature-mismatch", ERROR,
    "the fake/Meta kernel cannot take the op's arguments, or takes them in another order",
    """
torch calls a fake or Meta kernel with the op's positional arguments by position, its keyword-only
arguments by name, and leaves out trailing arguments equal to their schema default. So a fake breaks
with a TypeError when it has fewer positional parameters than the schema, lacks a default the schema
has, lacks a keyword-only parameter, or requires one the schema does not have; and it computes a wrong
result without an error when its parameters are the schema's in another order (`def _(x, dtype, scale)`
for `(Tensor x, float scale, ScalarType dtype)`: `dtype` receives the scale). Renamed positional
parameters and differing default values are not reported (torch never passes those by name), nor a
missing trailing `=None` argument that the kernel refuses otherwise (`if offsets is not None: raise`).
Copy the schema's parameter list (for custom_op, the kernel's).
""",
    valid=[lib_example("""
        lib.define("scale(Tensor x, float s=2.0) -> Tensor")


        @torch.library.register_fake("myops::scale")
        def _(input, factor=2.0):
            return torch.empty_like(input)
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale(Tensor x, float s=2.0) -> Tensor")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """), 9), Invalid(lib_example("""
        lib.define("quant(Tensor x, float scale, ScalarType dtype) -> Tensor")


        @torch.library.register_fake("myops::quant")
        def _(x, dtype, scale):
            return torch.empty_like(x, dtype=dtype)
    """), 9)],
    check=_fake_signature_mismatch, scope="op",
)


def _todo_fake(op: LintOp, project: Project):
    for registration in op.fakes:
        function = registration.function
        if function is None or function.todo is None:
            continue
        kind = "Meta kernel" if registration.key == "Meta" else "fake"
        todo = function.todo
        yield diag(TODO_FAKE, f"the {kind} {function.name}() of {op.name} is a TODO skeleton ({todo.what}); write "
                   "its shape/dtype rule", Where(function.where.path, todo.line, todo.column))


TODO_FAKE = lint_rule(
    "OPG306", "todo-fake", ERROR, "a TODO fake skeleton is still registered: write the shape rule",
    """
`opgen new` writes a fake skeleton that raises when the spec has no shape semantics, so graph-entry
tests fail loudly. Detected: a fake/Meta kernel whose body raises `NotImplementedError` at its top
level, raises an error whose message contains "TODO", or carries the marker comment
`# opgen: TODO-fake`. A `NotImplementedError` for one unsupported case (inside an `if`) is fine.
Replace the body with the shape/dtype rule.
""",
    valid=[_fake("return torch.empty_like(x)\n")],
    invalid=[Invalid(_fake('raise NotImplementedError("fake for myops::rows: write the shape rule")\n'), 10)],
    check=_todo_fake, scope="op",
)


def _capture_unsafe(op: LintOp, project: Project):
    for registration in op.kernels:
        function = registration.function
        if function is None or registration.key not in CAPTURE_KEYS:
            continue
        # a parameter named like a host tensor another kernel of the file makes and returns (a CPU handle
        # passed from one op to the next) is that tensor: reading it is no sync
        handed = project.host_returns(function.where.path)
        for finding in unique(function.capture_unsafe):
            if finding.param and finding.param in handed and function.param(finding.param) is not None:
                continue
            yield diag(CAPTURE_UNSAFE, f"{registration.key} kernel of {op.name} uses {finding.what}, which fails "
                       "under graph capture; keep random state and scalars on the device",
                       Where(function.where.path, finding.line, finding.column))


CAPTURE_UNSAFE = lint_rule(
    "OPG307", "capture-unsafe-kernel", WARNING, "a device kernel uses random ops or host syncs: not capture-safe",
    """
Kernels registered for PrivateUse1 (NPU) or CUDA run under graph capture (npugraph_ex, CUDA graphs):
random-number ops are not supported there, and host syncs (`.item()`, `.cpu()`, `.tolist()`,
`synchronize()`, `nonzero()`) fail ("Not allow to synchronize captured-stream"). Pass random values in
as tensors and keep scalars on the device.
""",
    valid=[lib_example("""
        lib.define("noise(Tensor x, Tensor r) -> Tensor")


        def noise(x, r):
            return x + r


        lib.impl("noise", noise, "PrivateUse1")
        lib.impl("noise", lambda x, r: torch.empty_like(x), "Meta")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("noise(Tensor x) -> Tensor")


        def noise(x):
            return x + torch.randn_like(x)


        lib.impl("noise", noise, "PrivateUse1")
    """), 9)],
    check=_capture_unsafe, scope="op",
)


def _declares_alias(op: LintOp) -> bool:
    """Whether the op may return an input by contract: its schema returns an alias, or it is tagged
    inplace/out (torch infers `-> Tensor(a!)` from the tag), or its tags cannot be read."""
    tags = op.definition.tags
    return (op.schema is not None and any(r.alias for r in op.schema.returns)) or tags is None \
        or bool(set(tags) & {"inplace", "out"})


def _real_kernels(op: LintOp) -> list[Function]:
    """The kernels that run for real and whose output torch checks for aliasing: not fakes, Meta or
    CompositeImplicitAutograd kernels (decomposed before the check), each once."""
    found = {id(r.function): r.function for r in op.kernels if r.function is not None
             and isinstance(r.key, str) and r.key not in ("Meta", "fake", "CompositeImplicitAutograd")}
    if op.definition.kernel is not None:
        found.setdefault(id(op.definition.kernel), op.definition.kernel)
    return list(found.values())


def _kernel_returns_input(op: LintOp, project: Project):
    definition = op.definition
    if definition.fake_from_kernel or _declares_alias(op):
        return  # a triton_op is traced, not called as a black box
    if definition.style == "custom_op" and definition.api != "direct_register_custom_op":
        what, why = f"custom_op {op.name}", "torch raises when the op is called (outputs must not alias inputs)"
    elif is_test_module(definition.where.path):
        return  # torch.compile's check: an op a test defines may only have its schema read, never be compiled
    elif op.seen and (op.schema is not None or definition.api == "direct_register_custom_op"):
        what, why = op.name, ("its schema declares no alias, so torch.compile's first-call check refuses it "
                              "(\"must not also be an input\": a warning today, an error under CI=1 and in "
                              "later torch) and a compiled caller writing the output also writes the input")
    else:
        return  # no schema seen: it may declare the alias
    # a fake returning the same input is OPG303's finding, which names the kernel too (one contract broken)
    by_fakes = {f.param for _r, fake, _kind in _fakes(op) for f in fake.returned_params}
    for kernel in _real_kernels(op):
        for finding in unique(kernel.returned_params):
            if finding.param in by_fakes:
                continue
            yield diag(KERNEL_RETURNS_INPUT, f"the kernel {kernel.name}() of {what} returns its input "
                       f"{finding.param!r}; {why}: return nothing from an in-place op, or a new tensor",
                       Where(kernel.where.path, finding.line, finding.column))


KERNEL_RETURNS_INPUT = lint_rule(
    "OPG308", "kernel-returns-input", ERROR,
    "a kernel returns one of its inputs while the schema declares no alias: return a new tensor",
    """
An op whose schema declares no alias promises outputs that are new tensors. torch.library.custom_op
checks it on every call: the op raises "The output of this custom operator (1) must not also be an
input to this custom operator", also for an in-place op that returns the tensor it mutated
(`mutates_args=("x",)` and `return x`). A Library op (and vLLM's direct_register_custom_op, which defines
through a Library) is checked at its first call under torch.compile: a warning today, an error under
`CI=1` and in later torch; either way a compiled caller that writes the output writes the input too.
Return nothing from an in-place op (`-> None` / `-> ()`), or return a new tensor (`x.clone()`); or
declare the alias (`Tensor(a!) x -> Tensor(a!)` with `torch.Tag.inplace`, `Tensor(a) x -> Tensor(a)`).
Not reported for kernels at CompositeImplicitAutograd (decomposed before the check) or a triton_op, nor for
a Library op a test module defines (its harm is torch.compile's check, and the test may never compile it).
""",
    valid=[code_example("""
        import torch


        @torch.library.custom_op("myops::add_one_", mutates_args=("x",))
        def add_one_(x: torch.Tensor) -> None:
            x.add_(1)
    """), code_example("""
        import torch


        @torch.library.custom_op("myops::scale_", mutates_args=("x",), tags=torch.Tag.inplace)
        def scale_(x: torch.Tensor, s: float) -> torch.Tensor:
            x.mul_(s)
            return x
    """)],
    invalid=[Invalid(code_example("""
        import torch


        @torch.library.custom_op("myops::add_one_", mutates_args=("x",))
        def add_one_(x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x
    """), 7), Invalid(lib_example("""
        lib.define("ident(Tensor x) -> Tensor")


        def ident(x):
            return x


        lib.impl("ident", ident, "CPU")
        lib.impl("ident", lambda x: torch.empty_like(x), "Meta")
    """), 9)],
    check=_kernel_returns_input, scope="op",
)


def _out_never_written(op: LintOp, project: Project):
    definition = op.definition
    for registration in op.kernels:
        function = registration.function
        if function is None or registration.key in ("Meta", "fake") or not function.discarded:
            continue
        for param in function.discarded:
            if op.schema is not None:
                argument = _argument_for(op.schema, function, param)
                if argument is None or not argument.is_write:
                    continue
            elif not (isinstance(definition.mutates_args, tuple) and param in definition.mutates_args):
                continue
            yield diag(OUT_NEVER_WRITTEN, f"kernel {function.name}() of {op.name} re-binds {param!r} before writing "
                       f"it, so the tensor the caller passes as {param!r} is never written (the schema says the op "
                       f"writes it); write the result into it: {param}.copy_(result), or out={param}",
                       function.where)


OUT_NEVER_WRITTEN = lint_rule(
    "OPG309", "written-argument-discarded", ERROR,
    "a kernel re-binds an argument the schema marks written (`out`) before writing it",
    """
An `.out` overload (`foo.out(..., *, Tensor(a!) out) -> Tensor(a!)`) promises to write `out`: callers,
and runtimes that pre-allocate the buffer (ExecuTorch's out variants, memory planning), read the result
from the tensor they passed. A kernel whose first statement about `out` re-binds it (`out = x.clone()`)
computes into a new tensor and leaves the caller's untouched: a wrong result without an error. Write
into it instead: `out.copy_(result)`, `torch.add(a, b, out=out)`, `out[...] = ...`. A re-binding
through a view of the argument (`out = out.view(...)`) still writes it and is fine.
""",
    valid=[lib_example("""
        lib.define("double.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", tags=(torch.Tag.out,))


        def double_out(x, *, out):
            out.copy_(x * 2)
            return out


        lib.impl("double.out", double_out, "CPU")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("double.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", tags=(torch.Tag.out,))


        def double_out(x, *, out):
            out = x * 2
            return out


        lib.impl("double.out", double_out, "CPU")
    """), 8)],
    check=_out_never_written, scope="op",
)


def _kernel_returns_for_void_op(op: LintOp, project: Project):
    schema = op.schema
    if schema is None or schema.returns:
        return
    for function in _kernel_functions(op):
        for finding in unique(function.returned_params):
            yield diag(VOID_KERNEL_RETURNS, f"the kernel {function.name}() of {op.name} returns {finding.param!r}, but "
                       "the schema returns nothing ('-> ()'): torch raises \"Expected ... to return None\" at the first "
                       "call; drop the return (the caller keeps the tensor it passed)",
                       Where(function.where.path, finding.line, finding.column))


VOID_KERNEL_RETURNS = lint_rule(
    "OPG310", "void-kernel-returns-value", ERROR, "a kernel returns a value although its op returns nothing",
    """
A kernel registered for an op whose schema returns nothing (`-> ()`) must return None: torch checks
the result and raises "Expected PythonKernelHolder ... to return None" at the first call, in eager
mode and when compiled. It happens when `-> Tensor(a!)` is rewritten to `-> ()` (opgen's default for
an in-place op without `tags: [inplace]`) and the kernel kept its `return x`. Drop the return: the
caller already holds the tensor it passed in. (Lint sees returns of the kernel's parameters.)
""",
    valid=[lib_example("""
        lib.define("scale_(Tensor(a!) x, float s) -> ()")


        def scale_(x, s):
            x.mul_(s)


        lib.impl("scale_", scale_, "CPU")
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("scale_(Tensor(a!) x, float s) -> ()")


        def scale_(x, s):
            x.mul_(s)
            return x


        lib.impl("scale_", scale_, "CPU")
    """), 10)],
    check=_kernel_returns_for_void_op, scope="op", supersedes=(KERNEL_RETURNS_INPUT,),
)


def _tensor_truth_tests(op: LintOp, project: Project):
    schema = op.schema or inferred_schema(op.definition)
    if schema is None:
        return
    functions = [("kernel", function) for function in _kernel_functions(op)]
    functions += [(kind, function) for _, function, kind in _fakes(op)]
    seen = set()
    for kind, function in functions:
        for finding in unique(function.truth_tests):
            argument = _argument_for(schema, function, finding.param)
            if argument is None or not _single_tensor(argument.type):
                continue  # a bool, int or list argument: its truth value is what the code means
            where = Where(function.where.path, finding.line, finding.column)
            if (where.path, where.line, where.column) in seen:
                continue
            seen.add((where.path, where.line, where.column))
            optional = "an optional tensor" if str(argument.type).endswith("?") else "a tensor"
            yield diag(TENSOR_TRUTH_TEST, f"the {kind} {function.name}() of {op.name} tests the truth of {finding.param!r}, "
                       f"{optional} ({argument.type}): that is bool() of its values (\"Boolean value of Tensor with "
                       "more than one value is ambiguous\", a data-dependent branch under torch.compile, a zero "
                       f"tensor taken as absent), not whether it was given; test `{finding.param} is not None`",
                       where)


def _single_tensor(type_) -> bool:
    """`Tensor` or `Tensor?` (a list of tensors is tested for emptiness, which is what such code means)."""
    return str(type_).split("(")[0].rstrip("?") == "Tensor"


TENSOR_TRUTH_TEST = lint_rule(
    "OPG311", "tensor-truth-test", ERROR, "a kernel or fake tests a tensor argument's truth (`if bias:`)",
    """
`if bias:` on an optional tensor argument means "if a bias was given" to its author, but for a tensor it
is `bool(bias)`: the tensor's value. With more than one element it raises "Boolean value of Tensor with
more than one value is ambiguous"; with one element it takes the branch by the value (a zero bias is
taken as no bias); in a fake, and under torch.compile, it is a data-dependent branch (a graph break or
a GuardOnDataDependentSymNode error). Test `bias is not None` instead. The schema decides which
arguments are tensors: the same test on a `bool` or `int` argument (`if relu:`), or on a `Tensor[]`
(`if tensors:`, emptiness), is what it looks like and is not reported.
""",
    valid=[lib_example("""
        lib.define("linear(Tensor x, Tensor w, Tensor? bias=None, bool relu=False) -> Tensor")


        def linear(x, w, bias=None, relu=False):
            y = x @ w.t()
            if bias is not None:
                y = y + bias
            return y.relu() if relu else y


        lib.impl("linear", linear, "CPU")


        @torch.library.register_fake("myops::linear")
        def _(x, w, bias=None, relu=False):
            return x.new_empty(x.shape[0], w.shape[0])
    """)],
    invalid=[Invalid(lib_example("""
        lib.define("linear(Tensor x, Tensor w, Tensor? bias=None) -> Tensor")


        def linear(x, w, bias=None):
            y = x @ w.t()
            if bias:
                y = y + bias
            return y


        lib.impl("linear", linear, "CPU")


        @torch.library.register_fake("myops::linear")
        def _(x, w, bias=None):
            return x.new_empty(x.shape[0], w.shape[0])
    """), 10)],
    check=_tensor_truth_tests, scope="op",
)
