"""The fusion checks of tests/graph_checks.py on the very patterns.py opgen generates: each check catches a planted
bug, its message naming `ops[i].fusion`, and passes the correct twin.

The two fused examples (examples/add_rms_norm.yaml, examples/kv_cache_update.yaml) are rendered in-process under
namespaces of their own, imported, and checked here; tests/test_examples.py runs their generated tests in both
styles. Planted bugs replace one piece of a generated `Fusion` (its composite, its conditions, its recheck) or of the
package's registration."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest
import torch
from new_helpers import REPO, opgen, run_generated_tests

from opgen.npugraph_ex import loader
from opgen.project_tests import GRAPH_CHECKS, load
from opgen.render.templates import render_package
from opgen.spec.load import load_spec_text

checks = load(GRAPH_CHECKS)
NPUGRAPH_EX = loader().unavailable()
ROUTES = [pytest.param("npugraph_ex", marks=pytest.mark.skipif(NPUGRAPH_EX is not None, reason=str(NPUGRAPH_EX))),
          "inductor"]


class Generated:
    """A generated project, imported: its package's patterns module, and its tests' `Op` and examples."""

    def __init__(self, root, example: str, namespace: str, stem: str):
        text = (REPO / "examples" / f"{example}.yaml").read_text(encoding="utf-8")
        old = next(line for line in text.splitlines() if line.startswith("namespace: "))
        spec = load_spec_text(text.replace(old, f"namespace: {namespace}"), f"{example}.yaml")
        project = root / namespace
        for planned in render_package(spec):
            path = project / planned.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(planned.content, encoding="utf-8")
        sys.path.insert(0, str(project))
        self.patterns = importlib.import_module(f"{namespace}.patterns")
        module = importlib.util.spec_from_file_location(f"{namespace}_tests", project / "tests" / "test_graph_entry.py")
        tests = importlib.util.module_from_spec(module)
        module.loader.exec_module(tests)
        self.op = getattr(tests, stem.upper())
        self.examples = getattr(tests, f"{stem}_examples")
        self.fusion = self.patterns.FUSIONS[0]

    def first(self, seed: int = 0) -> dict:
        return self.examples(seed)[0]

    def registering(self, monkeypatch, fusion):
        """The package's own register_fusions, registering `fusion` in place of its generated one."""
        monkeypatch.setattr(self.patterns, "FUSIONS", (fusion,))
        monkeypatch.setattr(self.patterns, "FUSION_PASS", self.patterns.FusionPass())  # a pass of its own
        return self.patterns.register_fusions


@pytest.fixture(scope="module")
def norm(tmp_path_factory):
    return Generated(tmp_path_factory.mktemp("fusion"), "add_rms_norm", "fz_norm", "add_rms_norm")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Generated(tmp_path_factory.mktemp("fusion"), "kv_cache_update", "fz_cache", "kv_cache_update")


# --- the composite is the op ------------------------------------------------------------------------


def test_a_composite_that_is_not_the_op_is_a_wrong_pattern(norm):
    checks.assert_fusion_matches_the_op(norm.op, norm.fusion, norm.examples)

    def without_gamma(x1, x2, gamma, epsilon=1e-06):  # forgets `* gamma`
        x = x1 + x2
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + epsilon)
        return (x.float() * rstd).to(x.dtype), rstd, x
    wrong = dataclasses.replace(norm.fusion, composite=without_gamma)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion in opgen.yaml: its composite is not what "
                                                 r"fz_norm::add_rms_norm computes, on \d+ of \d+ calls") as caught:
        checks.assert_fusion_matches_the_op(norm.op, wrong, norm.examples)
    assert caught.value.kind == "fusion-wrong-pattern"
    assert "ops[0].examples[0], seed 0: ops[0].outputs.y:" in str(caught.value)


def test_a_condition_that_lets_the_fusion_replace_what_the_kernel_refuses_names_when(cache):
    checks.assert_fusion_matches_the_op(cache.op, cache.fusion, cache.examples)
    unconditional = dataclasses.replace(cache.fusion, applies=lambda **_: True)  # no `slot_mapping.dtype == int64`
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion would replace its composite by "
                                                 r"fz_cache::kv_cache_update on ops\[0\].examples\[0\] with "
                                                 r"slot_mapping as int32, .*add a condition to ops\[0\].fusion.when"):
        checks.assert_fusion_matches_the_op(cache.op, unconditional, cache.examples)


def test_a_fusion_that_applies_to_no_example_proves_nothing(norm):
    never = dataclasses.replace(norm.fusion, applies=lambda **_: False)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion applies to no call of ops\[0\].examples"):
        checks.assert_fusion_matches_the_op(norm.op, never, norm.examples)


