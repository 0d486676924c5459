"""The spec's examples as op-plugin's tests and docs write calls: named NPU inputs, then `torch_npu.npu_x(...)`.

    x = torch.randn(8, 256, dtype=torch.bfloat16).npu()
    slot_mapping = torch.tensor([7, 1, 30, 12], dtype=torch.int64).npu()
    y, amax = torch_npu.npu_quant_max(x, scale, round_mode="rint", dst_dtype=291)
"""

from __future__ import annotations

from ..render.pyformat import call, literal, wrap
from ..schema.model import EnumWord
from ..spec.model import TensorValue


def tensor_source(value: TensorValue, device: str = ".npu()") -> str:
    """One example tensor: random values of its shape (small integers for integer dtypes), or its values."""
    dtype = f"torch.{value.dtype}"
    if value.shape is None:
        return f"torch.tensor({_nested(value.values)}, dtype={dtype}){device}"
    shape = ", ".join(str(s) for s in value.shape)
    if value.dtype == "bool":
        return f"torch.randint(0, 2, ({shape}{',' if len(value.shape) == 1 else ''})).bool(){device}"
    if value.dtype.startswith(("int", "uint")):
        return f"torch.randint(0, 8, ({shape}{',' if len(value.shape) == 1 else ''}), dtype={dtype}){device}"
    if value.dtype.startswith("float8"):
        return f"torch.randn({shape}).to({dtype}){device}"
    return f"torch.randn({shape}, dtype={dtype}){device}"


def value_source(value, device: str = ".npu()") -> str:
    if isinstance(value, TensorValue):
        return tensor_source(value, device)
    if isinstance(value, tuple):
        return "[" + ", ".join(value_source(v, device) for v in value) + "]"
    if isinstance(value, EnumWord):
        return f"torch.{value.word}"
    if isinstance(value, str):
        return literal(value)
    return repr(value)


def _nested(values) -> str:
    if isinstance(values, tuple):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    return repr(values)


def is_tensor_value(value) -> bool:
    return isinstance(value, TensorValue) or (
        isinstance(value, tuple) and bool(value) and all(isinstance(v, TensorValue) for v in value))


# names a generated line uses itself: an argument of that name is renamed in the example code
RESERVED = ("self", "output", "fake_output", "fake", "real", "torch", "torch_npu", "outputs")


def variable(name: str, schema) -> str:
    """The variable holding argument `name` in example code (`self` -> `input`, as torch's docs write it)."""
    if name not in RESERVED:
        return name
    taken = {a.name for a in schema.arguments}
    candidate = "input" if name == "self" else f"{name}_input"
    while candidate in taken:
        candidate += "_"
    return candidate


def example_call(schema, example, function: str, prefix: str = "", device: str = ".npu()", indent: str = "",
                 lead: str = "") -> tuple[list[str], str]:
    """(`name = tensor` lines, `lead` + the call, wrapped for a line at `indent`): tensors are named after their
    argument (with `prefix`), other values are written in the call; positional arguments up to the last one
    given, keyword-only ones by name."""
    values = example.values
    inputs, args = [], []
    by_name = False  # a positional argument left out (its default) puts every later one by name
    for arg in schema.arguments:
        if arg.name not in values:
            by_name = by_name or not arg.kwarg_only
            continue
        value = values[arg.name]
        if is_tensor_value(value):
            text = prefix + variable(arg.name, schema)
            inputs.append(f"{text} = {value_source(value, device)}")
        else:
            text = value_source(value, device)
        args.append(f"{arg.name}={text}" if arg.kwarg_only or by_name else text)
    return [fit_line(line, indent) for line in inputs], call(lead + function, args, indent)


def fit_line(line: str, indent: str) -> str:
    """`name = torch.tensor([...])` broken inside its brackets when longer than a line."""
    return "\n".join(wrap(line, len(indent))).removeprefix(indent)  # the caller indents the first line
