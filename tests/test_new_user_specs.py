"""A spec written the way a new user writes one (ops no example has: an optional bias, an in-place rotary write,
two outputs with int64 indices, a Scalar pair and an optional ScalarType) passes its own generated tests out of the
box, and a bug of a kind the mutation suite does not plant, in one kernel each, fails them: the generated tests were
not tuned on these."""

from __future__ import annotations

import pytest
from new_helpers import NOT_FEATURES, opgen_in_one_process, project_outcomes

CONTROL = "nu_control"  # the unplanted project; no other name of the run contains it
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
    names = [CONTROL, *(f"nu{number}" for number in range(1, len(PLANTED) + 1))]
    for namespace in names:
        (tmp_path / f"{namespace}.yaml").write_text(SPEC.format(namespace=namespace), encoding="utf-8")
    codes = opgen_in_one_process(*(["new", str(tmp_path / f"{namespace}.yaml"), "-o", str(tmp_path / namespace)]
                                   for namespace in names))
    assert codes == [0] * len(names), codes
    for namespace, bug in zip(names[1:], PLANTED, strict=True):
        name, written, planted, _ = PLANTED[bug]
        kernel = tmp_path / namespace / namespace / "kernels" / name
        text = kernel.read_text(encoding="utf-8")
        assert written in text, text
        kernel.write_text(text.replace(written, planted), encoding="utf-8")
    # one pytest process: the control's tests (-k matches its folder's name; all but the feature tiers, as
    # project_outcomes runs by default), and on each planted project only the tests that must catch its bug
    caught_by = " or ".join(sorted({must_fail for _, _, _, must_fail in PLANTED.values()}))
    found = project_outcomes([tmp_path / namespace for namespace in names], tmp_path / "junit.xml",
                             f"({CONTROL} and {NOT_FEATURES}) or {caught_by}")
    control = found[CONTROL]
    assert len(control) > 40, sorted(control)
    broken = {name: r["outcome"] for name, r in control.items() if r["outcome"] not in ("passed", "skipped")}
    assert not broken, {name: control[name]["message"][-2000:] for name in broken}
    for namespace, bug in zip(names[1:], PLANTED, strict=True):
        name, _, _, must_fail = PLANTED[bug]
        assert set(found[namespace]) == {must for _, _, _, must in PLANTED.values()}, sorted(found[namespace])
        failed = {test for test, r in found[namespace].items() if r["outcome"] == "failed"}
        assert must_fail in failed, (bug, sorted(failed))
        message = found[namespace][must_fail]["message"]
        assert "ops[" in message or name in message, (bug, message[-2000:])
