"""An op's entry in op-plugin's test/core_tests/test_fake_tensor.py: its Meta function under FakeTensorMode
against the NPU kernel on each example, as the repo's own entries check them (shape and dtype of every
output), one class per spec op after the file's last class."""

from __future__ import annotations

from ..schema.model import BaseType, ListType, OptionalType, strip_alias
from .calls import example_call, is_tensor_value, variable
from .cpp import stem

FAKE_TEST = "test/core_tests/test_fake_tensor.py"
# names the entries use, with the import that gives each (added to the file when it lacks one)
IMPORTS = {"FakeTensorMode": "from torch._subclasses.fake_tensor import FakeTensorMode",
           "SupportedDevices": "from torch_npu.testing.common_utils import SupportedDevices",
           "torch_npu": "import torch_npu", "TestCase": "from torch_npu.testing.testcase import TestCase, run_tests"}


def class_name(camel_name: str) -> str:
    return f"TestNpu{camel_name}Meta"


def fake_test_class(name: str, entries, devices) -> str | None:
    """The class for one spec op's entries (the op and its twin), or None when the op has no example."""
    methods = [_method(entry, devices) for entry in entries if entry.source.examples]
    if not methods:
        return None
    return f"class {name}(TestCase):\n" + "\n\n".join(methods)


def _method(entry, devices) -> str:
    lines = [f"    @SupportedDevices({list(devices)!r})", f"    def test_{stem(entry.schema)}_meta(self):"]
    for number, example in enumerate(entry.source.examples):
        if number:
            lines.append("")
        function = f"torch_npu.{entry.name}"
        inputs, call = example_call(entry.schema, example, function, indent=" " * 8, lead="output = ")
        fake_inputs, fake_call = example_call(entry.schema, example, function, prefix="fake_", indent=" " * 12,
                                              lead="fake_output = ")
        lines += [f"        {line}" for line in inputs]
        lines.append(f"        {call}")
        lines.append("        with FakeTensorMode():")
        lines += [f"            {line}" for line in fake_inputs]
        lines.append(f"            {fake_call}")
        lines += [f"        {line}" for line in _comparisons(entry.schema, example)]
    return "\n".join(lines)


def _comparisons(schema, example) -> list[str]:
    """What the Meta must agree with the kernel on, for every return kind: a tensor's shape and dtype, each tensor
    of a Tensor[] (and their number), an optional output's presence, and for an op returning nothing (`-> ()`) the
    buffers it writes."""
    returns = schema.returns
    if not returns:
        lines = ["self.assertIsNone(fake_output)"]
        for arg in schema.mutated_args:
            if is_tensor_value(example.values.get(arg.name)):
                name = variable(arg.name, schema)
                lines += _same(f"fake_{name}", name)
        return lines
    if len(returns) == 1:
        return _compare("fake_output", "output", returns[0].type)
    if all(strip_alias(ret.type) == BaseType("Tensor") for ret in returns):
        return ["for fake, real in zip(fake_output, output):", *(f"    {line}" for line in _same("fake", "real"))]
    lines = []
    for index, ret in enumerate(returns):
        lines += _compare(f"fake_output[{index}]", f"output[{index}]", ret.type)
    return lines


def _compare(fake: str, real: str, typ) -> list[str]:
    typ = strip_alias(typ)
    if isinstance(typ, OptionalType):
        inner = _compare(fake, real, typ.elem)
        return [f"self.assertEqual({fake} is None, {real} is None)", f"if {real} is not None:",
                *(f"    {line}" for line in inner)] if inner else []
    if isinstance(typ, ListType) and strip_alias(typ.elem) == BaseType("Tensor"):
        return [f"self.assertEqual(len({fake}), len({real}))", f"for fake, real in zip({fake}, {real}):",
                *(f"    {line}" for line in _same("fake", "real"))]
    if typ == BaseType("Tensor"):
        return _same(fake, real)
    return []  # a number or a bool: a Meta returns a symbolic value, compared by the golden test


def _same(fake: str, real: str) -> list[str]:
    return [f"self.assertEqual({fake}.shape, {real}.shape)", f"self.assertEqual({fake}.dtype, {real}.dtype)"]
