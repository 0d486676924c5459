"""The input variants in generated projects: a spec written as a new user would (a softmax over a dim, a promoting
axpy, optional weight and bias, a paged-cache write declared contiguous with its slots drawn as unique rows, a
rearranging in-place write, a gated activation whose checks want an even last size, a cast with a dtype-code default) passes its generated tests out of the box in the
custom_op style, and a kernel bug of a kind only an input off the examples shows, one per op, fails them naming the
variant; two more are planted in the bundled rms_norm example (library style). All projects run in one pytest
process, their oracle, semantics, writes, layout and gradcheck tiers only (tests/test_input_space.py proves every
kind on the checks themselves)."""

from __future__ import annotations

from pathlib import Path

import pytest
from new_helpers import REPO, opgen_in_one_process, project_outcomes

pytestmark = pytest.mark.slow

SPEC = """\
namespace: {namespace}
style: custom_op
device: npu
dtype_codes: {{39: float8_e4m3fn}}
ops:
  - schema: "softmax_scaled(Tensor x, float scale=1.0, int dim=-1) -> Tensor"
    outputs:
      out0: {{shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      return torch.softmax(x.float() * scale, dim=dim).to(x.dtype)
    examples:
      - {{x: {{shape: [4, 8, 16], dtype: float16}}}}
  - schema: "axpy(Tensor a, Tensor b, Scalar alpha=1) -> Tensor"
    outputs:
      out0: {{shape: "broadcast(a.shape, b.shape)", dtype: "promote(a, b)"}}
    reference: |
      return torch.add(a, b, alpha=alpha)
    examples:
      - {{a: {{shape: [4, 16], dtype: float16}}, b: {{shape: [4, 16], dtype: float16}}, alpha: 2.0}}
  - schema: "affine(Tensor x, Tensor? weight=None, Tensor? bias=None) -> Tensor"
    outputs:
      out0: {{shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      y = x * weight if weight is not None else x.clone()
      return y + bias if bias is not None else y
    examples:
      - {{x: {{shape: [4, 16]}}, weight: {{shape: [16]}}, bias: {{shape: [16]}}}}
  - schema: "cache_write_(Tensor(a!) cache, Tensor slots, Tensor rows) -> ()"
    contiguous: [cache]
    inputs:
      slots: {{index_into: "cache.shape[0] * cache.shape[1]", unique: true}}
    reference: |
      cache.view(-1, cache.shape[-1])[slots] = rows
    examples:
      - {{cache: {{shape: [4, 8, 16], dtype: float16}}, slots: {{shape: [5], dtype: int64}},
         rows: {{shape: [5, 16], dtype: float16}}}}
  - schema: "flip_rows_(Tensor(a!) x) -> ()"
    reference: |
      x.copy_(x.flip(0))
    examples:
      - {{x: {{shape: [6, 4]}}}}
  - schema: "gelu_and_mul(Tensor x) -> Tensor"
    checks: ["x.shape[-1] % 2 == 0"]
    outputs:
      out0: {{shape: "x.shape[:-1] + [x.shape[-1] // 2]", dtype: "x.dtype"}}
    reference: |
      d = x.shape[-1] // 2
      return (torch.nn.functional.gelu(x[..., :d].float(), approximate="tanh") * x[..., d:].float()).to(x.dtype)
    examples:
      - {{x: {{shape: [4, 256], dtype: float16}}}}
  - schema: "cast_to(Tensor x, ScalarType dst_type=39) -> Tensor"
    outputs:
      out0: {{shape: "x.shape", dtype: "dst_type"}}
    reference: |
      return x.to(dst_type)
    examples:
      - {{x: {{shape: [4, 16]}}, dst_type: int8}}
"""

