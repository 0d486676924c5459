"""npugraph_ex on CPU: `opgen npugraph-ex fetch|path`, and the loader the generated tests use.

The loader has one copy, the project template's `tests/npugraph_ex_cpu.py` (generated projects import
only torch, so they carry it verbatim); `loader()` imports that very file. It is torch-free at import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

LOADER_NAME = "npugraph_ex_cpu"


def loader_path() -> Path:
    from ..render.templates import PROJECT_TEMPLATE, templates_dir

    return templates_dir() / PROJECT_TEMPLATE / "{{cookiecutter.project_slug}}" / "tests" / f"{LOADER_NAME}.py"


def loader() -> ModuleType:
    """The template's tests/npugraph_ex_cpu.py as a module (one instance per process, as in generated tests)."""
    module = sys.modules.get(LOADER_NAME)
    if module is None:
        spec = importlib.util.spec_from_file_location(LOADER_NAME, loader_path())
        module = importlib.util.module_from_spec(spec)
        sys.modules[LOADER_NAME] = module
        spec.loader.exec_module(module)
    return module
