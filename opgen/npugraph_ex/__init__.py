"""npugraph_ex on CPU: `opgen npugraph-ex fetch|path`, and the loader the generated tests use.

The loader has one home, opgen.testing.npugraph_ex_cpu (torch-free at import): the generated tests, `opgen check`
and `opgen npugraph-ex` all use it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def loader() -> ModuleType:
    """opgen.testing.npugraph_ex_cpu (one instance per process, as in generated tests)."""
    from ..testing import npugraph_ex_cpu

    return npugraph_ex_cpu


def loader_path() -> Path:
    return Path(loader().__file__)
