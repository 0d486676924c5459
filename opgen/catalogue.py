"""The catalogue of every diagnostic code opgen can report: the contract rules (opgen.contract) and the lint
rules (opgen.lint.rules) register into one table, read here."""

from __future__ import annotations

from .contract import RULES, Rule


def all_rules() -> dict[str, Rule]:
    """Every rule, by code. Lint rules register themselves into the same table when imported."""
    try:
        from . import lint  # noqa: F401  (registers the lint-only rules)
    except ImportError:
        pass
    return dict(sorted(RULES.items()))
