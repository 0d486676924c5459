"""Every schema of the installed torch's native_functions.yaml, read by opgen and by torch."""

from __future__ import annotations

import pytest
import torch
from schema_oracle import assert_agrees, native_schemas, opgen_view, torch_view

from opgen.schema import SchemaError, parse_schema

NATIVE = native_schemas()


def test_native_functions_yaml_is_the_real_one():
    # Guards against an empty or truncated read making every test below pass vacuously.
    assert len(NATIVE) > 2000
    assert any(s.startswith("add.Tensor(") for s in NATIVE)


def test_every_native_schema_agrees_with_torch():
    failures = []
    for text in NATIVE:
        try:
            assert_agrees(text)
        except (AssertionError, RuntimeError, SchemaError) as error:  # one report beats 2600 test ids
            failures.append(f"{text}\n    {type(error).__name__}: {error}")
    assert not failures, f"{len(failures)} of {len(NATIVE)} disagree:\n" + "\n".join(failures[:20])


def _custom_op_looking(texts):
    """Schemas a custom op could define: no tensor-list alias quirks, no ATen-only types."""
    picked = []
    for text in texts:
        schema = parse_schema(text)
        if schema.varargs or schema.varret:
            continue
        picked.append(schema)
    return picked[::25]


@pytest.mark.parametrize("schema", _custom_op_looking(NATIVE), ids=lambda s: s.op_name)
def test_library_define_accepts_canonical_text(schema):
    with torch.library._scoped_library("opgen_oracle", "FRAGMENT") as lib:
        lib.define(schema.signature(with_namespace=False))
        op = getattr(torch.ops.opgen_oracle, schema.name)
        defined = getattr(op, schema.overload_or_default)._schema
        assert torch_view(defined)[1:] == opgen_view(schema)[1:]
        assert defined.name == f"opgen_oracle::{schema.name}"


def test_oracle_detects_a_disagreement():
    # The comparison must be able to fail: a schema read differently by the two sides.
    mine = parse_schema("f(Tensor(a!) x, int[2] k=1) -> Tensor")
    theirs = torch._C.parse_schema("f(Tensor(a) x, int[2] k=1) -> Tensor")
    assert opgen_view(mine) != torch_view(theirs)
    theirs = torch._C.parse_schema("f(Tensor(a!) x, int[2] k=2) -> Tensor")
    assert opgen_view(mine) != torch_view(theirs)
    theirs = torch._C.parse_schema("f(Tensor(a!) x, SymInt[2] k=1) -> Tensor")
    assert opgen_view(mine) != torch_view(theirs)
