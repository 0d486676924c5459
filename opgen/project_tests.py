"""The test modules every generated project carries verbatim, `tests/graph_checks.py` (the graph-entry checks),
`tests/input_variants.py` (the inputs they try), `tests/npugraph_ex_cpu.py` (npugraph_ex on CPU) and `tests/npu_graph_cpu.py` (NPU graph capture and replay
emulated on CPU, under npugraph_ex's own AclGraph), imported by opgen itself from its templates so that
`opgen check` and opgen's own tests run the very code the generated tests run. Torch-free at import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

GRAPH_CHECKS = "graph_checks"
INPUT_VARIANTS = "input_variants"
NPUGRAPH_EX_CPU = "npugraph_ex_cpu"
NPU_GRAPH_CPU = "npu_graph_cpu"
MODULES = (GRAPH_CHECKS, INPUT_VARIANTS, NPUGRAPH_EX_CPU, NPU_GRAPH_CPU)
# what each module imports by name (a generated project's tests/ is on sys.path; opgen's process loads them first;
# npugraph_ex_cpu loads npu_graph_cpu from beside itself, and only when a capture session needs it: it imports torch)
IMPORTS = {GRAPH_CHECKS: (INPUT_VARIANTS, NPUGRAPH_EX_CPU)}


def module_path(name: str) -> Path:
    """The template's copy of `tests/<name>.py`."""
    from .render.templates import PROJECT_TEMPLATE, templates_dir

    return templates_dir() / PROJECT_TEMPLATE / "{{cookiecutter.project_slug}}" / "tests" / f"{name}.py"


def load(name: str) -> ModuleType:
    """The template's `tests/<name>.py`, imported once per process under its own name (as a generated project's
    tests import it), after the modules it imports by name (IMPORTS)."""
    for dependency in IMPORTS.get(name, ()):
        load(dependency)
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, module_path(name))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module
