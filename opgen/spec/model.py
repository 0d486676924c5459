"""The checked content of a spec file: one `ProjectSpec` holding one `OpSpec` per operator.

Built only by `opgen.spec.load`; everything here has been validated against the op's schema, so
the renderer can trust names, examples and semantics without looking at YAML again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..contract import ALIASING_TAGS
from ..registration_styles import STYLES as _STYLES
from ..schema.model import Schema
from .semantics_ir import DTYPE_ALIASES
from .semantics_ir import DTYPES as _SEMANTICS_DTYPES

STYLES = tuple(_STYLES)
# torch's tag for an op that draws random numbers (torch_npu's YAML marks its sampling ops with it)
RANDOM_TAG = "nondeterministic_seeded"
TAGS = (*ALIASING_TAGS, RANDOM_TAG)
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
    # a `Tensor[]` return or `Tensor(a!)[]` argument: which of its tensors, and how many the list must hold
    element: int | None = None
    length: int | None = None


@dataclass(frozen=True)
class Example:
    """Inputs for one call, by argument name; arguments left out take their schema default."""

    values: dict[str, ExampleValue]
    derived: bool = False  # made up by opgen because the spec gave none
    expect: tuple[Expected, ...] = ()  # independent expected values (`expect:`), checked against the CPU kernel


@dataclass(frozen=True)
class OutputSpec:
    """Semantics of one returned tensor, or of each tensor of a `Tensor[]` return (its rules read the element
    index `index`, their number is `length_rule`). Rules are parsed (`opgen.spec.semantics`); None: missing."""

    name: str
    index: int
    shape_rule: object | None = None
    dtype_rule: object | None = None
    supported: bool = True  # False for returns the semantics language cannot describe (int, Tensor?[], ...)
    returns_argument: str | None = None  # a tagged op returns this mutated argument itself: nothing to describe
    like: object | None = None  # `like: x` (a TensorRule): x's shape and layout (the fake is torch.empty_like(x))
    like_dtype: bool = False  # `like:` with a `dtype:` of its own (torch.empty_like(x, dtype=...))
    is_list: bool = False  # a `Tensor[]` return
    length_rule: object | None = None  # `length:` of a Tensor[] return (an IntRule)
    element_index: str | None = None  # the name its per-element rules give the index of the element

    @property
    def complete(self) -> bool:
        return self.returns_argument is not None or (
            self.supported and self.shape_rule is not None and self.dtype_rule is not None
            and (self.length_rule is not None or not self.is_list))

    @property
    def rules(self) -> tuple:
        """Every rule of the output that is given."""
        return tuple(r for r in (self.length_rule, self.like, self.shape_rule, self.dtype_rule) if r is not None)


@dataclass(frozen=True)
class AutogradSpec:
    """`ops[i].autograd`: Python bodies (validated with ast.parse) of the op's backward formula."""

    backward: str
    setup_context: str | None = None


# Where `ops[i].fusion` registers its replacement: npugraph_ex's pattern pass, Inductor's post-grad pass.
FUSION_TARGETS = ("npugraph_ex", "inductor")
FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class FusionForm:
    """One composite that compiled graphs replace with the op (`ops[i].fusion`, or one item of its forms).

    The composite is matched literally: its ops, their order and every constant in it (a dim, a literal epsilon),
    but the operand order of a sum or product. `inputs` are matched as graph values (the tensors, and scalars
    matched by value with the pattern matcher's `scalar_workaround`); the other arguments are `constants`, baked
    into the pattern. `traces` are the inputs of its first traces: one per dtype combination of the examples (and
    `ops[i].dtypes`), as a model in that dtype has its casts."""

    field: str  # where the spec says it: "ops[0].fusion", "ops[0].fusion.forms[1]"
    name: str  # `name:`, "" for the one form of a plain mapping: names its generated functions
    body: str  # the composite's body: `pattern`, else the op's `reference:`
    from_reference: bool
    inputs: tuple[str, ...]
    constants: tuple[tuple[str, object], ...]  # (argument, value), in schema order
    conditions: tuple = ()  # `when`: ConditionRules on the matched values, all must hold
    traces: tuple[dict, ...] = ()  # per first trace: input -> TensorValue (metadata only) or a float
    # `tolerances`: dtype name -> (rtol, atol) of the op against the composite (empty: bit-identical in every dtype)
    tolerances: tuple[tuple[str, float, float], ...] = ()

    @property
    def floating_dtypes(self) -> tuple[tuple[str, ...], ...]:
        """Per trace, the dtypes of its floating tensor inputs (in order): where the form applies."""
        return tuple(dict.fromkeys(tuple(v.dtype for v in trace.values() if isinstance(v, TensorValue)
                                         and v.dtype in FLOATING_DTYPES) for trace in self.traces))


