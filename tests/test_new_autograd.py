"""`ops[i].autograd`: backward formulas from the spec, refused where torch would refuse them, placed in
the file on every mistake, unable to leave their function, and proven by the generated tests
(opcheck with requires_grad and gradcheck) in both styles."""

from __future__ import annotations

import ast
import json
import textwrap

import pytest
from new_helpers import NOT_FEATURES, STYLES, opgen, opgen_in_one_process, project_outcomes

from opgen.errors import OpgenError
from opgen.npugraph_ex import loader
from opgen.render.context import project_context
from opgen.render.templates import render_package
from opgen.spec.load import load_spec_text


def load(text: str, **overrides):
    return load_spec_text(textwrap.dedent(text).lstrip("\n"), "spec.yaml", **overrides)


def refusal(text: str, **overrides) -> str:
    with pytest.raises(OpgenError) as caught:
        load(text, **overrides)
    return caught.value.render()


BAD = {
    "syntax error in backward": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, float s) -> Tensor"
            autograd:
              backward: |
                g = grad_output *
                return g
        """, "spec.yaml:6:26: ops[0].autograd.backward is not valid Python: invalid syntax",
        "def backward(ctx, grad_output)"),
    "syntax error in setup_context": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            autograd:
              setup_context: |
                ctx.save_for_backward(x
              backward: "return grad_output"
        """, "spec.yaml:6:", "ops[0].autograd.setup_context is not valid Python"),
    "a gradient under another name": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, float s) -> Tensor"
            autograd:
              backward: |
                g = grad_out0 * s
                return g, None
        """, "spec.yaml:6:13: ops[0].autograd.backward: backward reads 'grad_out0', but its gradients are grad_output",
        "use grad_output"),
    "an input only setup_context sees": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, float s) -> (Tensor y, Tensor z)"
            autograd:
              backward: |
                return grad_y * s + grad_z, None
        """, "spec.yaml:6:25: ops[0].autograd.backward: backward reads 's', which only setup_context sees",
        "save it in setup_context (`ctx.s = s`)"),
    "wrong number of gradients": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, float s) -> Tensor"
            autograd:
              backward: |
                if ctx.needs_input_grad[0]:
                    return grad_output * 2, None, None
                return None, None
        """, ("spec.yaml:7:13: ops[0].autograd.backward returns 3 gradients, but the op has 2 positional input(s) "
        "(x, s)"), "keyword-only inputs get none"),
    "mutable op": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x, float s) -> ()"
            autograd:
              backward: "return None, None"
        """, ("spec.yaml:3:17: ops[0].schema [OPG113]: `ops[0].autograd` is given, but a mutable op cannot have an "
        "autograd formula: it writes 'x'"), "functional op"),
    "Tag.inplace op": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x, float s) -> Tensor(a!)"
            tags: [inplace]
            autograd:
              backward: "return None, None"
        """, "ops[0].schema [OPG113]: `ops[0].autograd` is given, but a mutable op", "functional op"),
    "Tag.out op": ("""
        namespace: a
        ops:
          - schema: "f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)"
            tags: [out]
            autograd:
              backward: "return None"
        """, ("spec.yaml:3:14: ops[0].schema [OPG113]: `ops[0].autograd` is given, but a torch.Tag.out op cannot have "
        "an autograd formula"), "no out= tag"),
    "keyword-only tensor": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, *, Tensor y) -> Tensor"
            autograd:
              backward: "return grad_output"
        """, ("spec.yaml:3:29: ops[0].schema [OPG113]: `ops[0].autograd` is given, but register_autograd does not "
        "support keyword-only tensor arguments ('y')"), "tensors before the `*`"),
    "argument named ctx": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, Tensor ctx) -> Tensor"
            autograd:
              backward: "return grad_output, None"
        """, "spec.yaml:3:26: ops[0].schema: argument name 'ctx' is a parameter of the generated setup_context",
        "ctx, inputs, keyword_only_inputs, output are taken"),
    "return named output": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> (Tensor output, Tensor y)"
            autograd:
              backward: "return grad_output"
        """, "ops[0].schema: return name 'output' is a parameter of the generated setup_context", "rename it"),
    "returns nothing": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> ()"
            autograd:
              backward: "return None"
        """, "spec.yaml:4:5: ops[0].autograd: the op returns nothing, so there is nothing to differentiate",
        "remove `ops[0].autograd`"),
    "list return": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor[]"
            autograd:
              backward: "return None"
        """, "spec.yaml:3:29: ops[0].schema: return 'out0' is 'Tensor[]'", "register the formula by hand"),
    "no backward": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            autograd:
              setup_context: "pass"
        """, "spec.yaml:5:7: ops[0].autograd has no 'backward'", "add `backward:`"),
    "misspelt key": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            autograd:
              backwards: "return grad_output"
        """, "spec.yaml:5:7: unknown key 'backwards' in ops[0].autograd", "did you mean 'backward'?"),
    "not a mapping": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            autograd: "return grad_output"
        """, "spec.yaml:4:15: ops[0].autograd must be a mapping", "allowed keys: setup_context, backward"),
    "carriage return": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            autograd:
              backward: "return grad_output\\rimport os"
        """, "spec.yaml:5:17: ops[0].autograd.backward contains the control character '\\r'", "plain newlines"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_autograd_is_refused_at_its_place_in_the_file(case):
    text, message, hint = BAD[case]
    rendered = refusal(text)
    assert message in rendered and hint in rendered, rendered


