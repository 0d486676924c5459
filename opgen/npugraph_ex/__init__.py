"""npugraph_ex on CPU: `opgen npugraph-ex fetch|path`, and the loader the generated tests use.

The loader has one copy, the project template's `tests/npugraph_ex_cpu.py` (generated projects import
only torch, so they carry it verbatim); `loader()` imports that very file (opgen.project_tests).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ..project_tests import NPUGRAPH_EX_CPU, load, module_path


def loader_path() -> Path:
    return module_path(NPUGRAPH_EX_CPU)


def loader() -> ModuleType:
    """The template's tests/npugraph_ex_cpu.py as a module (one instance per process, as in generated tests)."""
    return load(NPUGRAPH_EX_CPU)
