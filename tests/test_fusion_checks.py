"""The fusion checks of opgen.testing on the very patterns.py opgen generates: each check catches a planted
bug, its message naming `ops[i].fusion`, and passes the correct twin.

The fused examples (examples/add_rms_norm.yaml, kv_cache_update.yaml, rms_norm.yaml, rotary.yaml) are rendered
in-process under namespaces of their own, imported, and checked here; tests/test_examples.py runs their generated
tests in both styles. Planted bugs replace one piece of a generated `Fusion` (its composite, its conditions, its
recheck, its traces) or of the package's registration, or of the spec (an output's layout)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest
import torch
from new_helpers import REPO, opgen, run_generated_tests
from npugraph_ex_state import NEEDS_NPUGRAPH_EX, NPUGRAPH_EX, needs_npugraph_ex
from torch._subclasses.fake_tensor import FakeTensorMode

from opgen import testing as checks
from opgen.render.templates import render_package
from opgen.spec.load import load_spec_text
from opgen.testing import npugraph_ex_cpu
from opgen.testing.fusion import _fusion_model, _split, compile_with_fusion, fusion_near_misses

ROUTES = [pytest.param("npugraph_ex", marks=NEEDS_NPUGRAPH_EX),
          "inductor"]


class Generated:
    """A generated project, imported: its package's patterns module, and its tests' `Op` and examples."""

    def __init__(self, root, example: str, namespace: str, stem: str, edit=lambda text: text):
        text = (REPO / "examples" / f"{example}.yaml").read_text(encoding="utf-8")
        old = next(line for line in text.splitlines() if line.startswith("namespace: "))
        spec = load_spec_text(edit(text.replace(old, f"namespace: {namespace}")), f"{example}.yaml")
        project = root / namespace
        for planned in render_package(spec):
            path = project / planned.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(planned.content, encoding="utf-8")
        sys.path.insert(0, str(project))
        self.patterns = importlib.import_module(f"{namespace}.patterns")
        module = importlib.util.spec_from_file_location(f"{namespace}_tests",
                                                        project / "tests" / f"test_{spec.package}.py")
        tests = importlib.util.module_from_spec(module)
        module.loader.exec_module(tests)
        self.op = getattr(tests, stem.upper())
        self.examples = getattr(tests, f"{stem}_examples")
        self.forms = getattr(self.patterns, f"{stem.upper()}_FORMS")
        self.fusion = self.forms[0]

    def first(self, seed: int = 0) -> dict:
        return self.examples(seed)[0]

    def registering(self, monkeypatch, *fusions):
        """The package's own register_fusions, registering `fusions` in place of its generated ones."""
        monkeypatch.setattr(self.patterns, "FUSIONS", fusions)
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

    def without_gamma(x1, x2, gamma, epsilon=1e-06):  # forgets `gamma *`
        x = x1 + x2
        hidden_states = x.to(torch.float32)
        rstd = torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + epsilon)
        return (hidden_states * rstd).to(x.dtype), rstd, x
    wrong = dataclasses.replace(norm.fusion, composite=without_gamma)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] in opgen.yaml: its composite is not what "
                                                 r"fz_norm::add_rms_norm computes, on \d+ of \d+ calls") as caught:
        checks.assert_fusion_matches_the_op(norm.op, wrong, norm.examples)
    assert caught.value.kind == "fusion-wrong-pattern"
    assert "ops[0].examples[0], seed 0: ops[0].outputs.y:" in str(caught.value)


def test_the_composite_is_compared_at_the_forms_tolerances_not_the_ops(norm):
    """The olmo2 form rounds once more than the op in bfloat16 (within the op's device tolerance, 5e-2): it passes
    at its stated `tolerances:`, and the same form without them fails (a replacement changes no value silently)."""
    olmo2 = norm.forms[1]
    assert olmo2.tolerances == {torch.bfloat16: (1.6e-2, 1e-6)}
    checks.assert_fusion_matches_the_op(norm.op, olmo2, norm.examples)
    unstated = dataclasses.replace(olmo2, tolerances={})
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[1\] in opgen.yaml: its composite is not "
                                                 r"what fz_norm::add_rms_norm computes") as caught:
        checks.assert_fusion_matches_the_op(norm.op, unstated, norm.examples)
    assert "bfloat16" in str(caught.value) or "BFloat16" in str(caught.value)


