"""The lint-only rules, each with its VALID and INVALID examples (Fixit style).

The rules are registered in the one catalogue, `opgen.contract.RULES`, so `opgen explain --code` and
`opgen lint --explain` read the same text; schema-level problems are not repeated here: the lint
reports them through `opgen.contract.check_schema` / `check_ops` and the schema parser (OPG0xx, OPG1xx).

An INVALID example names the 1-based line the rule must fire on; tests/test_lint_rules.py runs every
example of every rule, so the documentation and the tests are the same text.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from ..contract import (  # the contract rules the lint reports as they are
    ERROR,
    NOT_INFERRABLE,
    SCHEMA_INVALID,
    SIDE_EFFECT_ONLY,
    WARNING,
    Rule,
    rule,
)

__all__ = ["LINT_RULES", "NOT_INFERRABLE", "SCHEMA_INVALID", "SIDE_EFFECT_ONLY", "Invalid", "LintRule"]


@dataclass(frozen=True)
class Invalid:
    source: str
    line: int
    fixed: str | None = None  # what `--fix` must turn `source` into, when the rule is fixable


@dataclass(frozen=True)
class LintRule:
    rule: Rule
    valid: tuple[str, ...] = ()
    invalid: tuple[Invalid, ...] = ()
    extra: dict = field(default_factory=dict)
    opt_in: bool = False  # reported only when selected by its own code (`--select OPG207`), not by a prefix


LINT_RULES: dict[str, LintRule] = {}



def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


_LIB = _code("""
    import torch
    from torch.library import Library

    lib = Library("myops", "FRAGMENT")
""")


def _lib(body: str) -> str:
    """An example that starts with the Library boilerplate above (4 lines); `body` starts on line 5."""
    return _LIB + _code(body)


def lint_rule(code, name, severity, summary, explanation, *, valid=(), invalid=(), fixable=False,
              opt_in=False) -> Rule:
    invalid = tuple(invalid)
    valid = tuple(valid)
    registered = rule(code, name, severity, summary, explanation,
                      bad=invalid[0].source.strip() if invalid else "", good=valid[0].strip() if valid else "",
                      fixable=fixable)
    LINT_RULES[code] = LintRule(registered, valid, invalid, opt_in=opt_in)
    return registered



SYNTAX_ERROR = lint_rule(
    "OPG200", "syntax-error", ERROR, "the file does not parse as Python",
    """
opgen lint reads registrations with Python's own parser; a file it cannot parse is reported once, at
the position the parser gives, and nothing else is checked in it. Fix the syntax error.
""",
    valid=[_lib('lib.define("scale(Tensor x) -> Tensor")\n')],
    invalid=[Invalid(_lib('lib.define("scale(Tensor x) -> Tensor"\nlib.impl("scale", None, "CPU")\n'), 5)],
)

NAMESPACE_IN_DEFINE = lint_rule(
    "OPG201", "namespace-in-define", ERROR, "`Library.define` schema carries a namespace: drop the `ns::` prefix",
    """
`Library(ns, ...).define("ns::f(...)")` is accepted, but torch records the op as `ns::ns::f`, and
clearing the op cache at exit then fails ("too many values to unpack"); a different namespace is
refused outright. The Library already names the namespace: write `define("f(...)")`.
`--fix` removes the prefix when it is the Library's own namespace.
""",
    valid=[_lib('lib.define("scale(Tensor x, float s) -> Tensor")\n')],
    invalid=[Invalid(_lib('lib.define("myops::scale(Tensor x, float s) -> Tensor")\n'), 5,
                     fixed=_lib('lib.define("scale(Tensor x, float s) -> Tensor")\n'))],
    fixable=True,
)

IMPL_UNDEFINED = lint_rule(
    "OPG202", "impl-undefined", ERROR, "a kernel or fake is registered for an op no linted file defines",
    """