# --- it fires on its composite ---------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_the_generated_fusions_fire_in_place_on_their_composite(norm, cache, route):
    checks.assert_fusion_fires(norm.op, norm.fusion, norm.patterns.register_fusions, norm.first, route)
    checks.assert_fusion_fires(cache.op, cache.fusion, cache.patterns.register_fusions, cache.first, route)


@pytest.mark.parametrize("route", ROUTES)
def test_a_pattern_traced_from_another_composite_does_not_fire(norm, monkeypatch, route):
    def reduces_dim_one(x1, x2, gamma):  # `mean(1)` where the composite models write has `mean(-1)`
        x = x1 + x2
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(1, keepdim=True) + 1e-06)
        return (xf * rstd * gamma.float()).to(x.dtype), rstd, x
    planted = dataclasses.replace(norm.fusion, search=reduces_dim_one)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion in opgen.yaml did not fire under " + route +
                       r": fz_norm::add_rms_norm is not in the graph after the pattern pass") as caught:
        checks.assert_fusion_fires(norm.op, planted, norm.registering(monkeypatch, planted), norm.first, route)
    assert caught.value.kind == "fusion-not-fired"


@pytest.mark.parametrize("route", ROUTES)
def test_a_pattern_covering_part_of_the_composite_leaves_its_nodes(norm, monkeypatch, route):
    def all_but_the_cast(x1, x2, gamma):  # the composite without its last `.to(x.dtype)`
        x = x1 + x2
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-06)
        return xf * rstd * gamma.float(), rstd, x

    def op_then_float(x1, x2, gamma):
        y, rstd, x = torch.ops.fz_norm.add_rms_norm.default(x1, x2, gamma)
        return y.float(), rstd, x
    planted = dataclasses.replace(norm.fusion, search=all_but_the_cast, replacement=op_then_float)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion under " + route + r": fz_norm::add_rms_norm is in "
                       r"the graph, but nodes of the composite are left") as caught:
        checks.assert_fusion_fires(norm.op, planted, norm.registering(monkeypatch, planted), norm.first, route)
    assert caught.value.kind == "fusion-partial"
    left = str(caught.value).split("left (the pattern replaced part of it):")[1].splitlines()[1]
    assert "_to_copy" in left or "convert_element_type" in left, left  # a cast of the composite's is left


# --- near misses -----------------------------------------------------------------------------------


def test_the_near_misses_are_another_constant_an_escaping_value_another_dim_and_a_refused_call(norm, cache):
    tried = [what for what, _, _ in checks.fusion_near_misses(norm.op, norm.fusion, norm.examples)]
    assert tried[0] == "epsilon=0.5 in place of 1e-06"
    assert tried[1].startswith("an intermediate value of the composite used outside it (%_to_copy")
    assert tried[2].startswith("the composite reducing over another dim (%mean") and "[0], True" in tried[2]
    assert len(tried) == 3  # gamma is 1-D in every example: `gamma.dim() == 1` holds on all of them
    tried = [what for what, _, _ in checks.fusion_near_misses(cache.op, cache.fusion, cache.examples)]
    assert tried[0].startswith("an intermediate value of the composite used outside it (%abs_1")  # not a new cache
    assert "[0, 2]" in tried[1]
    assert tried[2] == "ops[0].examples[0] with slot_mapping as int32, where ops[0].fusion.when does not hold"


@pytest.mark.parametrize("route", ROUTES)
def test_near_misses_stay_unfused_unless_the_literal_recheck_or_the_condition_is_gone(norm, cache, monkeypatch,
                                                                                        route):
    checks.assert_near_misses_stay_unfused(norm.op, norm.fusion, norm.patterns.register_fusions, norm.examples, route)

    class Loose(norm.patterns.Fusion):
        """Accepts the first, open match: no recheck of shapes, dims and constants."""

        def matches(self, match, trace_fn):
            return True
    loose = Loose(**{f.name: getattr(norm.fusion, f.name) for f in dataclasses.fields(norm.fusion)})
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion in opgen.yaml fired under " + route + r" on a near "
                       r"miss it must not replace: epsilon=0.5 in place of 1e-06") as caught:
        checks.assert_near_misses_stay_unfused(norm.op, loose, norm.registering(monkeypatch, loose), norm.examples,
                                               route)
    assert caught.value.kind == "fusion-fires-on-near-miss"
    monkeypatch.undo()

    class IgnoresWhen(cache.patterns.Fusion):
        """Registers the pattern without `when:` (its `applies` still says where it holds)."""

        def matches(self, match, trace_fn):
            return cache.patterns.Fusion.matches(dataclasses.replace(cache.fusion, applies=lambda **_: True), match,
                                                 trace_fn)
    ignores = IgnoresWhen(**{f.name: getattr(cache.fusion, f.name) for f in dataclasses.fields(cache.fusion)})
    with pytest.raises(checks.CheckFailed, match=r"fired under " + route + r" on a near miss it must not replace: "
                       r"ops\[0\].examples\[0\] with slot_mapping as int32, where ops\[0\].fusion.when does not hold"):
        checks.assert_near_misses_stay_unfused(cache.op, ignores, cache.registering(monkeypatch, ignores),
                                               cache.examples, route)