def test_a_condition_that_lets_the_fusion_replace_what_the_kernel_refuses_names_when(cache):
    checks.assert_fusion_matches_the_op(cache.op, cache.fusion, cache.examples)
    unconditional = dataclasses.replace(cache.fusion, applies=lambda **_: True)  # no `slot_mapping.dtype == int64`
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion would replace its composite by "
                                                 r"fz_cache::kv_cache_update on ops\[0\].examples\[0\] with "
                                                 r"slot_mapping as int32, .*add a condition to ops\[0\].fusion.when"):
        checks.assert_fusion_matches_the_op(cache.op, unconditional, cache.examples)


def test_a_fusion_that_applies_to_no_example_proves_nothing(norm):
    never = dataclasses.replace(norm.fusion, applies=lambda **_: False)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] applies to no call of ops\[0\].examples"):
        checks.assert_fusion_matches_the_op(norm.op, never, norm.examples)


# --- it fires on its composite ---------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_the_generated_fusions_fire_in_place_on_their_composite(norm, cache, route):
    checks.assert_fusion_fires(norm.op, norm.fusion, norm.patterns.register_fusions, norm.first, route)
    checks.assert_fusion_fires(cache.op, cache.fusion, cache.patterns.register_fusions, cache.first, route)


@needs_npugraph_ex
def test_the_fusions_fire_in_each_npugraph_ex_session_of_a_process(norm):
    """Each session drops the patterns registered during it: the package registers them again in the next one
    (its record of what it registered went with them), so a second fusion test in one process sees them too."""
    for _ in range(2):
        checks.assert_fusion_fires(norm.op, norm.fusion, norm.patterns.register_fusions, norm.first, "npugraph_ex")


@pytest.mark.parametrize("route", ROUTES)
def test_a_pattern_traced_from_another_composite_does_not_fire(norm, monkeypatch, route):
    def reduces_dim_one(x1, x2, gamma, epsilon):  # `mean(1)` where the composite models write has `mean(-1)`
        x = x1 + x2
        hidden_states = x.to(torch.float32)
        rstd = torch.rsqrt(hidden_states.pow(2).mean(1, keepdim=True) + epsilon)
        return gamma * (hidden_states * rstd).to(x.dtype), rstd, x
    planted = dataclasses.replace(norm.fusion, search=reduces_dim_one)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] in opgen.yaml did not fire under " + route +
                       r": fz_norm::add_rms_norm is not in the graph after the pattern pass") as caught:
        checks.assert_fusion_fires(norm.op, planted, norm.registering(monkeypatch, planted), norm.first, route)
    assert caught.value.kind == "fusion-not-fired"


@pytest.mark.parametrize("route", ROUTES)
def test_a_pattern_covering_part_of_the_composite_leaves_its_nodes(norm, monkeypatch, route):
    def all_but_the_weight(x1, x2, epsilon):  # the composite without its last `gamma *`
        x = x1 + x2
        hidden_states = x.to(torch.float32)
        rstd = torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + epsilon)
        return (hidden_states * rstd).to(x.dtype), rstd, x

    def op_of_ones(x1, x2, epsilon):
        return torch.ops.fz_norm.add_rms_norm.default(x1, x2, x1.new_ones(x1.shape[-1]), epsilon)
    planted = dataclasses.replace(norm.fusion, search=all_but_the_weight, replacement=op_of_ones,
                                  inputs=("x1", "x2", "epsilon"), applies=lambda **_: True, example_inputs=lambda: [
                                      (x1, x2, epsilon) for x1, x2, _, epsilon in norm.fusion.example_inputs()],
                                  dtypes=tuple(dtypes[:2] for dtypes in norm.fusion.dtypes))
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] under " + route + r": fz_norm::add_rms_norm is in "
                       r"the graph, but nodes of the composite are left") as caught:
        checks.assert_fusion_fires(norm.op, planted, norm.registering(monkeypatch, planted), norm.first, route)
    assert caught.value.kind == "fusion-partial"
    left = str(caught.value).split("left (the pattern replaced part of it):")[1].splitlines()[1]
    assert "aten.mul.Tensor](args = (%" in left, left  # the composite's `gamma *` is left


# --- near misses -----------------------------------------------------------------------------------