A kernel for `ns::f` registered next to the definitions of namespace `ns`, where no linted file
defines `f` but one defines a close name, is a typo: torch defers the registration and never uses
it. To stay quiet about ops defined in C++ or in files you did not lint, it only fires when the same
file defines ops of that namespace and a defined name is close to the registered one.
""",
    valid=[_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CPU")
        lib.impl("scale", lambda x: torch.empty_like(x), "Meta")
    """)],
    invalid=[Invalid(_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("sclae", lambda x: x * 2, "CPU")
    """), 6)],
)

OVERLOAD_LOST = lint_rule(
    "OPG203", "overload-lost", ERROR, "`impl(\"f\", ...)` for an op defined only as `f.overload`: name the overload",
    """
`define("f.out(...)")` returns "f", without the overload; `impl("f", ...)` and `register_fake("ns::f")`
then target the default overload `f`, which does not exist, and the kernel is never used.
Write `impl("f.out", ...)`.
""",
    valid=[_lib("""
        lib.define("f.out(Tensor x, *, Tensor(a!) out) -> ()")
        lib.impl("f.out", lambda x, *, out: out.copy_(x), "CPU")
    """)],
    invalid=[Invalid(_lib("""
        lib.define("f.out(Tensor x, *, Tensor(a!) out) -> ()")
        lib.impl("f", lambda x, *, out: out.copy_(x), "CPU")
    """), 6)],
)

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
    valid=[_code("""
        from torch.library import Library

        lib = Library("myops", "IMPL", "PrivateUse1")
    """)],
    invalid=[Invalid(_code("""
        from torch.library import Library

        lib = Library("myops", "IMPL", "NPU")
    """), 3, fixed=_code("""
        from torch.library import Library

        lib = Library("myops", "IMPL", "PrivateUse1")
    """))],
    fixable=True,
)

DUPLICATE_DEF = lint_rule(
    "OPG205", "duplicate-def-library", ERROR, "`Library(ns, \"DEF\")` twice for one namespace: use \"FRAGMENT\"",
    """
Only one `Library(ns, "DEF")` (TORCH_LIBRARY) may exist per namespace; the second raises "Only a single
TORCH_LIBRARY can be used to register the namespace" as soon as both modules are imported. Use
`Library(ns, "FRAGMENT")` in every other file that adds definitions. Module-level libraries only
(a `_scoped_library` or a Library made inside a function is short-lived).
""",
    valid=[_code("""
        from torch.library import Library

        defs = Library("myops", "DEF")
        more = Library("myops", "FRAGMENT")
    """)],
    invalid=[Invalid(_code("""
        from torch.library import Library

        defs = Library("myops", "DEF")
        more = Library("myops", "DEF")
    """), 4)],
)

MUTATES_ARGS_UNKNOWN_PARAM = lint_rule(
    "OPG206", "mutates-args-unknown-name", ERROR, "`mutates_args` names something that is not a parameter",
    """
`custom_op(..., mutates_args=("y",))` where the function has no parameter `y` fails at import with
"in mutates_args were not found in the custom op's signature"; a plain string other than "unknown"
(`mutates_args="x"`) is refused too (write `("x",)`).
""",
    valid=[_code("""
        import torch


        @torch.library.custom_op("myops::fill_", mutates_args=("x",))
        def fill_(x: torch.Tensor, v: float) -> None:
            x.fill_(v)
    """)],
    invalid=[Invalid(_code("""
        import torch


        @torch.library.custom_op("myops::fill_", mutates_args=("y",))
        def fill_(x: torch.Tensor, v: float) -> None:
            x.fill_(v)
    """), 4)],
)

MUTATES_ARGS_UNKNOWN = lint_rule(
    "OPG207", "mutates-args-unknown", WARNING, "`mutates_args=\"unknown\"`: every tensor argument counts as written (opt-in)",
    """
`mutates_args="unknown"` is legal and documented: it declares EVERY tensor argument as written, so
functionalization copies all of them back after each call, the compiler cannot reorder around the
op, and a write to the wrong tensor goes unnoticed. It is a cost, not a bug, so the rule is opt-in:
`--select OPG207` (a prefix such as OPG2 does not enable it). Name the parameters the kernel writes:
`mutates_args=("cache",)`, or `()`.
""",
    valid=[_code("""
        import torch


        @torch.library.custom_op("myops::double", mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @double.register_fake
        def _(x):
            return torch.empty_like(x)
    """)],
    invalid=[Invalid(_code("""
        import torch


        @torch.library.custom_op("myops::double", mutates_args="unknown")
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        @double.register_fake
        def _(x):
            return torch.empty_like(x)
    """), 4)],
    opt_in=True,
)

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
""",
    valid=[_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CPU")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """)],
    invalid=[Invalid(_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: x * 2, "CPU")
    """), 5)],
)

META_AND_FAKE = lint_rule(
    "OPG209", "meta-and-fake", WARNING, "both a Meta kernel and `register_fake` for one op: keep only register_fake",
    """
With both, FakeTensorMode uses the fake while meta tensors use whichever Meta kernel was registered
last, so the two silently disagree as soon as one is edited; with `allow_override=False` torch refuses
the pair. `register_fake` serves both: delete the Meta kernel.
""",
    valid=[_lib("""
        lib.define("scale(Tensor x) -> Tensor")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """)],
    invalid=[Invalid(_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.impl("scale", lambda x: torch.empty_like(x), "Meta")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """), 9)],
)

