"""Registration hygiene of generated code: the NPU kernel of a custom_op-style project is registered at
torch_npu's dispatch key without importing torch_npu and without private torch APIs, in either import order
(a stand-in backend renamed with torch.utils.rename_privateuse1_backend, in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from new_helpers import REPO, opgen

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
    assert 'npu_lib.impl("bias_act", bias_act_npu, "PrivateUse1")' in source


@pytest.mark.parametrize("first, second", [("import act_ops", RENAME), (RENAME, "import act_ops")],
                         ids=["package first", "backend first"])
def test_custom_op_npu_kernel_is_registered_in_either_import_order(project, first, second):
    done = subprocess.run([sys.executable, "-c", CHECK.format(first=first, second=second)], cwd=project,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