# --- specs the bundled examples do not cover ------------------------------------------------------

NEW_FUSIONS = """\
namespace: fz_new
style: {style}
device: npu
ops:
  - schema: "swiglu(Tensor x) -> Tensor"
    outputs:
      out0: {{shape: "x.shape[:-1] + [x.shape[-1] // 2]", dtype: "x.dtype"}}
    reference: |
      a, b = x.chunk(2, dim=-1)
      return torch.nn.functional.silu(a) * b
    fusion: {{}}
    examples:
      - x: {{shape: [4, 64], dtype: float16}}
  - schema: "scaled_softmax(Tensor x, int dim=-1, float scale=1.0) -> Tensor"
    outputs:
      out0: {{shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      return torch.softmax(x * scale, dim=dim)
    fusion: {{inputs: [x, scale]}}
    examples:
      - {{x: {{shape: [2, 8, 16], dtype: float16}}, scale: 0.125}}
  - schema: "quant_scatter_(Tensor(a!) cache, Tensor x, Tensor idx, float scale) -> ()"
    reference: |
      cache[idx] = (x / scale).round().clamp(-128, 127).to(torch.int8)
    fusion: {{inputs: [cache, x, idx, scale], when: ["idx.dtype == int64"]}}
    examples:
      - cache: {{shape: [16, 8], dtype: int8}}
        x: {{shape: [4, 8], dtype: float32}}
        idx: {{values: [3, 0, 9, 15], dtype: int64}}
        scale: 0.05
"""


def test_fusions_of_new_specs_pass_their_generated_tests(tmp_path):
    """Shapes of spec the examples lack, each once broken: an op of one input (its trace inputs were `(x)`, not a
    tuple), a constant before a matched input (the search passed `scale` as `dim`), and a single-output op, whose
    replacement node carries the stack trace of the composite's last node (it was counted as left over).
    patterns.py does not depend on the style (test_examples runs the fused examples in both)."""
    spec = tmp_path / "fused.yaml"
    spec.write_text(NEW_FUSIONS.format(style="library"), encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "project"))
    assert done.returncode == 0, done.stderr
    results = run_generated_tests([tmp_path / "project"], tmp_path / "junit.xml")
    fusion = {name: r for name, r in results.items() if "_fusion_" in name}
    expected = 3 * (1 + 2 * len(ROUTES))  # per op: composite-is-the-op, then fires and near misses per route
    assert len(fusion) == expected, sorted(fusion)
    for name, result in fusion.items():
        wanted = "skipped" if "npugraph_ex" in name and NPUGRAPH_EX is not None else "passed"
        assert result["outcome"] == wanted, f"{name}: {result['message'][-3000:]}"
    others = {name: r["outcome"] for name, r in results.items() if r["outcome"] not in ("passed", "skipped")}
    assert not others, others


# --- what the generated README tells a user to do -------------------------------------------------


def test_register_fusions_once_then_plain_torch_compile_calls_the_op(norm):
    """`register_fusions()` then `torch.compile(model)` with Inductor itself (not the tests' aot_eager stand-in): the
    op is in the code Inductor generates and values equal eager; a post-grad pass already installed stays and runs,
    and a second call installs nothing twice."""
    from torch._inductor.utils import run_and_get_code

    seen = []

    def user_pass(graph):
        seen.append(len(graph.nodes))

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(32, 32)
            self.gamma = torch.nn.Parameter(torch.rand(32) + 0.5)

        def forward(self, x1):
            x = x1 + self.linear(x1)  # the Llama form of the composite, written out in the model
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-06)
            return (xf * rstd * self.gamma.float()).to(x.dtype), x

    model, x1 = Block(), torch.randn(4, 32)
    with torch._inductor.config.patch(post_grad_custom_post_pass=user_pass), torch.no_grad():
        norm.patterns.register_fusions()
        norm.patterns.register_fusions()
        installed = torch._inductor.config.post_grad_custom_post_pass
        assert installed == [user_pass, norm.patterns.FUSION_PASS], installed
        torch.compiler.reset()
        out, code = run_and_get_code(torch.compile(model), x1)
    assert seen, "the pass installed before register_fusions() did not run"
    assert any("fz_norm.add_rms_norm" in text for text in code), "\n".join(code)[-3000:]
    torch.testing.assert_close(out, model(x1))