def test_the_near_misses_are_an_escaping_value_another_dim_another_dtype_and_a_refused_call(norm, cache):
    tried = [what for what, _, _ in fusion_near_misses(norm.op, norm.fusion, norm.examples)]
    assert tried[0].startswith("an intermediate value of the composite used outside it (%_to_copy")
    assert tried[1].startswith("the composite reducing over another dim (%mean") and "[0], True" in tried[1]
    # epsilon is matched by value (no constant to move); float16 is no dtype of the examples
    assert tried[2] == "ops[0].examples[0] in float16: ops[0].fusion.forms[0] is not traced in float16"
    assert len(tried) == 3  # `when:` holds on every example and variant
    tried = [what for what, _, _ in fusion_near_misses(cache.op, cache.fusion, cache.examples)]
    assert tried[0].startswith("an intermediate value of the composite used outside it (%abs_1")  # not a new cache
    assert "[0, 2]" in tried[1]
    assert tried[2] == "ops[0].examples[0] in bfloat16: ops[0].fusion is not traced in bfloat16"
    assert tried[3] == "ops[0].examples[0] with slot_mapping as int32: ops[0].fusion.when does not hold"


def test_a_constant_the_composite_never_reads_makes_no_near_miss(norm):
    """Moving a constant changes the pattern only where the composite reads it: epsilon as a constant is a near miss,
    an argument the composite ignores (its pattern unchanged, the fusion rightly firing) is none."""
    def composite(x1, x2, gamma, epsilon=1e-06, unused=3):
        return norm.fusion.composite(x1, x2, gamma, epsilon)
    read = dataclasses.replace(norm.fusion, composite=composite, inputs=("x1", "x2", "gamma"),
                               constants={"epsilon": 1e-06})
    tried = [what for what, _, _ in fusion_near_misses(norm.op, read, norm.examples)]
    assert tried[0] == "epsilon=0.5 in place of 1e-06"
    ignored = dataclasses.replace(norm.fusion, composite=composite, constants={"unused": 3})
    tried = [what for what, _, _ in fusion_near_misses(norm.op, ignored, norm.examples)]
    assert tried and not any(what.startswith("unused=") for what in tried)


