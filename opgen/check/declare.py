"""What an op's kernel writes, found by running it once, and the schema line that declares those writes.

torch's schema check names one argument per failure, and for an op that writes `x` and returns it, it reports the
aliased return before the write. The fix is the same either way: mark every written argument `Tensor(a!)` and
return nothing for it (OPG301, OPG102), written as a line torch itself accepts.
"""

from __future__ import annotations

from string import ascii_lowercase


def written_and_returned(overload, call: dict, clone) -> tuple[list[str], list[int]]:
    """The tensor arguments the kernel writes (their version counters move), and the indices of the returns that
    are one of those arguments (sharing its memory), for one call on copies of `call`."""
    import torch

    arguments = clone(call)
    tensors = {name: value for name, value in arguments.items() if isinstance(value, torch.Tensor)}
    versions = {name: tensor._version for name, tensor in tensors.items()}
    with torch.no_grad():
        out = overload(**arguments)
    written = [name for name, tensor in tensors.items() if tensor._version != versions[name]]
    outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    memory = {tensors[name].untyped_storage().data_ptr(): name for name in written if tensors[name].numel()}
    returned = [index for index, value in enumerate(outputs)
                if isinstance(value, torch.Tensor) and value.numel() and value.untyped_storage().data_ptr() in memory]
    return written, returned


def declaring_schema(schema, overload, written: list[str], returned: list[int]) -> tuple[str, bool]:
    """(`name(..., Tensor(a!) x, ...) -> returns` with each written argument marked and the returns that were
    written arguments dropped, whether the op is a torch.library.custom_op). The line is checked by torch."""
    import torch

    used = {letter for arg in schema.arguments if arg.alias for letter in arg.alias.before}
    letters = iter(letter for letter in ascii_lowercase if letter not in used)
    arguments, star = [], False
    for arg in schema.arguments:
        if arg.kwarg_only and not star:
            arguments.append("*")
            star = True
        text = str(arg)
        if arg.name in written and arg.alias is None and text.startswith("Tensor"):
            text = f"Tensor({next(letters)}!)" + text[len("Tensor"):]
        arguments.append(text)
    kept = [str(ret) for index, ret in enumerate(schema.returns) if index not in returned]
    returns = kept[0] if len(kept) == 1 else "(" + ", ".join(kept) + ")"
    line = f"{schema.op_name}({', '.join(arguments)}) -> {returns}"
    torch._C.parse_schema(line)  # a line torch refuses would be a bug here: raise it
    return line, _is_custom_op(overload)


def _is_custom_op(overload) -> bool:
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:
        return False
    return overload._schema.name in OPDEFS
