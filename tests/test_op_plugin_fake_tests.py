"""The classes `opgen add` writes into op-plugin's test/core_tests/test_fake_tensor.py run for every return kind
(a Tensor[] return, an op returning nothing that writes buffers, its functional twin's tuple, an optional output):
they are executed here on CPU, torch_npu's ops stood in for by Python functions, and a stand-in whose fake
disagrees with its kernel makes them fail (the planted bug), where `.shape` on a list or on None once raised
AttributeError on op-plugin's NPU CI."""

from __future__ import annotations

import ast
import shutil
import types
import unittest
from pathlib import Path

import pytest
import torch
from new_helpers import REPO, opgen
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from opgen.op_plugin.faketest import _comparisons
from opgen.schema import parse_schema
from opgen.spec.model import Example, TensorValue

FIXTURE = REPO / "tests" / "fixtures" / "op_plugin_root"
SPEC = REPO / "tests" / "op_plugin" / "return_kinds.yaml"
FAKE_TEST = "test/core_tests/test_fake_tensor.py"


def _fill_caches(key_cache, value_cache, key, slots):
    key_cache.index_copy_(0, slots, key)
    value_cache.index_copy_(0, slots, key)


def _fill_caches_functional(key_cache, value_cache, key, slots):
    key_cache, value_cache = key_cache.clone(), value_cache.clone()
    _fill_caches(key_cache, value_cache, key, slots)
    return key_cache, value_cache


KERNELS = {"npu_split_rows": lambda x, parts: list(x.chunk(parts, 0)), "npu_fill_caches": _fill_caches,
           "npu_fill_caches_functional": _fill_caches_functional}


def _short_list_under_fake(x, parts):
    """A Meta that forgets the last block: what the generated test must catch."""
    blocks = list(x.chunk(parts, 0))
    return blocks[:-1] if isinstance(x, FakeTensor) else blocks


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = Path(shutil.copytree(FIXTURE, tmp_path_factory.mktemp("kinds") / "op-plugin"))
    done = opgen("add", "--op-plugin-root", str(root), str(SPEC))
    assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.fixture(scope="module")
def fake_classes(root) -> dict[str, type]:
    tree = ast.parse((root / FAKE_TEST).read_text(encoding="utf-8"))
    ours = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name in (
        "TestNpuSplitRowsMeta", "TestNpuFillCachesMeta")]
    assert len(ours) == 2
    return {node.name: node for node in ours}


def _run(node: ast.ClassDef, kernels: dict, monkeypatch) -> list:
    """The class's test methods run as op-plugin's CI would, on CPU: `.npu()` is the tensor itself."""
    monkeypatch.setattr(torch.Tensor, "npu", lambda self: self, raising=False)
    scope = {"torch": torch, "torch_npu": types.SimpleNamespace(**kernels), "FakeTensorMode": FakeTensorMode,
             "TestCase": unittest.TestCase, "SupportedDevices": lambda devices: (lambda function: function)}
    exec(compile(ast.Module(body=[node], type_ignores=[]), FAKE_TEST, "exec"), scope)  # noqa: S102
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(scope[node.name]).run(result)
    return result.errors + result.failures


@pytest.mark.parametrize("name", ["TestNpuSplitRowsMeta", "TestNpuFillCachesMeta"])
def test_the_generated_fake_tests_run_for_a_list_return_and_an_op_returning_nothing(fake_classes, name, monkeypatch):
    assert _run(fake_classes[name], KERNELS, monkeypatch) == []


def test_a_fake_disagreeing_with_its_kernel_fails_the_generated_test(fake_classes, monkeypatch):
    problems = _run(fake_classes["TestNpuSplitRowsMeta"], {**KERNELS, "npu_split_rows": _short_list_under_fake},
                    monkeypatch)
    assert len(problems) == 1 and "AssertionError" in problems[0][1] and "AttributeError" not in problems[0][1]


def test_an_optional_output_is_compared_only_where_the_kernel_returns_one():
    schema = parse_schema("npu_maybe_scale(Tensor x, bool with_scale) -> (Tensor y, Tensor? scale)")
    lines = _comparisons(schema, Example({"x": TensorValue("float16", shape=(4, 8)), "with_scale": True}))
    assert lines == ["self.assertEqual(fake_output[0].shape, output[0].shape)",
                     "self.assertEqual(fake_output[0].dtype, output[0].dtype)",
                     "self.assertEqual(fake_output[1] is None, output[1] is None)", "if output[1] is not None:",
                     "    self.assertEqual(fake_output[1].shape, output[1].shape)",
                     "    self.assertEqual(fake_output[1].dtype, output[1].dtype)"]
    code = "\n".join(lines)
    for real, fake in ((None, None), (torch.ones(2), torch.ones(2))):
        exec(code, {"self": unittest.TestCase(), "output": (torch.ones(1), real),  # noqa: S102
                    "fake_output": (torch.ones(1), fake)})
    with pytest.raises(AssertionError):  # the Meta says None where the kernel returned a tensor
        exec(code, {"self": unittest.TestCase(), "output": (torch.ones(1), torch.ones(2)),  # noqa: S102
                    "fake_output": (torch.ones(1), None)})


def test_the_docs_describe_a_list_return_and_an_op_returning_nothing_and_cite_no_file_outside_the_repo(root):
    docs = (root / "codegen/templates/_op_plugin_docs.py").read_text(encoding="utf-8")
    assert "out0 (List[Tensor]): 共parts个Tensor，每个Tensor的shape为" in docs
    assert "输出说明:\n无返回值，原地更新key_cache、value_cache。" in docs
    for test in ("test_npu_split_rows.py", "test_npu_fill_caches.py"):
        assert "opgen.yaml" not in (root / "test" / "test_custom_ops" / test).read_text(encoding="utf-8")