@pytest.mark.parametrize("route", ROUTES)
def test_near_misses_stay_unfused_unless_the_literal_recheck_or_the_condition_is_gone(norm, cache, monkeypatch,
                                                                                        route):
    checks.assert_near_misses_stay_unfused(norm.op, norm.fusion, norm.patterns.register_fusions, norm.examples, route)

    class Loose(norm.patterns.Fusion):
        """Accepts the first, open match: no recheck of shapes, dims, dtypes and constants."""

        def matches(self, match, trace_fn, order=()):
            return True
    loose = Loose(**{f.name: getattr(norm.fusion, f.name) for f in dataclasses.fields(norm.fusion)})
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] in opgen.yaml fired under " + route + r" on a near "
                       r"miss it must not replace: the composite reducing over another dim") as caught:
        checks.assert_near_misses_stay_unfused(norm.op, loose, norm.registering(monkeypatch, loose), norm.examples,
                                               route)
    assert caught.value.kind == "fusion-fires-on-near-miss"
    monkeypatch.undo()

    class IgnoresWhen(cache.patterns.Fusion):
        """Registers the pattern without `when:` (its `applies` still says where it holds): the dtypes stay."""

        def matches(self, match, trace_fn, order=()):
            dtypes = self.dtypes

            def traced_dtypes_only(**values):
                floating = tuple(v.dtype for v in values.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
                return floating in dtypes
            return cache.patterns.Fusion.matches(dataclasses.replace(cache.fusion, applies=traced_dtypes_only), match,
                                                 trace_fn, order)
    ignores = IgnoresWhen(**{f.name: getattr(cache.fusion, f.name) for f in dataclasses.fields(cache.fusion)})
    with pytest.raises(checks.CheckFailed, match=r"fired under " + route + r" on a near miss it must not replace: "
                       r"ops\[0\].examples\[0\] with slot_mapping as int32: ops\[0\].fusion.when does not hold"):
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
    fusion: {{when: ["x.is_contiguous()"]}}  # chunks of a transposed x give a transposed output, the fake is contiguous
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


@pytest.mark.npugraph_ex  # both states
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
    expected = 3 * (2 + 3 * len(ROUTES))  # per op: composite-is-the-op, layouts, then fires, near misses, trains
    assert len(fusion) == expected, sorted(fusion)
    for name, result in fusion.items():
        wanted = "skipped" if "npugraph_ex" in name and NPUGRAPH_EX is not None else "passed"
        if "_fusion_trains[" in name and result["outcome"] == "skipped":  # a buffer written, or no fire in training
            # (a written buffer is seen before npugraph_ex is looked for: that skip comes fetched or not)
            reasons = ["writes buffers", "does not fire in the training graph"] + ([NPUGRAPH_EX] if wanted == "skipped"
                                                                                 else [])
            assert any(reason in result["message"] for reason in reasons), (name, result["message"][:500])
            continue
        assert result["outcome"] == wanted, f"{name}: {result['message'][-3000:]}"
    assert fusion["test_quant_scatter__fusion_trains[inductor]"]["outcome"] == "skipped"
    assert fusion["test_scaled_softmax_fusion_trains[npugraph_ex]"]["outcome"] == (
        "passed" if NPUGRAPH_EX is None else "skipped")  # npugraph_ex's backward saves only the softmax's output
    others = {name: r["outcome"] for name, r in results.items() if r["outcome"] not in ("passed", "skipped")}
    assert not others, others


# --- what the generated README tells a user to do -------------------------------------------------


class Block(torch.nn.Module):
    """A decoder block as transformers writes it: a residual add, then LlamaRMSNorm's composite."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32, dtype=dtype)
        self.weight = torch.nn.Parameter((torch.rand(32) + 0.5).to(dtype))

    def forward(self, residual):
        x = residual + self.linear(residual)
        hidden_states = x.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + 1e-05)
        return self.weight * hidden_states.to(x.dtype), x


def test_register_fusions_once_then_plain_torch_compile_calls_the_op_where_it_has_a_kernel(norm, monkeypatch):
    """`register_fusions()` then `torch.compile(model)` with Inductor itself (not the tests' aot_eager stand-in). By
    default the fusions apply on the spec's device only (npu): on CPU the op's kernel is its Python
    reference, slower than Inductor's code for the composite, so the CPU model keeps its composite and the
    Registration says what it skipped and why. Named targets register it on every device: the op is then in the code
    Inductor generates and values equal eager; a post-grad pass already installed stays and runs, and a second call
    installs nothing twice. Without npugraph_ex importable it registers with Inductor only, says so in what it
    returns and logs, and warns."""
    from torch._inductor.utils import run_and_get_code

    seen = []

    def user_pass(graph):
        seen.append(len(graph.nodes))

    monkeypatch.setattr(norm.patterns, "_DEVICES", {})  # as in a fresh process (other tests named their targets)
    model, x1 = Block(), torch.randn(4, 32)
    with torch._inductor.config.patch(post_grad_custom_post_pass=user_pass), torch.no_grad():
        with pytest.warns(RuntimeWarning, match=r"fz_norm.patterns.register_fusions\(\): nothing registered with "
                          r"npugraph_ex: npugraph_ex cannot be imported \(import torch_npu before"):
            registration = norm.patterns.register_fusions()
        torch.compiler.reset()
        default_out, default_code = run_and_get_code(torch.compile(model), x1)
        asked = norm.patterns.register_fusions(targets=("inductor",))
        installed = torch._inductor.config.post_grad_custom_post_pass
        assert installed == [user_pass, norm.patterns.FUSION_PASS], installed
        torch.compiler.reset()
        out, code = run_and_get_code(torch.compile(model), x1)
    assert norm.patterns.KERNEL_DEVICES == ("npu",)
    assert registration.inductor_pass is norm.patterns.FUSION_PASS
    llama = "fz_norm::add_rms_norm, bfloat16, float32, 32 patterns"  # 4 traces, 8 operand orders each
    assert registration.registered == {"inductor": {f"ops[0].fusion.forms[{i}]": llama + ", on npu only"
                                                    for i in range(3)}}
    assert registration.skipped["inductor"].startswith("on cpu: there each op's kernel is its Python reference")
    assert "npugraph_ex" in registration.unavailable
    assert "  inductor: skipped on cpu: " in str(registration)
    assert not any("fz_norm.add_rms_norm" in text for text in default_code), "\n".join(default_code)[-3000:]
    torch.testing.assert_close(default_out, model(x1))
    assert asked.registered == {"inductor": {f"ops[0].fusion.forms[{i}]": llama for i in range(3)}}
    assert not asked.skipped
    assert str(asked).splitlines()[1] == "  inductor: ops[0].fusion.forms[0] (fz_norm::add_rms_norm, bfloat16, float32, 32 patterns)"
    assert seen, "the pass installed before register_fusions() did not run"
    assert any("fz_norm.add_rms_norm" in text for text in code), "\n".join(code)[-3000:]
    torch.testing.assert_close(out, model(x1))


@pytest.mark.skipif(NPUGRAPH_EX is not None, reason=str(NPUGRAPH_EX))
def test_registering_with_npugraph_ex_says_why_training_graphs_keep_most_composites(norm, monkeypatch):
    """npugraph_ex partitions training graphs with default_partition, which saves the composite's inner values for the
    backward: the Registration says so (tests/test_fusion_checks.py's training tests show the rotary still firing)."""
    monkeypatch.setattr(norm.patterns, "_DEVICES", {})
    with npugraph_ex_cpu.Session():
        registration = norm.patterns.register_fusions(install=False, targets=("npugraph_ex",))
    assert set(registration.registered) == {"npugraph_ex"} and not registration.skipped
    assert registration.notes["npugraph_ex"].startswith("in training graphs npugraph_ex splits forward and backward "
                                                        "with torch's default_partition")
    assert "  npugraph_ex: note: in training graphs" in str(registration)
    assert "npugraph_ex offers no hook before that split" in registration.notes["npugraph_ex"]


@needs_npugraph_ex
def test_the_training_note_is_what_the_fetched_npugraph_ex_does():
    """The note's claims, read in the npugraph_ex this machine runs: the partition is default_partition with no option
    of CompilerConfig for another, the pattern pass and the post-grad hooks run in each graph's compiler (after the
    split), and the joint-graph patch is never called. A later npugraph_ex offering a joint-graph hook fails here."""
    import inspect
    from pathlib import Path

    with npugraph_ex_cpu.Session():
        import npugraph_ex
        from npugraph_ex import npu_fx_compiler
        from npugraph_ex.configs.compiler_config import CompilerConfig

        assert '"partition_fn": default_partition' in inspect.getsource(npu_fx_compiler._compile_graph_with_aot)
        options = vars(CompilerConfig())
        assert "post_grad_custom_pre_pass" in options and "pattern_fusion_pass" in options
        assert not [name for name in options if "partition" in name or "joint" in name], sorted(options)
        optimize = inspect.getsource(npu_fx_compiler._optimize_fx)
        assert optimize.index("post_grad_custom_pre_pass") < optimize.index("_apply_pattern_passes")
        sources = [path.read_text(encoding="utf-8") for path in Path(npugraph_ex.__file__).parent.rglob("*.py")]
        assert sum(text.count("npu_patch_fx_pass(") for text in sources) == 1  # its definition only


def test_register_fusions_keeps_a_fusion_to_the_targets_asked_for(norm, monkeypatch):
    monkeypatch.setattr(norm.patterns, "FUSION_PASS", norm.patterns.FusionPass())
    registration = norm.patterns.register_fusions(install=False, targets=("npugraph_ex",))
    assert registration.registered == {} and not norm.patterns.FUSION_PASS.patterns.patterns  # nothing for Inductor
    with pytest.raises(ValueError, match=r"unknown target\(s\) \['cuda'\]"):
        norm.patterns.register_fusions(targets=("cuda",))


def test_post_grad_graph_shows_the_composite_a_model_writes_with_its_source_lines(norm):
    whole = norm.patterns.post_grad_graph(Block(), torch.randn(4, 32))
    around = norm.patterns.post_grad_graph(Block(), torch.randn(4, 32), around="rsqrt", context=2)
    assert "torch.ops.aten.rsqrt.default" in around and len(around.splitlines()) == 5
    assert "hidden_states = hidden_states * torch.rsqrt(variance + 1e-05)" in around  # the model's own line
    assert len(whole.splitlines()) > len(around.splitlines()) and "aten.addmm" in whole
    norm.patterns.register_fusions(targets=("inductor",))
    fused = norm.patterns.post_grad_graph(Block(), torch.randn(4, 32), fused=True)
    assert "fz_norm.add_rms_norm" in fused and "rsqrt" not in fused


# --- forms, operand orders, dtypes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    return Generated(tmp_path_factory.mktemp("fusion"), "rms_norm", "fz_forms", "rms_norm")


@pytest.mark.parametrize("route", ROUTES)
def test_each_form_of_an_op_fires_and_a_form_left_out_does_not(forms, monkeypatch, route):
    """rms_norm's Llama and Olmo2 forms (the weight multiplied before or after the cast back) each get the op; with the
    Llama form registered alone, Olmo2's bfloat16 composite keeps its composite: the Llama form's float32 pattern
    would take its float32 middle (after the upcast of x, the weight still bfloat16), which two rules refuse, each
    alone: x is an upcast of a bfloat16 tensor (`upcast_from`), and the dtypes are no trace's (`applies`)."""
    llama, olmo2, _helium = forms.forms
    for form in (llama, olmo2):
        checks.assert_fusion_fires(forms.op, form, forms.patterns.register_fusions, forms.first, route)
    bf16 = {name: value.to(torch.bfloat16) if isinstance(value, torch.Tensor) else value  # a model's 1-D weight
            for name, value in forms.examples(0)[0].items()}
    model = _fusion_model(olmo2, {"epsilon": 1e-05})

    def fires(*fusions) -> bool:
        seen = compile_with_fusion(forms.op, olmo2, forms.registering(monkeypatch, *fusions), route, model,
                                          [_split(bf16)[0]])
        return seen.after[0]["op"]
    class Every(tuple):
        def __contains__(self, _dtypes) -> bool:
            return True
    any_dtypes = dataclasses.replace(llama, applies=lambda **values: values["gamma"].dim() == 1, dtypes=Every())
    assert not fires(llama) and not fires(any_dtypes)
    monkeypatch.setattr(forms.patterns, "upcast_from", lambda node: None)  # planted: inputs may be upcasts
    assert not fires(llama)  # the dtypes still refuse it
    assert fires(any_dtypes), "with neither rule the Llama form takes the float32 middle of Olmo2's norm"


@pytest.mark.parametrize("route", ROUTES)
def test_the_operands_of_a_product_match_in_either_order(norm, monkeypatch, route):
    """A model writing `h.to(dtype) * weight` (Llama's order is `weight * h`) gets the op: each form is registered in
    every operand order of its sums and products; registered as traced only, it does not."""
    def swapped(x1, x2, gamma, epsilon=1e-06):
        x = x2 + x1
        hidden_states = x.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        rstd = torch.rsqrt(variance + epsilon)
        return (rstd * hidden_states).to(x.dtype) * gamma, rstd, x
    model = dataclasses.replace(norm.fusion, composite=swapped)
    checks.assert_fusion_fires(norm.op, model, norm.patterns.register_fusions, norm.first, route)
    monkeypatch.setattr(norm.patterns, "operand_orders", lambda gm: [()])  # planted: the traced order only
    with pytest.raises(checks.CheckFailed, match="did not fire under " + route):
        checks.assert_fusion_fires(norm.op, model, norm.registering(monkeypatch, dataclasses.replace(norm.fusion)),
                                   norm.first, route)


@pytest.mark.parametrize("route", ROUTES)
def test_a_form_traced_in_float32_only_does_not_fire_in_bfloat16(norm, monkeypatch, route):
    """The issue's 0 of 5 on a bfloat16 Llama: the casts of a bfloat16 composite are in no float32 trace. The
    bfloat16 trace of examples[0] is what makes it fire (test_the_generated_fusions_fire_in_place_on_their_composite)."""
    def float32_only():
        with FakeTensorMode():
            return [tuple(torch.empty(s) for s in ((2, 4, 32), (2, 4, 32), (32,))) + (1.2345e-05 * 4,)]
    planted = dataclasses.replace(norm.fusion, example_inputs=float32_only)
    with pytest.raises(checks.CheckFailed, match="did not fire under " + route):
        checks.assert_fusion_fires(norm.op, planted, norm.registering(monkeypatch, planted), norm.first, route)


@pytest.fixture(scope="module")
def every_two(tmp_path_factory):
    return Generated(tmp_path_factory.mktemp("fusion"), "rotary_pairs", "fz_pairs", "rotary_every_two")


def test_ernies_rotary_fires_and_a_rotation_the_other_way_does_not(every_two):
    """rotary_every_two's Ernie 4.5 form (bfloat16 queries, float32 cos and sin: the example written for it, not
    examples[0]) fires on Ernie's composite. Planted: the same composite rotating each pair the other way
    (`stack((x2, -x1))`, the conjugate rotation): a model writing it keeps its composite."""
    ernie = every_two.forms[1]
    checks.assert_fusion_fires(every_two.op, ernie, every_two.patterns.register_fusions,
                               checks.first_fusion_call(ernie, every_two.examples), "inductor")

    def other_way(x, cos, sin):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x2, -x1), dim=-1).flatten(-2)
        return ((x.float() * cos) + (rotated.float() * sin)).to(x.dtype)
    planted = dataclasses.replace(ernie, composite=other_way)
    with pytest.raises(checks.CheckFailed, match=r"ops\[2\].fusion.forms\[1\] in opgen.yaml did not fire under inductor"):
        checks.assert_fusion_fires(every_two.op, planted, every_two.patterns.register_fusions,
                                   checks.first_fusion_call(ernie, every_two.examples), "inductor")
    with pytest.raises(pytest.skip.Exception, match=r"ops\[2\].fusion.forms\[1\].when does not hold on "
                                                     r"ops\[2\].examples\[0\]"):  # its bfloat16 cos and sin
        checks.assert_fusion_fires(every_two.op, ernie, every_two.patterns.register_fusions, every_two.first, "inductor")


def test_under_plain_torch_compile_a_composite_that_flattens_is_matched_as_inductors_reshape(every_two, monkeypatch):
    """Inductor turns every view into a reshape before its post-grad passes: Ernie's rotary (`.flatten(-2)`) gets the
    op in the code plain torch.compile generates, values equal eager. Planted: the form traced with its view (as
    before), which aot_eager's graphs matched and Inductor's never do."""
    from torch._inductor.utils import run_and_get_code

    ernie = every_two.forms[1]
    call = checks.first_fusion_call(ernie, every_two.examples)(0)

    def fused_code() -> tuple[bool, object]:
        ernie.__dict__.pop("_traced", None)  # traced anew, as in a fresh process
        register = every_two.registering(monkeypatch, ernie)
        register(targets=("inductor",))
        torch.compiler.reset()
        with torch.no_grad():
            out, code = run_and_get_code(torch.compile(ernie.composite, dynamic=False), **call)
        return any("fz_pairs.rotary_every_two" in text for text in code), out
    fused, out = fused_code()
    assert fused
    torch.testing.assert_close(out, ernie.composite(**call), rtol=0, atol=0)
    monkeypatch.setattr(every_two.patterns, "view_to_reshape", lambda gm: None)  # planted: the form keeps its view
    assert not fused_code()[0]
    ernie.__dict__.pop("_traced", None)


# --- layouts and training --------------------------------------------------------------------------------------


def _contiguous_fake(text: str) -> str:
    """rotary's output declared contiguous (the issue's `{shape: "x.shape", dtype: x}`) where the composite keeps
    x's layout."""
    assert "      out0: {like: x}" in text
    return text.replace("      out0: {like: x}", '      out0: {shape: "x.shape", dtype: x}')


@pytest.fixture(scope="module")
def rotaries(tmp_path_factory):
    root = tmp_path_factory.mktemp("fusion")
    return (Generated(root, "rotary", "fz_rope", "rotary"),
            Generated(root, "rotary", "fz_rope_flat", "rotary", edit=_contiguous_fake))


def test_an_op_whose_outputs_lose_the_composites_layout_fails_naming_like(rotaries):
    good, bad = rotaries
    checks.assert_fusion_keeps_layouts(good.op, good.fusion, good.examples)
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] would replace its composite by fz_rope_flat::rotary "
                       r"on ops\[0\].examples\[0\] in transposed layout, and change the layout of its outputs: "
                       r"ops\[0\].outputs.out0: the op's fake gives strides \(512, 128, 16, 1\), the composite "
                       r"\(512, 128, 1, 8\).*`like: <input>`") as caught:
        checks.assert_fusion_keeps_layouts(bad.op, bad.fusion, bad.examples)
    assert caught.value.kind == "fusion-changes-layout"


