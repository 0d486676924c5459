"""A spec written the way a new user writes one (ops no example has: an optional bias, an in-place rotary write,
two outputs with int64 indices, a Scalar pair and an optional ScalarType) passes its own generated tests out of the
box, and a bug of a kind the mutation suite does not plant, in one kernel each, fails them: the generated tests were
not tuned on these."""

from __future__ import annotations

import pytest
from new_helpers import opgen, project_outcomes

SPEC = """\
namespace: {namespace}
style: library
device: npu
ops:
  - schema: "layer_norm_bias(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-05) -> Tensor"
    outputs:
      out0: {{shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    examples:
      - x: {{shape: [4, 32], dtype: float32}}
        weight: {{shape: [32], dtype: float32}}
        bias: {{shape: [32], dtype: float32}}
      - x: {{shape: [2, 3, 16], dtype: bfloat16}}
        weight: {{shape: [16], dtype: bfloat16}}
  - schema: "rope_(Tensor(a!) q, Tensor cos, Tensor sin) -> ()"
    reference: |
      half = q.shape[-1] // 2
      q1 = q[..., :half].clone()
      q2 = q[..., half:].clone()
      q[..., :half] = q1 * cos - q2 * sin
      q[..., half:] = q2 * cos + q1 * sin
    examples:
      - q: {{shape: [2, 4, 8, 16], dtype: float16}}
        cos: {{shape: [8, 8], dtype: float16}}
        sin: {{shape: [8, 8], dtype: float16}}
  - schema: "top_k(Tensor x, int k, bool largest=True) -> (Tensor values, Tensor indices)"
    outputs:
      values: {{shape: "x.shape[:-1] + [k]", dtype: "x.dtype"}}
      indices: {{shape: "x.shape[:-1] + [k]", dtype: int64}}
    reference: |
      return torch.topk(x, k, dim=-1, largest=largest)
    examples:
      - x: {{shape: [4, 16], dtype: float32}}
        k: 3
  - schema: "clamp_to(Tensor x, Scalar lo, Scalar hi, ScalarType? dtype=None) -> Tensor"
    outputs:
      out0: {{shape: "x.shape", dtype: "dtype or x.dtype"}}
    reference: |
      y = x.clamp(lo, hi)
      return y.to(dtype) if dtype is not None else y.clone()
    examples:
      - {{x: {{shape: [5, 7], dtype: float32}}, lo: -0.5, hi: 0.5}}
      - {{x: {{shape: [5, 7], dtype: float32}}, lo: -1, hi: 1, dtype: float16}}
"""

# (kernel file, what the user's kernel wrote, the bug, a test that must fail)
PLANTED = {
    "a bool argument ignored": ("top_k_cpu.py", "largest=largest)", "largest=True)", "test_top_k_matches_the_reference"),
    "an optional bias dropped": ("layer_norm_bias_cpu.py", "weight, bias, eps)", "weight, None, eps)",
                                 "test_layer_norm_bias_matches_the_reference"),
    "a rotary write into the wrong half": ("rope__cpu.py", "q[..., :half] = q1 * cos - q2 * sin",
                                           "q[..., :half] = q2 * cos + q1 * sin", "test_rope__matches_the_reference"),
    "an optional ScalarType ignored": ("clamp_to_cpu.py", "y.to(dtype) if dtype is not None else y.clone()",
                                       "y.clone()", "test_clamp_to_opcheck"),
}


@pytest.mark.slow
def test_a_new_users_spec_passes_and_unseen_kernel_bugs_fail_it(tmp_path):
    projects = []
    for number, bug in enumerate([None, *PLANTED]):
        namespace = f"nu{number}"
        spec = tmp_path / f"{namespace}.yaml"
        spec.write_text(SPEC.format(namespace=namespace), encoding="utf-8")
        done = opgen("new", str(spec), "-o", str(tmp_path / namespace))
        assert done.returncode == 0, done.stderr
        if bug is not None:
            name, written, planted, _ = PLANTED[bug]
            kernel = tmp_path / namespace / namespace / "kernels" / name
            text = kernel.read_text(encoding="utf-8")
            assert written in text, text
            kernel.write_text(text.replace(written, planted), encoding="utf-8")
        projects.append(tmp_path / namespace)
    control = project_outcomes(projects[:1], tmp_path / "control.xml")["nu0"]
    # each planted project runs only the test that must catch its bug (every test of the spec ran on the control)
    caught_by = " or ".join(sorted({must_fail for _, _, _, must_fail in PLANTED.values()}))
    by_project = project_outcomes(projects[1:], tmp_path / "planted.xml", caught_by)
    assert len(control) > 40, sorted(control)
    broken = {name: r["outcome"] for name, r in control.items() if r["outcome"] not in ("passed", "skipped")}
    assert not broken, {name: control[name]["message"][-2000:] for name in broken}
    for number, bug in enumerate(PLANTED, start=1):
        name, _, _, must_fail = PLANTED[bug]
        failed = {test for test, r in by_project[f"nu{number}"].items() if r["outcome"] == "failed"}
        assert must_fail in failed, (bug, sorted(failed))
        message = by_project[f"nu{number}"][must_fail]["message"]
        assert "ops[" in message or name in message, (bug, message[-2000:])