DUPLICATE_OP = lint_rule(
    "OPG210", "duplicate-op-definition", ERROR, "the same op (name and overload) is defined twice",
    """
`define("f(...)")` for an op that is already defined fails at import: "Tried to register an operator
(ns::f) with the same name and overload name multiple times", whether both definitions are in one
file or in two modules of the package. Delete one, or give it another overload name (`f.out`).
Ops are matched by namespace, name and overload; ops without a readable namespace by package.
""",
    valid=[_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.define("scale.out(Tensor x, *, Tensor(a!) out) -> ()")
    """)],
    invalid=[Invalid(_lib("""
        lib.define("scale(Tensor x) -> Tensor")
        lib.define("scale(Tensor x) -> Tensor")
    """), 6)],
)

UNDECLARED_MUTATION = lint_rule(
    "OPG301", "undeclared-mutation", ERROR, "the kernel writes a tensor argument the schema does not mark `(a!)`",
    """
A kernel that writes an argument (`x.add_()`, `x.copy_()`, `x[...] = v`, `x += v`, `out=x`) while the
schema says it does not is silently wrong under torch.compile: the "functional" op is dead-code
eliminated, or its write lands in a copy (npugraph_ex clones inputs). Declare it: `Tensor(a!) x` in
the schema, or add the name to `mutates_args`. Only certain writes are reported (to the parameter
itself, a slice, a view or `.data` of it, and not after the parameter is re-bound). `--fix` adds the
annotation to a literal `define()` schema.
""",
    valid=[_lib("""
        lib.define("fill(Tensor(a!) x, float v) -> ()")


        def fill(x, v):
            x.fill_(v)


        lib.impl("fill", fill, "CPU")
    """)],
    invalid=[Invalid(_lib("""
        lib.define("fill(Tensor x, float v) -> ()")


        def fill(x, v):
            x.fill_(v)


        lib.impl("fill", fill, "CPU")
    """), 9, fixed=_lib("""
        lib.define("fill(Tensor(a!) x, float v) -> ()")


        def fill(x, v):
            x.fill_(v)


        lib.impl("fill", fill, "CPU")
    """))],
    fixable=True,
)


def _fake(body: str) -> str:
    """A Library op `rows(Tensor x) -> Tensor` and its fake; `body` is the fake's body, from line 10."""
    return _lib("""
        lib.define("rows(Tensor x) -> Tensor")


        @torch.library.register_fake("myops::rows")
        def _(x):
    """) + textwrap.indent(_code(body), "    ")


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
)

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
)

FAKE_ALLOC_NO_DEVICE = lint_rule(
    "OPG304", "fake-alloc-without-device", ERROR,
    "a fake/Meta kernel allocates without `device=`: pass the input's device",
    """
`torch.empty(shape)` in a fake creates a CPU tensor; the traced graph then has the wrong device
("tensor's device must be `meta`") and capture fails. Use `x.new_empty(shape)`,
`torch.empty_like(x)`, or `torch.empty(shape, device=x.device, dtype=x.dtype)`.
""",
    valid=[_fake("return torch.empty(x.shape[0], device=x.device, dtype=x.dtype)\n")],
    invalid=[Invalid(_fake("return torch.empty(x.shape[0], dtype=x.dtype)\n"), 10)],
)

