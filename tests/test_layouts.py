"""Layouts by declaration, through generated projects: an output is contiguous unless the spec says `like:`, the CPU
kernel opgen writes from `reference:` returns what the spec declares, and an input the kernel needs contiguous is
declared (`contiguous: [x]`) and passed so by the registration. Specs a new user writes, whose reference keeps an
input's layout, generate projects that pass; a kernel that fails on strided inputs is told both fixes."""

from __future__ import annotations

import pytest
from new_helpers import REPO, STYLES, opgen, project_outcomes

# generates projects and runs their tests: every test of the module on one worker, where `layouts` runs them once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("layouts")]

KEEPS_LAYOUT = """\
namespace: {namespace}
style: {style}
device: cpu
ops:
  - schema: "first(Tensor[] xs) -> Tensor"
    outputs: {{out0: {{shape: "xs[0].shape", dtype: "xs[0].dtype"}}}}
    reference: |
      return xs[0].clone()
    examples: [{{xs: [{{shape: [4, 3]}}, {{shape: [4, 3]}}]}}]
  - schema: "swiglu(Tensor x) -> Tensor"
    outputs: {{out0: {{shape: "x.shape[:-1] + [x.shape[-1] // 2]", dtype: "x.dtype"}}}}
    reference: |
      a, b = x.chunk(2, dim=-1)
      return torch.nn.functional.silu(a) * b
    examples: [{{x: {{shape: [4, 16]}}}}]
"""

VIEWS = """\
namespace: {namespace}
style: {style}
device: cpu
ops:
  - schema: "{op}(Tensor(a!) cache, Tensor rows, Tensor index) -> ()"
    reference: |
      cache.index_copy_(0, index, rows.view(-1, cache.shape[-1]))
    examples: [{{cache: {{shape: [8, 6]}}, rows: {{shape: [2, 3, 2]}}, index: {{values: [5, 1]}}}}]
{contiguous}"""

# vLLM's naming: a positional written argument called `out` (Dynamo refuses a non-contiguous `out=` keyword)
WRITTEN_OUT = (REPO / "tests" / "fixtures" / "written_out" / "silu_and_mul_out.yaml").read_text(encoding="utf-8")
# the planted kernel writes `out`'s memory as if it were contiguous: right values only where it is
WRITES_AS_IF_CONTIGUOUS = """\
    dense = out.as_strided(out.shape, torch.empty(out.shape, device="meta").stride())
    dense.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])
"""


def _project(tmp_path, text: str, name: str):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text, encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / name))
    assert done.returncode == 0, done.stderr
    return tmp_path / name, done


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The projects of this module's tests, tested in ONE pytest process (its start, torch's import, is most of a
    small project's run): (their folder, {project: {test: outcome}}, {project: what `opgen new` printed on stderr})."""
    root = tmp_path_factory.mktemp("layouts")
    specs = {f"keep_{style}": KEEPS_LAYOUT.format(namespace=f"keep_{style}", style=style) for style in STYLES}
    specs["bare"] = VIEWS.format(namespace="views", op="put_rows", style="library", contiguous="")
    specs["declared"] = VIEWS.format(namespace="views_ok", op="put_rows_ok", style="custom_op",
                                     contiguous="    contiguous: [rows]\n")
    for project in (*STYLES, "planted"):
        specs[f"out_{project}"] = WRITTEN_OUT.replace("namespace: vllm_out", f"namespace: out_{project}").replace(
            "style: library", f"style: {'library' if project == 'planted' else project}")
    said = {name: _project(root, text, name)[1].stderr for name, text in specs.items()}
    kernel = root / "out_planted" / "out_planted" / "kernels" / "silu_and_mul_cpu.py"
    correct = "    out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])\n"
    kernel.write_text(kernel.read_text(encoding="utf-8").replace(correct, WRITES_AS_IF_CONTIGUOUS), encoding="utf-8")
    return root, project_outcomes([root / name for name in specs], root / "junit.xml"), said


def test_references_that_keep_an_inputs_layout_generate_passing_projects(layouts):
    root, found, _ = layouts
    kernel = (root / "keep_library" / "keep_library" / "kernels" / "first_cpu.py").read_text(encoding="utf-8")
    assert "return xs[0].clone().contiguous()" in kernel  # what the spec declares: no `like:`, a contiguous output
    for style in STYLES:
        results = found[f"keep_{style}"]
        failed = {name: result["message"][:600] for name, result in results.items() if result["outcome"] == "failed"}
        assert not failed, (style, failed)
        assert results["test_swiglu_non_contiguous_inputs"]["outcome"] == "passed", style


def test_a_view_of_a_strided_input_is_told_both_fixes_and_the_declaration_makes_it_pass(layouts):
    _, found, said = layouts
    assert "ops[0].reference calls .view(" in said["bare"]  # said at generation, before any test runs
    results = {**found["bare"], **found["declared"]}
    failed = results["test_put_rows_non_contiguous_inputs"]
    assert failed["outcome"] == "failed", failed
    message = failed["message"]
    assert "fails on a transposed 'rows'" in message and "view size is not compatible" in message, message
    assert "e.g. .reshape instead of .view" in message and "declare `contiguous: [rows]` in ops[0]" in message, message
    assert results["test_put_rows_ok_non_contiguous_inputs"]["outcome"] == "passed", results
    others = {name: r["outcome"] for name, r in results.items() if r["outcome"] == "failed"}
    assert others == {"test_put_rows_non_contiguous_inputs": "failed"}, others



def test_a_positional_written_argument_named_out_is_compiled_transposed(layouts):
    """`silu_and_mul(Tensor(a!) out, Tensor x)`: the compiled tiers pass `out` by position, not as Dynamo's `out=`
    keyword (which must be contiguous), so the layout tier runs its compiled call on a transposed `out` and a correct
    kernel passes in both styles; a kernel writing `out` as if it were contiguous still fails it."""
    _, found, _ = layouts
    for style in STYLES:
        results = found[f"out_{style}"]
        failed = {name: result["message"][:600] for name, result in results.items() if result["outcome"] == "failed"}
        assert not failed, (style, failed)
        for tier in ("non_contiguous_inputs", "compiled_matches_eager", "opcheck", "enters_graph_with_fake_tensors"):
            assert results[f"test_silu_and_mul_{tier}"]["outcome"] == "passed", (style, tier)
    planted = found["out_planted"]
    failed = {name for name, result in planted.items() if result["outcome"] == "failed"}
    assert failed == {"test_silu_and_mul_non_contiguous_inputs"}, failed
    message = planted["test_silu_and_mul_non_contiguous_inputs"]["message"]
    assert "gives other values for transposed inputs than for contiguous ones" in message, message
