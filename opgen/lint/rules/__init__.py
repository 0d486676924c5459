"""The lint-only rules, one module per family, each rule with its doc, VALID and INVALID examples
(Fixit style), its check and its fix in one place:

- registration.py: OPG2xx, what the define / impl / register_fake / custom_op calls say, across files;
- bodies.py: OPG3xx, what the registered kernels and fakes do;
- yaml.py: OPG4xx, op_plugin / native_functions `func:` entries.

The rules are registered in the one catalogue, `opgen.contract.RULES`, so `opgen explain --code` and
`opgen lint --explain` read the same text; schema-level problems are not repeated here: the lint
reports them through `opgen.contract.check_schema` / `check_ops` and the schema parser (OPG0xx, OPG1xx).

An INVALID example names the 1-based line the rule must fire on; tests/test_lint_rules.py runs every
example of every rule, so the documentation and the tests are the same text.
"""

from __future__ import annotations

from ...contract import NOT_INFERRABLE, SCHEMA_INVALID, SIDE_EFFECT_ONLY  # the contract rules lint reports as they are
from .base import LINT_RULES, Invalid, LintRule
from .bodies import (
    CAPTURE_UNSAFE,
    FAKE_ALLOC_NO_DEVICE,
    FAKE_READS_DATA,
    FAKE_RETURNS_INPUT,
    FAKE_SIGNATURE,
    KERNEL_RETURNS_INPUT,
    OUT_NEVER_WRITTEN,
    TENSOR_TRUTH_TEST,
    TODO_FAKE,
    UNDECLARED_MUTATION,
    VOID_KERNEL_RETURNS,
)
from .registration import (
    DISPATCH_KEY_SPELLING,
    DUPLICATE_DEF,
    DUPLICATE_OP,
    IMPL_UNDEFINED,
    META_AND_FAKE,
    MUTATES_ARGS_UNKNOWN,
    MUTATES_ARGS_UNKNOWN_PARAM,
    NAMESPACE_IN_DEFINE,
    NO_FAKE,
    OVERLOAD_LOST,
    SYNTAX_ERROR,
    UNTAGGED_WRITE_CONVENTION,
)
from .yaml import YAML_OUT_CONVENTION

__all__ = [
    "CAPTURE_UNSAFE", "DISPATCH_KEY_SPELLING", "DUPLICATE_DEF", "DUPLICATE_OP", "FAKE_ALLOC_NO_DEVICE",
    "FAKE_READS_DATA", "FAKE_RETURNS_INPUT", "FAKE_SIGNATURE", "IMPL_UNDEFINED", "KERNEL_RETURNS_INPUT", "LINT_RULES",
    "META_AND_FAKE", "MUTATES_ARGS_UNKNOWN", "MUTATES_ARGS_UNKNOWN_PARAM", "NAMESPACE_IN_DEFINE", "NOT_INFERRABLE",
    "NO_FAKE", "OUT_NEVER_WRITTEN", "OVERLOAD_LOST", "SCHEMA_INVALID", "SIDE_EFFECT_ONLY", "SYNTAX_ERROR",
    "TENSOR_TRUTH_TEST", "TODO_FAKE", "UNDECLARED_MUTATION", "UNTAGGED_WRITE_CONVENTION", "VOID_KERNEL_RETURNS",
    "YAML_OUT_CONVENTION", "Invalid", "LintRule",
]