@pytest.mark.parametrize("route", ROUTES)
def test_training_through_a_fusion_that_changes_a_layout_fails_as_npugraph_ex_does(rotaries, route):
    """The issue's crash: rotary on transposed q, its backward compiled for the composite's strides. The generated
    test names the output and `like:`; the op declared `like: x` trains, its gradients equal eager's."""
    good, bad = rotaries
    checks.assert_fusion_trains(good.op, good.fusion, good.patterns.register_fusions, good.first, route)
    crash = r"expected size 8==8, stride 16==1 at dim=2" if route == "npugraph_ex" else r"backward input \d+: expected"
    with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion.forms\[0\] under " + route + r": training through "
                       r"fz_rope_flat::rotary in place of the composite fails, AssertionError: " + crash
                       + r".*ops\[0\].outputs.out0: the op's fake gives strides") as caught:
        checks.assert_fusion_trains(bad.op, bad.fusion, bad.patterns.register_fusions, bad.first, route)
    assert caught.value.kind == "fusion-changes-layout"


# --- a real model (transformers, when installed) -------------------------------------------------------------


def test_a_hugging_face_model_gets_the_op_at_every_occurrence_and_names_what_it_leaves(norm, cache, monkeypatch):
    """A one-layer Llama (2 residual adds then norms) under Inductor's pass in bfloat16: both occurrences fused,
    logits equal eager's. Planted: a fusion traced in other dtypes, and one whose `when:` holds nowhere, leave them,
    each named with why; a composite Llama never writes (a cache update) has no occurrence."""
    pytest.importorskip("transformers", reason="transformers is not installed (the fusion-models extra)")
    llama = ("LlamaForCausalLM", {"num_hidden_layers": 1})
    register = norm.patterns.register_fusions
    checks.assert_fusion_fires_in_model(norm.op, norm.forms, register, llama, "inductor", torch.bfloat16)
    mixed = (torch.bfloat16, torch.bfloat16, torch.float32)  # a float32 weight: not the model's
    planted = [(dataclasses.replace(norm.fusion, dtypes=(mixed,)),
                r"ops\[0\].fusion.forms\[0\] is traced in no dtypes of x1: bfloat16\[2, 8, 64\]"),
               (dataclasses.replace(norm.fusion, applies=lambda **_: False),  # the fusion does nothing there
                r"ops\[0\].fusion.forms\[0\].when does not hold on x1: bfloat16\[2, 8, 64\]")]
    for refuses, why in planted:
        with pytest.raises(checks.CheckFailed, match=r"ops\[0\].fusion fired at 0 of the 2 occurrences of its "
                           r"composite in LlamaForCausalLM \(bfloat16\) under inductor; left: .*" + why) as caught:
            checks.assert_fusion_fires_in_model(norm.op, (refuses,), norm.registering(monkeypatch, refuses), llama,
                                                "inductor", torch.bfloat16)
        assert caught.value.kind == "fusion-partial"
    with pytest.raises(checks.CheckFailed, match=r"no occurrence of its composite in LlamaForCausalLM") as caught:
        checks.assert_fusion_fires_in_model(cache.op, cache.forms, cache.patterns.register_fusions, llama,
                                            "inductor", torch.float16)
    assert caught.value.kind == "fusion-not-in-model"


