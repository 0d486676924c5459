"""Op YAML rules (OPG4xx): op_plugin / native_functions `func:` entries, one schema at a time. Each
rule's check stands right above it; `opgen.lint.yaml_ops` reads the file and runs them."""

from __future__ import annotations

from ...contract import ERROR
from ...schema.model import Schema
from .base import Invalid, code_example, lint_rule


def _yaml_out_convention(schema: Schema):
    """torchgen's rule for `.out` overloads: it writes its out tensors and returns all of them (or nothing).
    Yields the problem's text; the caller places it."""
    if schema.overload != "out" and not schema.overload.endswith("_out"):
        return
    written = [a for a in schema.arguments if a.is_write]
    if not written:
        named = [a.name for a in schema.kwarg_only if a.is_tensor] or ["out"]
        yield (f"an .out overload writes no argument; annotate the out tensor: 'Tensor(a!) {named[0]}' "
               "after '*', returned as 'Tensor(a!)'")
        return
    outs = [a for a in written if a.kwarg_only]
    if not outs or not schema.returns:
        return
    returned = {letter for r in schema.returns if r.alias for letter in r.alias.before}
    missing = [a.name for a in outs if not set(a.alias.before) & returned]
    if missing:
        yield (f"out tensor(s) {', '.join(map(repr, missing))} must also be returned as 'Tensor(x!)' "
               "(or return nothing: '-> ()')")


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
    valid=[code_example("""
        custom:
          - func: npu_foo.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
            op_api: all_version
    """)],
    invalid=[Invalid(code_example("""
        custom:
          - func: npu_foo.out(Tensor self, *, Tensor out) -> Tensor
            op_api: all_version
    """), 2)],
    check=_yaml_out_convention, scope="yaml",
)
