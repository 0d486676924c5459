"""An op's Python signature as the generated functions spell it: parameters with annotations and defaults,
the return annotation, the call that forwards them."""

from __future__ import annotations

from dataclasses import dataclass

from ..schema.model import SCALAR_TYPE_WORDS, BaseType, EnumWord, OptionalType, format_default, strip_alias
from ..schema.types import python_annotation
from ..spec.model import OpSpec
from .pyformat import literal

# torch's ScalarType numbers (c10/core/ScalarType.h) -> torch dtype names, for ScalarType defaults
_DTYPE_NAMES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
                9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16"}


@dataclass(frozen=True)
class Signature:
    parameters: tuple[str, ...]  # `x: torch.Tensor`, `*`, `alpha: float = 1.0`
    returns: str  # the return annotation
    call_args: tuple[str, ...]  # how a wrapper forwards them: `x`, `alpha=alpha`
    uses_number: bool  # an annotation is `Number` (from torch.types)


def signature(op: OpSpec) -> Signature:
    parameters = tuple(_parameters(op))
    returns = _return_annotation(op)
    call_args = tuple(a.name if not a.kwarg_only else f"{a.name}={a.name}" for a in op.schema.arguments)
    return Signature(parameters, returns, call_args, "Number" in ", ".join(parameters) or "Number" in returns)


def _parameters(op: OpSpec) -> list[str]:
    parts = []
    star = False
    for arg in op.schema.arguments:
        if arg.kwarg_only and not star:
            parts.append("*")
            star = True
        text = f"{arg.name}: {python_annotation(arg.type) or 'object'}"
        if arg.has_default:
            text += f" = {argument_default(op, arg)}"
        parts.append(text)
    return parts


def argument_default(op: OpSpec, arg) -> str:
    """The Python default of one of the op's arguments: a ScalarType number through the spec's `dtype_codes:`."""
    coded = dict(op.dtype_defaults).get(arg.name)
    return f"torch.{coded}" if coded else python_default(arg.type, arg.default)


def python_default(t, value) -> str:
    """A schema default as Python source."""
    if value is None:
        return "None"
    if isinstance(value, EnumWord):
        base = strip_alias(t)
        base = base.elem if isinstance(base, OptionalType) else base
        if isinstance(base, BaseType) and base.name == "ScalarType" and value.word in SCALAR_TYPE_WORDS:
            return f"torch.{_DTYPE_NAMES[SCALAR_TYPE_WORDS[value.word]]}"
        return repr(value.word)
    if isinstance(value, str):
        return literal(value)
    if isinstance(value, tuple):
        return "(" + "".join(python_default(t, v) + ", " for v in value).rstrip(" ") + ")" if value else "()"
    return format_default(value)


def _return_annotation(op: OpSpec) -> str:
    returns = op.schema.returns
    if not returns:
        return "None"
    parts = [python_annotation(r.type) or "object" for r in returns]
    if len(parts) == 1 and not op.schema.returns_tuple:
        return parts[0]
    return "tuple[" + ", ".join(parts) + "]"
