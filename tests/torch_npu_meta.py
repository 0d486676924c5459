"""torch_npu 2.13.0's own Meta functions, read from the wheel without importing torch_npu (which would break
`import torch` here): an independent oracle for the fakes opgen prints from a spec's semantics.

`_meta_registrations.py` is parsed; its constants and function definitions are run with torch and a few
stand-ins (the `impl` decorator records the op names; `torch_npu` holds its int dtype codes); nothing else
of the module runs (no registration, no import of torch_npu).
"""

from __future__ import annotations

import ast
import math
import types
import warnings
import zipfile
from pathlib import Path

META_PATH = "torch_npu/op_plugin/meta/_meta_registrations.py"
# torch_npu's dtypes outside torch, as the Meta functions compare them: int codes (TORCH_NPU_DTYPE_TO_STRING_MAP)
_TORCH_NPU = types.SimpleNamespace(int4=285, hifloat8=290, float8_e8m0fnu=293, float4_e2m1fn_x2=296,
                                   float4_e1m2fn_x2=297)


def load_meta_functions(wheel: Path) -> dict:
    """Op name -> its Meta function, from the torch-npu wheel."""
    import torch

    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(META_PATH).decode("utf-8")
    tree = ast.parse(text)
    kept, names = [], {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and not (isinstance(node.value, ast.Call) and ast.unparse(node.value.func)
                                                 == "Library"):
            kept.append(node)
        elif isinstance(node, ast.FunctionDef):
            ops = [d.args[1].value for d in node.decorator_list if isinstance(d, ast.Call)
                   and ast.unparse(d.func) == "impl" and len(d.args) == 2 and isinstance(d.args[1], ast.Constant)]
            names.update(dict.fromkeys(ops, node.name))
            node.decorator_list = []
            kept.append(node)
    scope = {"torch": torch, "math": math, "os": __import__("os"), "warnings": warnings, "torch_npu": _TORCH_NPU,
             "ops_error": lambda *args: "", "ErrCode": types.SimpleNamespace(VALUE="", PARAM="", TYPE=""),
             "get_cann_version": lambda: "", "get_soc_version": lambda: 0}
    exec(compile(ast.Module(body=kept, type_ignores=[]), META_PATH, "exec"), scope)  # noqa: S102 - the oracle
    return {op: scope[function] for op, function in names.items()}