def test_names_backward_binds_itself_are_not_taken_for_missing_ones():
    """The look-alikes of the two name checks: a gradient and an input bound inside backward (from ctx, a
    loop, a nested function's parameter) are fine."""
    spec = load("""
        namespace: a
        ops:
          - schema: "f(Tensor x, float s) -> (Tensor y, Tensor z)"
            autograd:
              setup_context: |
                ctx.save_for_backward(x)
                ctx.s = s
              backward: |
                (x,) = ctx.saved_tensors
                s = ctx.s
                grad_sum = sum(grad for grad in (grad_y, grad_z))

                def scaled(grad_x):
                    return grad_x * s

                return scaled(grad_sum) * x, None
        """)
    assert spec.ops[0].autograd is not None


def test_the_cli_refuses_a_bad_formula_with_exit_2_and_writes_nothing(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(textwrap.dedent(BAD["mutable op"][0]).lstrip("\n"), encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "out"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "bad.yaml:3:17: ops[0].schema [OPG113]" in done.stderr
    assert not (tmp_path / "out").exists()


HOSTILE_BODIES = [
    'return grad_output\n"""',  # an unterminated string would swallow the rest of the module
    "return grad_output\n  def escape():\n    pass",  # an indentation trick
    "return grad_output\n\u2028import os",  # a line break Python honours but "\n"-indentation would not
    "return grad_output\x0cimport os",
    "return grad_output\x00",
]


@pytest.mark.parametrize("body", HOSTILE_BODIES)
def test_a_body_that_would_leave_its_function_is_refused(body):
    # a JSON string is a YAML double-quoted scalar: every character reaches the loader intact
    text = 'namespace: a\nops:\n  - schema: "f(Tensor x) -> Tensor"\n    autograd:\n      backward: ' + json.dumps(body)
    with pytest.raises(OpgenError) as caught:
        load_spec_text(text, "spec.yaml")
    assert "spec.yaml:5:17: ops[0].autograd.backward" in caught.value.render()


def test_generated_functions_are_the_validated_bodies_and_nothing_else():
    """Strings and nested code stay inside the function; the module around it is opgen's."""
    spec = load('''
        namespace: a
        ops:
          - schema: "f(Tensor x, float s, *, int k=1) -> (Tensor y, Tensor z)"
            autograd:
              setup_context: |
                ctx.s = s
                ctx.note = """
                def not_at_module_level(): pass
                """
              backward: |
                def inner():
                    return None
                return grad_y * ctx.s + grad_z, inner()
        ''')
    op = project_context(spec)["_opgen"]["ops"][0]
    module = ast.parse(op["autograd"]["code"])
    assert [node.name for node in module.body] == ["_f_setup_context", "_f_backward"]
    setup, backward = module.body
    assert [a.arg for a in setup.args.args] == ["ctx", "inputs", "keyword_only_inputs", "output"]
    assert [a.arg for a in backward.args.args] == ["ctx", "grad_y", "grad_z"]
    # only what the body reads is bound (no unused names in generated code)
    assert ast.unparse(setup.body[0]) == "_, s = inputs"
    assert len(setup.body) == 3 and "def not_at_module_level(): pass" in ast.literal_eval(setup.body[2].value)
    library = {f.path: f.content for f in render_package(spec)}["a/ops.py"]
    assert ('torch.library.register_autograd("a::f", _f_backward, setup_context=_f_setup_context, lib=lib)\n'
            in library)
    custom = {f.path: f.content for f in render_package(load_spec_text(spec.text, "spec.yaml", style="custom_op"))}
    assert "f.register_autograd(_f_backward, setup_context=_f_setup_context)\n" in custom["a/ops.py"]


def test_ops_without_autograd_get_no_formula_but_raise_on_backward():
    """No formula: a Library op gets a fallthrough at Autograd (free per call) and its kernel behind a guard that
    ties results to a raising node only when a gradient could flow; custom_op raises by itself."""
    spec = load("""
        namespace: a
        ops:
          - schema: "f(Tensor x, Tensor? w, Tensor[] ys) -> Tensor"
        """)
    context = project_context(spec)["_opgen"]
    assert not context["ops"][0]["autograd"]["enabled"] and context["ops"][0]["autograd"]["code"] == ""
    files = {f.path: f.content for f in render_package(spec)}
    library = files["a/ops.py"]
    assert "register_autograd" not in library
    assert 'lib.impl("f", torch.library.fallthrough_kernel, "Autograd")\n' in library
    assert 'lib.impl("f", _f_cpu_without_autograd, "CPU")\n' in library
    assert ("    if (\n        x.requires_grad\n        or (w is not None and w.requires_grad)\n"
            "        or any(t.requires_grad for t in ys)\n    ) and torch.is_grad_enabled():\n") in library
    # the TODO fake raises on every call anyway: registered as written, so lint still reads it as the skeleton
    assert 'register_fake("a::f", f_fake, lib=lib)' in library and "a/no_autograd.py" in files
    custom = {f.path: f.content for f in render_package(load_spec_text(spec.text, "spec.yaml", style="custom_op"))}
    assert "fallthrough_kernel" not in custom["a/ops.py"] and "a/no_autograd.py" not in custom


# --- generated projects: the formulas are checked by the generated tests ----------------------------

SPEC = """
namespace: ag_ops
device: cpu
ops:
  - schema: "scale(Tensor x, *, float alpha=2.0) -> Tensor"
    outputs:
      out0: {like: x}
    reference: |
      return (x * alpha).to(x.dtype)
    autograd:
      setup_context: |
        ctx.alpha = alpha
      backward: |
        return grad_output * ctx.alpha
    examples:
      - {x: {shape: [3, 5], dtype: float32}, alpha: 0.5}
      - {x: {values: [1, 2], dtype: int64}}
  - schema: "twice(Tensor x) -> Tensor"
    outputs:
      out0: {shape: "x.shape", dtype: "x.dtype"}
    reference: |
      return x * 2
    autograd:
      backward: |
        return grad_output * 2
    examples:
      - {x: {values: [1, 2], dtype: int64}}
  - schema: "plain(Tensor x) -> Tensor"
    outputs:
      out0: {like: x}  # x + 1 keeps x's layout (the generated non-contiguous tier checks it)
    reference: |
      return x + 1
"""
WRONG = SPEC.replace("return grad_output * ctx.alpha", "return grad_output * ctx.alpha * 1.5")
NO_FLOAT = ("no example of ag_ops::twice has a floating-point tensor input, so there is nothing to differentiate: "
            "add one to ops[1].examples")


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("autograd")
    (root / "spec.yaml").write_text(SPEC, encoding="utf-8")
    (root / "wrong.yaml").write_text(WRONG.replace("ag_ops", "ag_wrong"), encoding="utf-8")
    made = {(name, style): root / f"{name}_{style}" for style in STYLES for name in ("spec", "wrong")}
    generations = [["new", str(root / f"{name}.yaml"), "-o", str(project), "--style", style]
                   for (name, style), project in made.items()]
    assert opgen_in_one_process(*generations) == [0] * len(generations)  # one process start, not four
    ops = made["wrong", "library"] / "ag_wrong" / "ops.py"  # planted: plain's kernel registered unguarded
    text = ops.read_text(encoding="utf-8")
    planted = text.replace('lib.impl("plain", torch.library.fallthrough_kernel, "Autograd")\n', "").replace(
        'lib.impl("plain", _plain_cpu_without_autograd, "CPU")', 'lib.impl("plain", plain_cpu, "CPU")')
    assert 'lib.impl("plain", plain_cpu, "CPU")' in planted and "fallthrough" not in planted
    ops.write_text(planted, encoding="utf-8")
    return made


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.slow
@pytest.mark.xdist_group("autograd_projects")  # the module's generated projects, built once
@pytest.mark.npugraph_ex  # both states
def test_generated_autograd_tests_pass_skip_and_fail_exactly(projects, style, tmp_path):
    """Keyword-only inputs reach setup_context (the 4-argument form); an example without floating-point
    tensors skips with the reason; a wrong formula fails gradcheck (and only gradcheck)."""
    # one pytest process: every test of the right spec, and of the wrong formula's project the tests it is about
    # (-k names each project by its test module, test_ag_ops.py / test_ag_wrong.py)
    spec, wrong = projects["spec", style], projects["wrong", style]
    about_the_formula = "backward_raises_without_formula or gradcheck or opcheck_with_requires_grad"
    found = project_outcomes([spec, wrong], tmp_path / "junit.xml",
                             f"({NOT_FEATURES}) and (test_ag_ops or (test_ag_wrong and ({about_the_formula})))")
    good = found[spec.name]
    assert good["test_scale_opcheck_with_requires_grad"]["outcome"] == "passed", good
    assert good["test_scale_gradcheck"]["outcome"] == "passed", good["test_scale_gradcheck"]["message"]
    for tier in ("opcheck_with_requires_grad", "gradcheck"):
        assert good[f"test_twice_{tier}"]["outcome"] == "skipped"
        assert good[f"test_twice_{tier}"]["message"].startswith(NO_FLOAT), good[f"test_twice_{tier}"]["message"]
        assert f"test_plain_{tier}" not in good  # no formula, no autograd tier
    fetched = loader().unavailable() is None  # else the npugraph_ex-on-CPU tier skips, naming the fetch command
    for name in ("scale", "twice", "plain"):  # no `expect:` in this spec
        skipped = good[f"test_{name}_matches_expected_values"]
        assert skipped["outcome"] == "skipped" and "no expected values for ag_ops::" in skipped["message"], skipped
    others = {name: r["outcome"] for name, r in good.items() if "capture_replay" not in name
              and not name.startswith(("test_twice_opcheck_with", "test_twice_gradcheck"))
              and not name.endswith("_matches_expected_values")
              and (fetched or not name.endswith("_npugraph_ex_compiles_on_cpu"))}
    assert set(others.values()) == {"passed"}, others
    assert good["test_plain_backward_raises_without_formula"]["outcome"] == "passed"
    wrong = found[wrong.name]
    if style == "library":  # planted: plain registered as before, its Python kernel differentiated through
        assert wrong["test_plain_backward_raises_without_formula"]["outcome"] == "failed"
        assert "but a backward through it ran" in wrong["test_plain_backward_raises_without_formula"]["message"]
    assert wrong["test_scale_gradcheck"]["outcome"] == "failed"
    assert "Jacobian mismatch" in wrong["test_scale_gradcheck"]["message"]
    assert wrong["test_scale_opcheck_with_requires_grad"]["outcome"] == "passed"  # opcheck is not numerics


@pytest.mark.xdist_group("autograd_projects")  # the module's generated projects, built once
def test_a_library_op_without_formula_compiled_on_inputs_requiring_grad_raises_as_eager(projects):
    """The generated no_autograd.py, loaded here, on a Library op (fallthrough at Autograd, guarded kernel and fake):
    torch.compile on inputs requiring grad raises torch's "no autograd formula was registered", as custom_op's
    compiled op does. Planted: the fake without its compile check, which AOT autograd reaches below the fallthrough
    with no input requiring grad: the compiled op silently detaches its outputs, and the tier says so."""
    import torch

    from opgen import testing as checks

    source = (projects["spec", "library"] / "ag_ops" / "no_autograd.py").read_text(encoding="utf-8")
    planted = source.replace("if TracingContext.try_get() is not None:", "if False:")
    assert planted != source
    lib = torch.library.Library("ag_compiled", "FRAGMENT")
    for name, text in (("guarded", source), ("detaching", planted)):
        module: dict = {}
        exec(compile(text, f"no_autograd_{name}.py", "exec"), module)  # noqa: S102  (the generated module's text)
        qualname = f"ag_compiled.{name}.default"

        def kernel(x, module=module, qualname=qualname):
            if torch.is_grad_enabled() and x.requires_grad:
                return module["tied"](qualname, lambda: x * 2, (x,))
            return x * 2

        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, kernel, "CPU")
        lib.impl(name, torch.library.fallthrough_kernel, "Autograd")
        torch.library.register_fake(f"ag_compiled::{name}", module["raising_on_backward"](qualname)(
            lambda x: torch.empty_like(x)), lib=lib)
    op = lambda name: checks.Op(getattr(torch.ops.ag_compiled, name).default, field="ops[0]")
    calls = [{"x": torch.randn(4, 8)}]
    checks.assert_backward_raises_without_formula(op("guarded"), calls, writes_tracked=True)
    with pytest.raises(checks.CheckFailed, match=r"but torch.compile of it on inputs requiring grad ran and detached "
                                                 r"its outputs \(a silent zero gradient\)"):
        checks.assert_backward_raises_without_formula(op("detaching"), calls, writes_tracked=True)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.xdist_group("autograd_projects")  # the module's generated projects, built once
def test_only_ops_with_a_formula_register_one(projects, style):
    project = projects["spec", style]
    ops = (project / "ag_ops" / "ops.py").read_text(encoding="utf-8")
    assert ops.count("register_autograd(") == 2
    assert "def _scale_setup_context(ctx, inputs, keyword_only_inputs, output):" in ops
    assert "def _plain_" not in ops.replace("def _plain_fake", "").replace("def _plain_cpu_without_autograd", "")
    tests = next((project / "tests").glob("test_*.py")).read_text(encoding="utf-8")
    assert "requires_grad is not exercised" not in tests  # the caveat went: backward raises instead
    assert "def test_plain_backward_raises_without_formula():" in tests
    assert "def test_scale_backward_raises_without_formula():" not in tests


LINTED = """
import torch

lib = torch.library.Library("agl", "FRAGMENT")
lib.define("bump_(Tensor(a!) x) -> ()")
lib.define("twice(Tensor x) -> Tensor")


def bump_cpu(x):
    x.add_(1)


def twice_cpu(x):
    return x * 2


lib.impl("bump_", bump_cpu, "CPU")
lib.impl("twice", twice_cpu, "CPU")


@torch.library.register_fake("agl::twice", lib=lib)
def _twice_fake(x):
    return torch.empty_like(x)


torch.library.register_autograd("agl::bump_", lambda ctx, g: g, lib=lib)
torch.library.register_autograd("agl::twice", lambda ctx, g: g * 2, lib=lib)


@torch.library.custom_op("agc::bump_", mutates_args=("x",))
def cbump_(x: torch.Tensor) -> None:
    x.add_(1)


cbump_.register_autograd(lambda ctx, g: g)
"""


def test_lint_reports_a_formula_on_a_mutable_op_with_the_same_rule(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text(LINTED.lstrip("\n"), encoding="utf-8")
    done = opgen("lint", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if " OPG113 " in line]
    # the Library op's finding points at the written argument `Tensor(a!) x` (the part the rule names)
    assert [line.split(" ")[0] for line in lines] == [f"{path}:4:19:", f"{path}:29:2:"], done.stdout
    assert "twice" not in done.stdout  # a functional op may have a formula
    clean = LINTED.replace('torch.library.register_autograd("agl::bump_", lambda ctx, g: g, lib=lib)\n', "")
    path.write_text(clean.replace("cbump_.register_autograd(lambda ctx, g: g)\n", ""), encoding="utf-8")
    assert opgen("lint", str(path)).returncode == 0


def test_the_skip_of_an_op_no_gradient_can_reach_says_why():
    """An op returning only an int8 tensor (a quantizer) skips its backward check naming the dtype; one that only
    writes an argument, under custom_op (writes not tracked), naming custom_op. Before, both said the second."""
    import torch

    from opgen import testing as checks

    lib = torch.library.Library("ag_nograd", "FRAGMENT")
    lib.define("quant(Tensor x) -> Tensor")
    lib.impl("quant", lambda x: x.round().to(torch.int8), "CPU")
    lib.define("scale_(Tensor(a!) x) -> ()")

    def scale_(x):
        x.mul_(2)

    lib.impl("scale_", scale_, "CPU")
    quant = checks.Op(torch.ops.ag_nograd.quant.default, field="ops[0]")
    with pytest.raises(pytest.skip.Exception, match=r"can carry a gradient \(it returns int8 tensors, which carry "
                                                    r"none\)"):
        checks.assert_backward_raises_without_formula(quant, [{"x": torch.randn(4)}], writes_tracked=True)
    scale = checks.Op(torch.ops.ag_nograd.scale_.default, field="ops[0]")
    with pytest.raises(pytest.skip.Exception, match=r"can carry a gradient \(custom_op attaches none to written "
                                                    r"arguments\)"):
        checks.assert_backward_raises_without_formula(scale, [{"x": torch.randn(4)}], writes_tracked=False)