# (file under the package, old text, new text, what the failure must name): one bug per op of SPEC
NEW_SPEC_BUGS = {
    "softmax_scaled": ("kernels/softmax_scaled_cpu.py", "return torch.softmax(x.float() * scale, dim=dim).to(x.dtype)",
                       "e = (x.float() * scale).exp()\n    return (e / e.sum(dim, keepdim=True)).to(x.dtype)",
                       "with its floating inputs scaled to about"),
    "axpy": ("kernels/axpy_cpu.py", "return torch.add(a, b, alpha=alpha)",
             "return torch.add(a, b.to(a.dtype), alpha=alpha)", "(the semantics promote it)"),
    "affine": ("kernels/affine_cpu.py", "(y + bias if bias is not None else y)",
               "(y + bias if bias is not None and weight is not None else y)", "with weight None"),
    "cache_write_": ("ops.py", "cache.is_contiguous(),", "True,", "a non-contiguous 'cache' must be refused"),
    "gelu_and_mul": ("kernels/gelu_and_mul_cpu.py", "* x[..., d:].float())",  # a tile of 4096 columns only
                     "* x[..., d:].float() * (torch.arange(d) < 4096))",
                     "with its size 256 as 9730 (9729 is outside ops[5].checks[0])"),
}
# the clean gelu_and_mul kernel refuses an odd last size, as real ones do (the spec's checks: say it is no input)
EVEN_ONLY = ("kernels/gelu_and_mul_cpu.py", "d = x.shape[-1] // 2",
             'torch._check(x.shape[-1] % 2 == 0, lambda: "the last size must be even")\n    d = x.shape[-1] // 2')
# bugs in the bundled rms_norm example: a reduction over one tile of columns, a fake wrong for bfloat16
RMS_NORM_BUGS = {
    "tile": ("kernels/rms_norm_cpu.py", "xf.pow(2).mean(dim=dims, keepdim=True)",
             "(xf[..., :1024].pow(2).sum(dim=dims, keepdim=True) / xf[0].numel())", "with its size 128 as 1537"),
    "fake": ("ops.py", "    y = torch.empty_like(x)\n",
             "    y = torch.empty_like(x, dtype=torch.float16 if x.dtype == torch.bfloat16 else x.dtype)\n",
             "ops[0].outputs.y.dtype: the fake function gives torch.float16 on ops[0].examples["),
}
TIERS = "matches_the_reference or follows_the_semantics or writes_what or non_contiguous or gradcheck"


def _projects(tmp: Path, specs: dict[str, str]) -> list[Path]:
    """One project per spec text (name -> text), generated by `opgen new` in one process (its start and imports
    are most of a generation)."""
    for name, spec_text in specs.items():
        (tmp / f"{name}.yaml").write_text(spec_text, encoding="utf-8")
    codes = opgen_in_one_process(*(["new", str(tmp / f"{name}.yaml"), "-o", str(tmp / name)] for name in specs))
    assert codes == [0] * len(specs), codes
    return [tmp / name for name in specs]


def _plant(project: Path, package: str, file: str, old: str, new: str) -> None:
    path = project / package / file
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_new_specs_pass_their_variants_and_bugs_only_variants_show_fail_naming_them(tmp_path):
    rms = (REPO / "examples" / "rms_norm.yaml").read_text(encoding="utf-8")
    clean, planted, *rms_projects = _projects(tmp_path, {
        "iv_clean": SPEC.format(namespace="iv_clean"), "iv_planted": SPEC.format(namespace="iv_planted"),
        **{f"iv_rms_{name}": rms.replace("namespace: myops", f"namespace: iv_rms_{name}") for name in RMS_NORM_BUGS}})
    _plant(clean, "iv_clean", *EVEN_ONLY)
    for file, old, new, _ in NEW_SPEC_BUGS.values():
        _plant(planted, "iv_planted", file, old, new)
    bundled = dict(zip(RMS_NORM_BUGS, rms_projects, strict=True))
    for name, (file, old, new, _) in RMS_NORM_BUGS.items():
        _plant(bundled[name], f"iv_rms_{name}", file, old, new)
    found = project_outcomes([clean, planted, *bundled.values()], tmp_path / "junit.xml", TIERS)
    failures = {project: {test: result["message"] for test, result in tests.items() if result["outcome"] != "passed"}
                for project, tests in found.items()}
    assert len(found["iv_clean"]) >= 7 * 4 and failures["iv_clean"] == {}, failures["iv_clean"]  # out of the box
    for op, (_, _, _, named) in NEW_SPEC_BUGS.items():
        messages = [message for test, message in failures["iv_planted"].items() if test.startswith(f"test_{op}_")]
        assert any(named in message for message in messages), (op, messages)
    unplanted = {"flip_rows_", "cast_to"}  # a rearranging write and a dtype-code default: correct, and passing
    assert not [test for test in failures["iv_planted"] if any(test.startswith(f"test_{op}_") for op in unplanted)]
    for name, (_, _, _, named) in RMS_NORM_BUGS.items():
        messages = failures[f"iv_rms_{name}"].values()
        assert any(named in message for message in messages), (name, failures[f"iv_rms_{name}"])