@dataclass(frozen=True)
class FusionModel:
    """`fusion.models[k]`: a Hugging Face architecture whose generated test builds it (tiny config, random weights)."""

    architecture: str  # a transformers class: "LlamaForCausalLM"
    config: tuple[tuple[str, object], ...] = ()  # config values over the tiny defaults
    cache: str = ""  # "static": run with a transformers StaticCache passed in (use_cache on); "": no cache


@dataclass(frozen=True)
class FusionSpec:
    """`ops[i].fusion`: the composites models write instead of calling the op, which compiled graphs replace
    with it (one form, or several: Llama's and Olmo2's RMS norm), where it registers, and the models that prove it."""

    forms: tuple[FusionForm, ...]
    targets: tuple[str, ...] = FUSION_TARGETS
    models: tuple[FusionModel, ...] = ()
    field: str = ""  # "ops[0].fusion"


@dataclass(frozen=True)
class OpSpec:
    index: int  # position in `ops:`, for messages naming `ops[i]...`
    schema: Schema
    doc: str
    outputs: tuple[OutputSpec, ...]
    reference: str | None
    examples: tuple[Example, ...]
    notes: tuple[str, ...] = ()  # warnings about rewrites, shown by `opgen new`
    # torch.Tag names the op is defined with, as the spec lists them: "inplace" or "out" keep the aliased
    # returns; "nondeterministic_seeded" says it draws random numbers
    tags: tuple[str, ...] = ()
    autograd: AutogradSpec | None = None  # None: no backward (no Autograd-key registration at all)
    # `ops[i].tolerances`: torch dtype name -> (rtol, atol) of the device kernel against the CPU reference
    tolerances: tuple[tuple[str, float, float], ...] = ()
    op_plugin: object = None  # `ops[i].op_plugin` (opgen.spec.op_plugin.OpPluginSpec), for --target op_plugin
    bindings: tuple = ()  # `ops[i].let`: the names its rules share (opgen.spec.semantics.Binding), in order
    dtypes: tuple[str, ...] = ()  # `ops[i].dtypes`: the floating dtypes the tests sweep (empty: float16, bfloat16, float32)
    contiguous: tuple[str, ...] = ()  # `ops[i].contiguous`: inputs made contiguous for the kernels (written: refused)
    fusion: FusionSpec | None = None  # `ops[i].fusion`: the composite compiled graphs replace with the op
    inputs: tuple = ()  # `ops[i].inputs`: where arguments' values live (opgen.spec.inputs.InputSpec), in spec order
    # ScalarType arguments whose schema default is a number of `dtype_codes:`: (argument, dtype name)
    dtype_defaults: tuple[tuple[str, str], ...] = ()
    checks: tuple = ()  # `ops[i].checks`: conditions on the inputs (opgen.spec.semantics.ConditionRule) the fake checks
    # `ops[i].ties`: (index output or written argument, the scores it picks from along their last dim: an expression,
    # the arguments it reads): where the scores tie, the kernel's pick may differ from the reference's
    ties: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def input_spec(self, name: str):
        """`ops[i].inputs.<name>`, or None."""
        return next((spec for spec in self.inputs if spec.name == name), None)

    @property
    def aliasing_tag(self) -> str:
        """"inplace" or "out" when the op keeps its aliased return(s), else ""."""
        return next((tag for tag in self.tags if tag in ALIASING_TAGS), "")

    @property
    def random(self) -> bool:
        """Tagged torch.Tag.nondeterministic_seeded: its outputs are random draws."""
        return RANDOM_TAG in self.tags

    @property
    def undescribable_returns(self) -> list[str]:
        """The returns the semantics language cannot describe (`int`, `Tensor?[]`, ...): only a hand-written
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
            if out.is_list and out.length_rule is None:
                missing.append(prefix + ".length")
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
    dtype_codes: tuple[tuple[int, str], ...] = ()  # `dtype_codes:`: int code -> dtype name, for from_code()
    adopt: str = ""  # `adopt:`: the user's package that registers the ops (opgen new writes the tests only)
