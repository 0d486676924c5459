"""An op's entry in op-plugin's test/core_tests/test_fake_tensor.py: its Meta function under FakeTensorMode
against the NPU kernel on each example, as the repo's own entries check them (shape and dtype of every
output), one class per spec op after the file's last class."""

from __future__ import annotations

from .calls import example_call
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
    many = len(entry.schema.returns) > 1
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
        if many:
            lines += ["        for fake, real in zip(fake_output, output):",
                      "            self.assertEqual(fake.shape, real.shape)",
                      "            self.assertEqual(fake.dtype, real.dtype)"]
        else:
            lines += ["        self.assertEqual(fake_output.shape, output.shape)",
                      "        self.assertEqual(fake_output.dtype, output.dtype)"]
    return "\n".join(lines)
