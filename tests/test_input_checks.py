"""`ops[i].checks`: conditions on the inputs, checked by the generated fake with torch._check. A planted call the
kernel refuses (gamma not x's trailing shape, an odd last size) is refused by the fake while tracing, naming the
spec's field; its correct twin traces; bad `checks:` are located errors that write nothing."""

from __future__ import annotations

import pytest
from forked_python import run_pytest, run_python
from new_helpers import STYLES, opgen

SPEC = """
namespace: chk_{style}
style: {style}
device: cpu
ops:
  - schema: "rms_norm(Tensor x, Tensor gamma, float eps=1e-6) -> Tensor"
    outputs:
      out0: {{like: x}}
    let: {{last: "x.shape[-1]"}}
    checks: ["gamma.shape == x.shape[-1:]", "last % 2 == 0"]
    reference: |
      return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
    examples:
      - {{x: {{shape: [4, 8]}}, gamma: {{shape: [8]}}}}
"""
TRACE = """
import torch, chk_{style}
from torch._subclasses.fake_tensor import FakeTensorMode
op = torch.ops.chk_{style}.rms_norm.default
for x, gamma in (([4, 128], [64]), ([4, 7], [7]), ([4, 8], [8])):
    try:
        op(torch.randn(x), torch.randn(gamma))
        kernel = "ok"
    except RuntimeError:
        kernel = "refused"
    with FakeTensorMode():
        try:
            op(torch.empty(x), torch.empty(gamma))
            print(kernel, "traced")
        except RuntimeError as error:
            print(kernel, "refused:", str(error).splitlines()[0])
"""


@pytest.mark.parametrize("style", STYLES)
def test_the_fake_refuses_what_the_checks_refuse_and_traces_the_twin(tmp_path, style):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(style=style), encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    run = run_python(["-c", TRACE.format(style=style)], cwd=tmp_path / "p", timeout=300)
    assert run.returncode == 0, run.stderr
    planted, odd, twin = run.stdout.splitlines()
    # the kernel refuses gamma [64] against x [4, 128]: so does the fake, naming the spec's field
    assert planted.startswith(f"refused refused: chk_{style}::rms_norm: ops[0].checks[0] in opgen.yaml does not hold: "
                              "gamma.shape == x.shape[-1:]"), planted
    # the kernel takes an odd last size; the spec's contract refuses it anyway (a `let:` name read by a check)
    assert odd == f"ok refused: chk_{style}::rms_norm: ops[0].checks[1] in opgen.yaml does not hold: last % 2 == 0"
    assert twin == "ok traced"


@pytest.mark.parametrize("checks, message", [
    ('"x.dim() == 2"', "ops[0].checks must be a list of conditions"),
    ('["gamma.shape == y.shape"]', "ops[0].checks[0]"),
    ('["x.dim() == 2", "x.shape[0]"]', "ops[0].checks[1]"),
])
def test_bad_checks_are_located_errors_and_write_nothing(tmp_path, checks, message):
    text = SPEC.format(style="library").replace('["gamma.shape == x.shape[-1:]", "last % 2 == 0"]', checks)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "p"))
    assert done.returncode == 2 and message in done.stderr and "spec.yaml:" in done.stderr, done.stderr
    assert not (tmp_path / "p").exists()


def test_checks_on_a_tagged_op_are_refused(tmp_path):
    """torch writes a tagged op's fake: checks would silently not run."""
    spec = tmp_path / "spec.yaml"
    spec.write_text('namespace: tagged_chk\ndevice: cpu\nops:\n  - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"\n'
                    '    tags: [inplace]\n    checks: ["x.dim() == 2"]\n', encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "p"))
    assert done.returncode == 2 and "ops[0].checks: the op is tagged torch.Tag.inplace" in done.stderr, done.stderr
    assert not (tmp_path / "p").exists()


GATED = """
namespace: gated
style: library
device: cpu
ops:
  - schema: "gelu_tanh_and_mul(Tensor x) -> Tensor"
    checks: ["x.shape[-1] % 2 == 0"]
    outputs:
      out0: {{shape: "x.shape[:-1] + [x.shape[-1] // 2]", dtype: "x.dtype"}}
    reference: |
      d = x.shape[-1] // 2
      return torch.nn.functional.gelu(x[..., :d].float(), approximate="tanh").mul(x[..., d:].float()).to(x.dtype)
    examples:
      - {{x: {{shape: [4, {last}], dtype: float16}}}}
"""


@pytest.mark.slow  # runs the generated project's semantics tier
@pytest.mark.parametrize(("last", "passes"), [(256, True), (255, False)], ids=["even-example", "odd-example"])
def test_a_size_variant_outside_the_checks_is_left_out_but_an_example_outside_them_fails(tmp_path, last, passes):
    """A kernel taking an odd last size (as gelu_and_mul's reference does, dropping a column) is no bug of the fake's
    when `checks:` refuses odd sizes: the odd size variants are outside the op's contract and left out with a warning.
    An example outside the checks still fails, naming the example."""
    spec = tmp_path / "gated.yaml"
    spec.write_text(GATED.format(last=last), encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    run = run_pytest(["-q", "-p", "no:cacheprovider", "-n", "0", "-k", "follows_the_semantics"], cwd=tmp_path / "p")
    assert (run.returncode == 0) == passes, run.stdout[-3000:]
    if not passes:  # (here the kernel raises first, on the example itself)
        assert "ops[0].examples[0]" in run.stdout, run.stdout[-3000:]
