"""An op that writes an argument bumps that tensor's autograd version counter in both styles, even when its kernel
writes memory directly (as a device kernel does, here through ctypes): autograd then refuses a tensor it saved
for backward and that the op overwrote, instead of computing gradients from the new values.

custom_op registers an ADInplaceOrView kernel that does this; opgen's Library registrations do the same. The
planted twin (the Library registration without it) shows what is at stake: a silently wrong gradient."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from new_helpers import STYLES, opgen

SPEC = """\
namespace: vc_ops
style: library
device: cpu
ops:
  - schema: "fill_raw(Tensor(a!) x, float v) -> ()"
    doc: "Fills x with v, writing its memory directly (no aten op, so no version bump of its own)."
    reference: |
      import ctypes

      values = torch.full_like(x, v).contiguous()
      ctypes.memmove(x.data_ptr(), values.data_ptr(), x.numel() * x.element_size())
    examples: [{x: {shape: [3], dtype: float32}, v: 5.0}]
"""

TRAIN = """\
import torch
import vc_ops

w = torch.ones(3, requires_grad=True)
x = torch.ones(3)
loss = (w * x).sum()  # autograd saves x for the gradient of w
before = x._version
torch.ops.vc_ops.fill_raw(x, 5.0)
assert torch.equal(x, torch.full((3,), 5.0)), x
print("version", before, "->", x._version)
try:
    loss.backward()
except RuntimeError as error:
    print("backward raised:", str(error).splitlines()[0])
else:
    print("gradient", w.grad.tolist())
"""


def _train(project, tmp_path) -> str:
    script = tmp_path / "train.py"
    script.write_text(TRAIN, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(project)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # generates a project and imports torch in a subprocess
@pytest.mark.parametrize("style", STYLES)
def test_a_direct_write_bumps_the_version_and_backward_refuses_the_stale_tensor(tmp_path, style):
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    project = tmp_path / "project"
    assert opgen("new", str(tmp_path / "spec.yaml"), "-o", str(project), "--style", style).returncode == 0
    out = _train(project, tmp_path)
    assert "version 0 -> 1" in out, out
    assert "backward raised: one of the variables needed for gradient computation has been modified by an " \
           "inplace operation" in out, out
    if style == "custom_op":
        return
    # the planted twin: the Library registration without its ADInplaceOrView kernel
    ops = project / "vc_ops" / "ops.py"
    text = ops.read_text(encoding="utf-8")
    line = 'lib.impl("fill_raw", _fill_raw_written, "ADInplaceOrView", with_keyset=True)\n'
    assert text.count(line) == 1
    ops.write_text(text.replace(line, ""), encoding="utf-8")
    out = _train(project, tmp_path)
    assert "version 0 -> 0" in out and "gradient [5.0, 5.0, 5.0]" in out, out  # silently wrong: [1, 1, 1] is right