def test_a_model_run_with_a_static_cache_gets_the_cache_update_op(tmp_path_factory):
    """`cache: static`: a one-layer Llama given a transformers StaticCache writes its keys and values with
    static_cache_update's composite (index_copy_), which the op replaces; the same model without the cache (its
    planted twin) writes no cache and so has no occurrence."""
    pytest.importorskip("transformers", reason="transformers is not installed (the fusion-models extra)")
    static = Generated(tmp_path_factory.mktemp("fusion"), "static_cache_update", "fz_static", "static_cache_update")
    llama = ("LlamaForCausalLM", {"num_hidden_layers": 1})
    register = static.patterns.register_fusions
    checks.assert_fusion_fires_in_model(static.op, static.forms, register, (*llama, "static"), "inductor",
                                        torch.float32)
    with pytest.raises(checks.CheckFailed, match=r"no occurrence of its composite in LlamaForCausalLM") as caught:
        checks.assert_fusion_fires_in_model(static.op, static.forms, register, llama, "inductor", torch.float32)
    assert caught.value.kind == "fusion-not-in-model"


def test_training_under_the_inductor_route_partitions_as_inductor_does(forms):
    """Inductor's min-cut partitioner recomputes rms_norm's inner values in the backward, so its training graph keeps
    the composite whole and the fusion fires (under default_partition it would skip, as npugraph_ex's does)."""
    from torch._functorch import partitioners

    checks.assert_fusion_trains(forms.op, forms.fusion, forms.patterns.register_fusions, forms.first, "inductor")
    with pytest.MonkeyPatch.context() as patch:  # planted: the stand-in partitioning as aot_autograd does by default
        patch.setattr(partitioners, "min_cut_rematerialization_partition", partitioners.default_partition)
        with pytest.raises(pytest.skip.Exception, match=r"ops\[0\].fusion.forms\[0\] does not fire in the training "
                                                          r"graph under inductor"):
            checks.assert_fusion_trains(forms.op, forms.fusion, forms.patterns.register_fusions, forms.first, "inductor")
