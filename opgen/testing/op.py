"""The operator under test as the checks see it (`Op`), a call of it (`Call`), an `expect:` entry (`Expected`) and
the tolerances the checks compare with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import torch_compat
from .input_variants import drawn

Call = dict[str, Any]



OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
                 "test_aot_dispatch_dynamic")



# Data-dependent output sizes cannot be traced with static shapes.
OPCHECK_UTILS_DYNAMIC = tuple(name for name in OPCHECK_UTILS if name != "test_aot_dispatch_static")



# (rtol, atol) per dtype: `expect:` values against the CPU kernel (torch.testing.assert_close's defaults;
# other dtypes compare exactly), and the device kernel against the CPU reference kernel (`ops[i].tolerances`
# in opgen.yaml overrides these).
TOLERANCES = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
              torch.float64: (1e-7, 1e-7)}



DEVICE_TOLERANCES = {torch.float16: (1e-2, 1e-3), torch.bfloat16: (5e-2, 1e-2), torch.float32: (1e-4, 1e-5),
                     torch.float64: (1e-9, 1e-12)}  # float64 tight enough that float32 arithmetic shows



SENTINEL = -77  # what written buffers are filled with before the call, so that any write shows



# Copies npugraph_ex is known to leave for ops that return a mutated argument (`tags:` in opgen.yaml).
KNOWN_COPIES = {
    "inplace": "npugraph_ex 2.13.0 leaves `copy_(x, <the op's result>)` after a torch.Tag.inplace op, a copy of the "
               "buffer onto itself at every replay; opgen's default form (`-> ()`, no tag) has no copy",
    "out": "npugraph_ex 2.13.0 does not re-inplace a torch.Tag.out op: it writes into a new buffer and copies that "
           "into `out` at every replay; opgen's default form (`-> ()`, no tag) writes in place",
}



@dataclass(frozen=True)
class Op:
    """An operator under test. `field` ("ops[0]") and the file paths come from a generated project; outside one
    (`opgen check`) they are empty and messages name the operator instead."""

    overload: torch._ops.OpOverload
    field: str = ""  # where opgen.yaml describes the op
    schema: str = ""  # the spec's schema, `ns::op(...) -> ...`
    cpu_kernel: str = ""  # the CPU kernel's file
    outputs: tuple[str, ...] = ()  # the outputs' names, in order
    returned: tuple[str, ...] = ()  # a torch.Tag.inplace/out op: the argument each output is
    tag: str = ""  # "inplace", "out" or ""
    dynamic: bool = False  # an output size is data-dependent (`dynamic` in the semantics)
    tolerances: dict | None = None  # {dtype: (rtol, atol)}: a kernel against the reference (`ops[i].tolerances`)
    reference: Callable | None = None  # the spec's `reference:` (<package>/reference.py): the independent oracle
    random: bool = False  # torch.Tag.nondeterministic_seeded: its outputs are random draws
    dtypes: tuple[torch.dtype, ...] = ()  # `ops[i].dtypes`: the floating dtypes swept (default: SWEPT_DTYPES)
    inputs: dict | None = None  # `ops[i].inputs`: argument name -> Domain, where its values live
    promotes: tuple[tuple[str, ...], ...] = ()  # the arguments each `promote(...)` of the semantics reads
    contiguous: tuple[str, ...] = ()  # `ops[i].contiguous`: the op makes these contiguous, or refuses them (written)
    checked: bool = False  # the fake checks `ops[i].checks`: the input variants keep to them (input_variants)
    ties: dict | None = None  # `ops[i].ties`: index output or written argument -> fn(**call): the scores it picks from

    def __post_init__(self) -> None:
        if self.dynamic:
            torch_compat.capture_data_dependent_outputs()

    @property
    def qualname(self) -> str:
        """`ns::op` (`ns::op.overload`), as the spec and torch's errors name it."""
        schema = self.overload._schema
        return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name

    @property
    def arguments(self) -> list:
        return list(self.overload._schema.arguments)

    @property
    def written(self) -> tuple[str, ...]:
        """The arguments the schema marks written (`Tensor(a!)`)."""
        return tuple(a.name for a in self.arguments if a.alias_info is not None and a.alias_info.is_write)

    @property
    def kernel(self) -> str:
        return self.cpu_kernel or f"the CPU kernel of {self.overload}"

    def result_name(self, index: int) -> str:
        """The name of output `index` (`out0` for an unnamed one), as `ops[i].ties` keys it."""
        return self.outputs[index] if index < len(self.outputs) else f"out{index}"

    def spec(self, part: str) -> str:
        """`opgen.yaml: ops[0]<part>`, or the operator's name outside a generated project."""
        return f"opgen.yaml: {self.field}{part}" if self.field else f"{self.overload}{part}"

    def output_field(self, index: int) -> str:
        """The spec field describing output `index`, for messages."""
        if index < len(self.returned):
            return f"{self.field or self.overload}.schema (returns {self.returned[index]})"
        if index < len(self.outputs):
            return f"{self.field or self.overload}.outputs.{self.outputs[index]}"
        return f"output {index}"

    def describe_argument(self, name: str) -> str:
        """`'x' (schema argument 0)`, or `'out' (schema argument keyword 'out')`."""
        for position, argument in enumerate(a for a in self.arguments if not a.kwarg_only):
            if argument.name == name:
                return f"{name!r} (schema argument {position})"
        return f"{name!r} (schema argument keyword {name!r})"

    def __call__(self, call: Call):
        return self.overload(**call)

    def as_declared(self) -> Callable[..., Any]:
        """The op as a function of its arguments by name for `torch.compile` to trace: `call_as_declared`."""
        return call_as_declared(self.overload)

    def drawn(self, calls: list[Call], g: torch.Generator) -> list[Call]:
        """The examples `calls` with each `Draw` placeholder drawn from its argument's domain (`ops[i].inputs`)."""
        return drawn(self.inputs or {}, calls, g)

    def seeded(self, fn: Callable) -> Callable:
        """`fn`, for a random op run after torch.manual_seed(0): two runs of one kernel then draw the same numbers."""
        if not self.random:
            return fn

        def run(*args, **kwargs):
            torch.manual_seed(0)
            return fn(*args, **kwargs)
        return run

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) of a kernel against the reference for `dtype` (other dtypes compare exactly)."""
        return {**DEVICE_TOLERANCES, **(self.tolerances or {})}.get(dtype, (0.0, 0.0))



def call_as_declared(overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """`overload` as a function of its arguments by name that passes them as its schema declares them: positional ones
    by position, keyword-only ones by keyword. Every compiled call of the checks goes through it: Dynamo takes any
    keyword named `out` for an `out=` tensor and refuses a non-contiguous one ("Attempted to call op with
    non-contiguous `out=` tensor"), which a positional written argument named `out` (vLLM's
    `silu_and_mul(Tensor(a!) out, Tensor x)`) is when passed by keyword: a false alarm on a correct kernel. A
    positional argument left to its default ends the positional ones (those after it go by keyword)."""
    positional = tuple(argument.name for argument in overload._schema.arguments if not argument.kwarg_only)

    def call(**arguments):
        count = 0  # the schema's names are read here, outside the trace: Dynamo sees a loop over constants
        while count < len(positional) and positional[count] in arguments:
            count += 1
        by_keyword = {name: value for name, value in arguments.items() if name not in positional[:count]}
        return overload(*[arguments[name] for name in positional[:count]], **by_keyword)
    return call



@dataclass(frozen=True)
class Expected:
    """An `expect:` entry of opgen.yaml: on example `example`, the output or the (written) argument `name` holds
    `values`, or, for `rows`, the given rows of it ({row index: values})."""

    example: int
    name: str
    values: Any = None
    rows: dict | None = None
    rtol: float | None = None
    atol: float | None = None
    element: int | None = None  # a Tensor[] output or argument: which of its tensors
    length: int | None = None  # ... and how many it holds
