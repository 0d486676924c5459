"""Tier: the op is registered as the spec says (dispatch keys, tags, schema, the kernel's signature).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch

from . import torch_compat
from .op import Op


def assert_registered(op: Op, dispatch_keys: Sequence[str], tags: Sequence[torch.Tag] = (),
                      side_effect: bool = False) -> None:
    """Kernels at `dispatch_keys`, exactly `tags`, the spec's schema (alias-set letters aside: custom_op infers
    a0, a1, ...), and for an op that returns nothing and mutates nothing the side-effect mark."""
    for key in dispatch_keys:
        device = {"PrivateUse1": "NPU", "CUDA": "CUDA"}.get(key, key)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.qualname, key), f"ops.py registers no {device} kernel"
    want = {tag.name for tag in tags}
    # custom_op adds a tag of its own on 2.6 and 2.7 (needs_fixed_stride_order): torch's, not the spec's; the
    # pt2_compliant_tag it adds everywhere the spec's tags carry (the Library style defines the op with it)
    have = {tag.name for tag in op.overload.tags} - (torch_compat.custom_op_added_tags() - {"pt2_compliant_tag"} - want)
    assert have == want, f"the tags of the registration in ops.py are {sorted(have)}, the spec's {sorted(want)}"
    if op.schema:
        have = op.overload._schema
        assert _alias_sets_renamed(str(have)) == _alias_sets_renamed(str(torch._C.parse_schema(op.schema))), (
            f"torch registered {have}, but {op.field}.schema in opgen.yaml is {op.schema}: ops.py was edited by hand "
            "or generated wrong; regenerate it with `opgen new`")
    if side_effect:
        # torch.fx.node.has_side_effect registers into this set; there is no public way to read it
        assert op.overload in torch.fx.node._side_effectful_functions, (
            f"{op.overload} returns nothing and mutates nothing, but ops.py does not mark it side-effecting: "
            "dead-code elimination would drop every call")



def _alias_sets_renamed(schema: str) -> str:
    """The schema text with its alias sets named by order of appearance; an unnamed write (`Tensor! out`, which torch
    prints `Tensor($0! -> )`) is a set of its own like any other."""
    schema = re.sub(r"\(\$(\d+)!\s*->\s*\)", r"(unnamed\1!)", schema)
    names: dict[str, str] = {}
    return re.sub(r"\((\w+)(!?)\)", lambda m: f"({names.setdefault(m.group(1), f's{len(names)}')}{m.group(2)})", schema)



def _parameters(names: Sequence[str], keyword: Sequence[str]) -> str:
    return "(" + ", ".join([*names, *(["*", *keyword] if keyword else [])]) + ")"



def assert_signature(function: Callable, op: Op) -> None:
    """A kernel or fake of yours still takes the schema's arguments (opgen never rewrites your files)."""
    path = function.__module__.replace(".", "/") + ".py"
    code = function.__code__
    positional = code.co_varnames[:code.co_argcount]
    keyword = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    have = _parameters(positional, keyword)
    want = _parameters([a.name for a in op.arguments if not a.kwarg_only],
                       [a.name for a in op.arguments if a.kwarg_only])
    assert have == want, (f"{path}: def {function.__name__}{have} no longer matches {op.field}.schema in opgen.yaml, "
                          f"which takes {want}: kept yours; update its signature")
