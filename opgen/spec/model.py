"""The checked content of a spec file: one `ProjectSpec` holding one `OpSpec` per operator.

Built only by `opgen.spec.load`; everything here has been validated against the op's schema, so
the renderer can trust names, examples and semantics without looking at YAML again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..registration_styles import STYLES as _STYLES
from ..schema.model import Schema
from .semantics_ir import DTYPE_ALIASES
from .semantics_ir import DTYPES as _SEMANTICS_DTYPES

STYLES = tuple(_STYLES)
# Spec device -> the dispatch key its kernel is registered at (and the custom_op device type).
DEVICES = {"npu": "PrivateUse1", "cuda": "CUDA", "cpu": "CPU"}
DEFAULT_DEVICE = "npu"
# What `opgen new` writes: a custom-op package, or an Ascend op-plugin contribution (opgen.op_plugin).
TARGETS = ("package", "op_plugin")
DEFAULT_TARGET = "package"

# Spec dtype names (with aliases such as `half`) -> the `torch` attribute; the table is the semantics language's.
DTYPES = {**{name: row[0] for name, row in _SEMANTICS_DTYPES.items()},
          **{alias: _SEMANTICS_DTYPES[name][0] for alias, name in DTYPE_ALIASES.items()}}


@dataclass(frozen=True)
class TensorValue:
    """An example tensor: random values of `shape` or exactly `values`, of torch dtype `dtype`."""

    dtype: str
    shape: tuple[int, ...] | None = None
    values: object = None  # nested lists of numbers when given exactly


ExampleValue = None | bool | int | float | str | TensorValue | tuple


@dataclass(frozen=True)
class Expected:
    """`examples[j].expect.<name>`: values an output (or a mutated argument, after the call) must have.

    Either the full tensor (`values`) or some of its rows along dim 0 (`rows`: index -> values); numbers
    are nested tuples. `rtol`/`atol` None: torch.testing.assert_close's defaults for the tensor's dtype."""

    name: str
    output: int | None  # which return (None: the op's only, untupled return); None for an argument
    argument: int | str | None  # a mutated argument: its position, or its name when keyword-only
    values: object = None
    rows: tuple[tuple[int, object], ...] | None = None
    rtol: float | None = None
    atol: float | None = None


@dataclass(frozen=True)
class Example:
    """Inputs for one call, by argument name; arguments left out take their schema default."""

    values: dict[str, ExampleValue]
    derived: bool = False  # made up by opgen because the spec gave none
    expect: tuple[Expected, ...] = ()  # independent expected values (`expect:`), checked against the CPU kernel


@dataclass(frozen=True)
class OutputSpec:
    """Semantics of one returned tensor. `shape_rule`/`dtype_rule` are the parsed rules (None: missing)."""

    name: str
    index: int
    shape_rule: object | None = None
    dtype_rule: object | None = None
    supported: bool = True  # False for returns the semantics language cannot describe (Tensor[], int, ...)
    returns_argument: str | None = None  # a tagged op returns this mutated argument itself: nothing to describe
    like: str | None = None  # `like: x`: x's shape, dtype and layout (the fake is torch.empty_like(x))

    @property
    def complete(self) -> bool:
        return self.returns_argument is not None or (
            self.supported and self.shape_rule is not None and self.dtype_rule is not None)


@dataclass(frozen=True)
class AutogradSpec:
    """`ops[i].autograd`: Python bodies (validated with ast.parse) of the op's backward formula."""

    backward: str
    setup_context: str | None = None


@dataclass(frozen=True)
class OpSpec:
    index: int  # position in `ops:`, for messages naming `ops[i]...`
    schema: Schema
    doc: str
    outputs: tuple[OutputSpec, ...]
    reference: str | None
    examples: tuple[Example, ...]
    notes: tuple[str, ...] = ()  # warnings about rewrites, shown by `opgen new`
    tags: tuple[str, ...] = ()  # torch.Tag names ("inplace" or "out"): the aliased returns are kept
    autograd: AutogradSpec | None = None  # None: no backward (no Autograd-key registration at all)
    # `ops[i].tolerances`: torch dtype name -> (rtol, atol) of the device kernel against the CPU reference
    tolerances: tuple[tuple[str, float, float], ...] = ()
    op_plugin: object = None  # `ops[i].op_plugin` (opgen.spec.op_plugin.OpPluginSpec), for --target op_plugin
    dtypes: tuple[str, ...] = ()  # `ops[i].dtypes`: the floating dtypes the tests sweep (empty: float16, bfloat16, float32)
    contiguous: tuple[str, ...] = ()  # `ops[i].contiguous`: inputs the registration makes contiguous for the kernels

    @property
    def undescribable_returns(self) -> list[str]:
        """The returns the semantics language cannot describe (`Tensor[]`, `int`, ...): only a hand-written
        fake function covers them."""
        return [out.name for out in self.outputs if not out.supported and out.returns_argument is None]

    @property
    def missing_semantics(self) -> list[str]:
        """The spec fields to fill before opgen can write this op's fake function."""
        missing = []
        for out in self.outputs:
            if out.returns_argument is not None:
                continue
            prefix = f"ops[{self.index}].outputs.{out.name}"
            if not out.supported:
                missing.append(prefix)
                continue
            if out.shape_rule is None:
                missing.append(prefix + ".shape")
            if out.dtype_rule is None:
                missing.append(prefix + ".dtype")
        return missing

    @property
    def is_dynamic(self) -> bool:
        return any(out.shape_rule is not None and out.shape_rule.is_dynamic for out in self.outputs)


@dataclass(frozen=True)
class ProjectSpec:
    namespace: str
    style: str
    device: str
    package: str
    ops: tuple[OpSpec, ...]
    text: str = field(default="", repr=False)  # the spec as written, stored in the project as opgen.yaml
    path: str | None = None
    notes: tuple[str, ...] = ()  # warnings about the ops together (in-place twins)
    target: str = DEFAULT_TARGET
