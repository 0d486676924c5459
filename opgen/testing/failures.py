"""How a check reports: `CheckFailed` (an AssertionError whose `kind` names the problem, for `opgen check`),
and skips and xfails that work with or without pytest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NoReturn

from torch._functorch import config as functorch_config


class CheckFailed(AssertionError):
    """A check found a problem; `kind` names it (for `opgen check`'s signature table)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind



class SkipCheck(Exception):
    """A check cannot run here (raised instead of pytest's skip where pytest is not installed)."""



def skip(reason: str) -> NoReturn:
    try:
        import pytest
    except ImportError:
        raise SkipCheck(reason) from None
    pytest.skip(reason)



def xfail(reason: str) -> NoReturn:
    try:
        import pytest
    except ImportError:
        raise SkipCheck(reason) from None
    pytest.xfail(reason)



@contextlib.contextmanager
def outputs_are_new_memory() -> Iterator[None]:
    """Around a compiled call: torch's first-call check that a custom op's outputs are not its inputs' memory
    raises (it only warns unless CI is set, torch._functorch.config.error_on_custom_op_aliasing), named here."""
    try:
        with functorch_config.patch(error_on_custom_op_aliasing=True):
            yield
    except RuntimeError as error:
        if "must not also be an input to this custom operator" not in str(error):
            raise
        raise CheckFailed("an output is the memory of an input: the kernel returns (a view of) an argument while the "
                          f"schema promises a new tensor; return a clone, or drop the return ({error})",
                          "view-return") from None
