"""Registration hygiene of generated code: the NPU kernel of a custom_op-style project is registered at
torch_npu's dispatch key without importing torch_npu and without private torch APIs, in either import order
(a stand-in backend renamed with torch.utils.rename_privateuse1_backend, in a fresh interpreter)."""

from __future__ import annotations

import pytest
from forked_python import run_python
from new_helpers import REPO, opgen, run_generated_tests

CHECK = """
import sys, torch
{first}
{second}
assert "torch_npu" not in sys.modules, "the package imported torch_npu"
assert torch._C._get_privateuse1_backend_name() == "npu"
assert torch._C._dispatch_has_kernel_for_dispatch_key("act_ops::bias_act", "PrivateUse1")
assert torch.ops.act_ops.bias_act.default.tags == [torch.Tag.pt2_compliant_tag]
print("ok")
"""
RENAME = 'torch.utils.rename_privateuse1_backend("npu")'


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    target = tmp_path_factory.mktemp("hygiene") / "p"
    done = opgen("new", str(REPO / "examples" / "bias_act.yaml"), "-o", str(target), "--style", "custom_op")
    assert done.returncode == 0, done.stderr
    return target


def test_custom_op_npu_kernel_needs_no_torch_npu_and_no_private_api(project):
    source = (project / "act_ops" / "ops.py").read_text(encoding="utf-8")
    assert "import torch_npu" not in source
    assert "torch._C" not in source and "_get_privateuse1_backend_name" not in source
    assert 'NPU_DEVICE = "privateuseone"' in source and "bias_act.register_kernel(NPU_DEVICE, bias_act_npu)" in source
    assert 'Library("act_ops", "IMPL")' not in source  # register_kernel's wrapper, not a raw impl


@pytest.mark.parametrize("first, second", [("import act_ops", RENAME), (RENAME, "import act_ops")],
                         ids=["package first", "backend first"])
def test_custom_op_npu_kernel_is_registered_in_either_import_order(project, first, second):
    done = run_python(["-c", CHECK.format(first=first, second=second)], cwd=project, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.slow
def test_drift_between_the_spec_and_your_kernels_warns_and_fails_the_generated_test(tmp_path):
    """An argument added to the schema after the kernels were created: `opgen new` keeps them, warns with
    both signatures, and the generated test fails with the same message until the kernel is updated."""
    spec = tmp_path / "spec.yaml"
    spec.write_text('namespace: drift_ops\ndevice: cpu\nops:\n  - schema: "f(Tensor x) -> Tensor"\n'
                    '    outputs: {out0: {like: x}}\n    reference: "return x * 2"\n', encoding="utf-8")
    project = tmp_path / "p"
    done = opgen("new", str(spec), "-o", str(project))
    assert done.returncode == 0 and "no longer matches" not in done.stderr, done.stderr
    spec.write_text(spec.read_text(encoding="utf-8").replace("f(Tensor x)", "f(Tensor x, float s)"), encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(project))
    message = ("drift_ops/kernels/f_cpu.py: def f_cpu(x) no longer matches ops[0].schema in {}, which takes (x, s): "
               "kept yours; update its signature")
    assert done.returncode == 0 and message.format(spec) in done.stderr, done.stderr
    results = run_generated_tests([project], tmp_path / "junit.xml")
    assert results["test_f_is_registered"]["outcome"] == "failed"
    assert message.format("opgen.yaml") in results["test_f_is_registered"]["message"]
    (project / "drift_ops" / "kernels" / "f_cpu.py").write_text(
        "import torch\n\n\ndef f_cpu(x: torch.Tensor, s: float) -> torch.Tensor:\n    return x * s\n", encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(project))  # the correct look-alike: no warning
    assert done.returncode == 0 and "no longer matches" not in done.stderr, done.stderr
