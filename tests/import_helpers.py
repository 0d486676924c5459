"""Round-trip helpers for tests/test_import.py: a bundled example's examples as an `--inputs` file, and both specs'
semantics evaluated on the same calls (the rules compared up to printing)."""

from __future__ import annotations

import json
import math
import numbers

import torch

from opgen.importer.describe import _value_json
from opgen.importer.examples import make_call
from opgen.render.fakes import rule_code


def inputs_text(spec) -> str:
    """{ns::op: [examples]} as JSON (a YAML subset `opgen import --inputs` reads)."""
    found = {}
    for op in spec.ops:
        name = f"{spec.namespace}::{op.schema.name}" + (f".{op.schema.overload}" if op.schema.overload else "")
        found[name] = [{k: _value_json(v) for k, v in example.values.items()} for example in op.examples]
    return json.dumps(found)


def semantics(op):
    code = rule_code(op, "op")
    if not code.semantics_def:
        return None
    scope = {"torch": torch, "Number": numbers.Number, "math": math}
    exec("\n    ".join([code.semantics_def, *code.semantics_lines]), scope)  # noqa: S102
    return scope["op_semantics"]


def evaluated(op, examples) -> list:
    """Per example call, each output's (shape or None, dtype) by `op`'s rules."""
    function = semantics(op)
    found = []
    for example in examples:
        call = make_call(example)
        found.append([(None if shape is None else tuple(shape), dtype) for shape, dtype in function(**call)])
    return found
