"""Which ops a module registers itself, for `opgen check MODULE`.

Importing a module also imports torch's own modules and other packages, which register ops of their own
(`_dtensor::mesh_get_process_group` when a package imports torch.distributed.tensor). While the module is
imported, every `Library.define` (custom_op and vLLM's helper call it too) is attributed to the innermost
module whose top-level code is running: an op is the module's own when that module's file is under the
target (its directory for a package, its file otherwise), whoever wrote the helper that defined it.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager


@contextmanager
def recording_definitions():
    """Yields {op name: file of the module whose import defined it}, filled while the block runs."""
    from torch.library import Library

    defined: dict[str, str] = {}
    original = Library.define

    def define(self, schema, *args, **kwargs):
        result = original(self, schema, *args, **kwargs)
        name = schema.split("(")[0].strip().split("::")[-1]
        defined[f"{self.ns}::{name}"] = _importing_file()
        return result

    Library.define = define
    try:
        yield defined
    finally:
        Library.define = original


def _importing_file() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            return frame.f_code.co_filename
        frame = frame.f_back
    return ""


def own_ops(module, names: list[str], defined: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(the ops among `names` that `module`'s own code defined, {op: file} of the others). An op no
    `Library.define` call made (a compiled extension's) is taken as the module's own."""
    path = os.path.realpath(getattr(module, "__file__", "") or "")
    package = os.path.basename(path) == "__init__.py"
    root = os.path.dirname(path) if package else path
    own, elsewhere = [], {}
    for name in names:
        where = defined.get(name.split(".")[0] if name not in defined else name)
        if where is None or _under(os.path.realpath(where), root, package):
            own.append(name)
        else:
            elsewhere[name] = where
    return own, elsewhere


def _under(path: str, root: str, package: bool) -> bool:
    return path.startswith(root + os.sep) if package else path == root
