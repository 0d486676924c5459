"""What the package's files say about its ops, read by `opgen lint`'s readers (every registration form lint reads,
`torch._custom_ops` and `impl_abstract` included): where each op is defined, in which style, with which kernel
devices. Torch-free."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..lint.collect import read_file

DEVICE_KEYS = {"npu": "npu", "privateuse1": "npu", "cuda": "cuda", "cpu": "cpu"}


@dataclass
class OpSource:
    where: str = ""  # path:line of the definition
    style: str = ""  # "library" or "custom_op"
    devices: set = field(default_factory=set)  # "npu", "cuda", "cpu" kernels registered


def read_sources(root: str) -> dict[str, OpSource]:
    """{"ns::name" (or "ns::name.overload"): what the files under `root` say about it}."""
    found: dict[str, OpSource] = {}
    for path in _python_files(root):
        try:
            record = read_file(path)
        except (OSError, RecursionError):
            continue
        if record is None:
            continue
        for definition in record.definitions:
            # a helper's library may be unknown (vLLM's direct_register_custom_op(target_lib=...)): "*::name"
            source = found.setdefault(_key(definition.namespace or "*", definition.name, definition.overload),
                                      OpSource())
            source.where = source.where or f"{definition.where.path}:{definition.where.line}"
            style = "library" if definition.api == "direct_register_custom_op" else definition.style  # Library define + impl
            source.style = source.style or style
            source.devices.update(DEVICE_KEYS.get(str(d).lower(), "") for d in definition.device_types or ())
        for registration in record.registrations:
            if registration.role != "kernel" or not registration.namespace:
                continue
            source = found.setdefault(_key(registration.namespace, registration.name, registration.overload or ""),
                                      OpSource())
            source.devices.add(DEVICE_KEYS.get(registration.key.lower(), ""))
    for source in found.values():
        source.devices.discard("")
    return found


def lookup(found: dict[str, OpSource], name: str) -> OpSource:
    """The source of `ns::op.overload`, or of `ns::op`; an empty one for an op defined elsewhere (C++)."""
    bare = "*::" + name.split("::", 1)[-1]
    return found.get(name) or found.get(name.split(".")[0]) or found.get(bare) or found.get(bare.split(".")[0]) \
        or OpSource()


def _key(namespace: str, name: str, overload: str) -> str:
    return f"{namespace}::{name}" + (f".{overload}" if overload and overload != "default" else "")


def _python_files(root: str) -> list[str]:
    if os.path.isfile(root):
        return [root]
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith(".") and d != "__pycache__")
        found += [os.path.join(directory, name) for name in sorted(files) if name.endswith(".py")]
    return found