FAKE_SIGNATURE = lint_rule(
    "OPG305", "fake-signature-mismatch", ERROR,
    "the fake/Meta kernel cannot take the op's arguments (TypeError when torch calls it)",
    """
torch calls a fake or Meta kernel with the op's positional arguments by position, its keyword-only
arguments by name, and leaves out trailing arguments equal to their schema default. So a fake breaks
with a TypeError when it has fewer positional parameters than the schema, lacks a default the schema
has, lacks a keyword-only parameter, or requires one the schema does not have. Renamed positional
parameters and differing default values are not reported (torch never passes those by name).
Copy the schema's parameter list (for custom_op, the kernel's).
""",
    valid=[_lib("""
        lib.define("scale(Tensor x, float s=2.0) -> Tensor")


        @torch.library.register_fake("myops::scale")
        def _(input, factor=2.0):
            return torch.empty_like(input)
    """)],
    invalid=[Invalid(_lib("""
        lib.define("scale(Tensor x, float s=2.0) -> Tensor")


        @torch.library.register_fake("myops::scale")
        def _(x):
            return torch.empty_like(x)
    """), 9)],
)

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
)

CAPTURE_UNSAFE = lint_rule(
    "OPG307", "capture-unsafe-kernel", WARNING, "a device kernel uses random ops or host syncs: not capture-safe",
    """
Kernels registered for PrivateUse1 (NPU) or CUDA run under graph capture (npugraph_ex, CUDA graphs):
random-number ops are not supported there, and host syncs (`.item()`, `.cpu()`, `.tolist()`,
`synchronize()`, `nonzero()`) fail ("Not allow to synchronize captured-stream"). Pass random values in
as tensors and keep scalars on the device.
""",
    valid=[_lib("""
        lib.define("noise(Tensor x, Tensor r) -> Tensor")


        def noise(x, r):
            return x + r


        lib.impl("noise", noise, "PrivateUse1")
        lib.impl("noise", lambda x, r: torch.empty_like(x), "Meta")
    """)],
    invalid=[Invalid(_lib("""
        lib.define("noise(Tensor x) -> Tensor")


        def noise(x):
            return x + torch.randn_like(x)


        lib.impl("noise", noise, "PrivateUse1")
    """), 9)],
)

KERNEL_RETURNS_INPUT = lint_rule(
    "OPG308", "custom-op-returns-input", ERROR, "a custom_op kernel returns one of its inputs: return a new tensor",
    """
torch.library.custom_op refuses outputs that alias inputs: calling the op raises "The output of this
custom operator (1) must not also be an input to this custom operator", also for an in-place op
that returns the tensor it mutated (`mutates_args=("x",)` and `return x`). Return nothing from an
in-place op (`-> None`), or return a new tensor (`x.clone()`).
""",
    valid=[_code("""
        import torch


        @torch.library.custom_op("myops::add_one_", mutates_args=("x",))
        def add_one_(x: torch.Tensor) -> None:
            x.add_(1)
    """)],
    invalid=[Invalid(_code("""
        import torch


        @torch.library.custom_op("myops::add_one_", mutates_args=("x",))
        def add_one_(x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x
    """), 7)],
)

YAML_OUT_CONVENTION = lint_rule(
    "OPG401", "yaml-out-convention", ERROR,
    "op_plugin `.out` entry: the out tensor must be written `(a!)` and returned",
    """
torchgen (and torchnpugen for op_plugin_functions.yaml) generates functionalization and the C++
signature from the `func:` schema. An `.out` overload must write its out tensors (keyword-only,
`Tensor(a!) out`) and return every one of them as `Tensor(a!)`, or return nothing:
`foo.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)`. An `.out` entry that writes nothing is
read as a functional op, and functionalization silently drops the write.
""",
    valid=[_code("""
        custom:
          - func: npu_foo.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
            op_api: all_version
    """)],
    invalid=[Invalid(_code("""
        custom:
          - func: npu_foo.out(Tensor self, *, Tensor out) -> Tensor
            op_api: all_version
    """), 2)],
)
