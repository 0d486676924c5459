"""`ops[i].fusion` in a spec: what it reads (no torch), each bad form refused at its line and column with a hint,
and through the real CLI: exit code 2 and nothing written."""

from __future__ import annotations

import textwrap

import pytest
from new_helpers import opgen

from opgen.errors import OpgenError
from opgen.render.context import project_context
from opgen.spec.load import load_spec_text

OP = """\
namespace: ns
ops:
  - schema: "add_norm(Tensor x, Tensor y, Tensor g, float eps=1e-06, int n=1) -> (Tensor out, Tensor sum)"
    outputs:
      out: {like: x}
      sum: {like: x}
    reference: |
      s = x + y
      return s * g * eps, s
"""


def load(fusion: str, op: str = OP):
    return load_spec_text(op + textwrap.indent(textwrap.dedent(fusion).lstrip("\n"), "    "), "spec.yaml")


def test_defaults_match_the_reference_with_every_tensor_an_input_and_each_scalar_its_default():
    fusion = load("fusion: {}\n").ops[0].fusion
    assert fusion.targets == ("npugraph_ex", "inductor") and fusion.models == () and len(fusion.forms) == 1
    form = fusion.forms[0]
    assert form.from_reference and form.body.startswith("s = x + y") and (form.field, form.name) == ("ops[0].fusion", "")
    assert (form.inputs, form.constants, form.conditions) == (("x", "y", "g"), (("eps", 1e-06), ("n", 1)), ())


def test_a_pattern_constants_a_float_matched_by_value_conditions_and_targets():
    spec = load("""
        fusion:
          pattern: |
            s = x + y
            return s * g * eps, s
          inputs: [x, y, g, eps]
          when: ["g.dim() == 1", "x.dtype == y.dtype"]
          targets: [inductor]
        """)
    fusion = spec.ops[0].fusion
    form = fusion.forms[0]
    assert not form.from_reference and form.inputs == ("x", "y", "g", "eps") and form.constants == (("n", 1),)
    assert [rule.python() for rule in form.conditions] == ["g.dim() == 1", "x.dtype == y.dtype"]
    assert fusion.targets == ("inductor",)
    context = project_context(spec)["_opgen"]
    assert context["fusions"] == "(ADD_NORM,)"
    code = context["ops"][0]["fusion"]["code"]
    assert 'scalar_workaround={"eps": ' in code and 'targets=("inductor",)' in code
    assert "return g.dim() == 1 and x.dtype == y.dtype and floating in ADD_NORM_DTYPES" in code


FORMS = """
    fusion:
      forms:
        - name: llama
          pattern: |
            s = x + y
            return g * (s * eps), s
          inputs: [x, y, g, eps]
        - pattern: |
            s = x + y
            return (s * eps) * g, s
          when: "g.dim() == 1"
      targets: [npugraph_ex]
      models: [LlamaForCausalLM, {architecture: Qwen3ForCausalLM, config: {num_hidden_layers: 1}, cache: static}]
    examples:
      - {x: {shape: [4, 8], dtype: bfloat16}, y: {shape: [4, 8], dtype: bfloat16}, g: {shape: [8], dtype: bfloat16}}
      - {x: {shape: [2, 3, 8]}, y: {shape: [2, 3, 8]}, g: {shape: [8]}}
      - {x: {shape: [5, 8]}, y: {shape: [5, 8]}, g: {shape: [8]}}
    """


def test_forms_each_with_its_own_composite_inputs_and_conditions_and_the_models_that_prove_them():
    fusion = load(FORMS).ops[0].fusion
    llama, other = fusion.forms
    assert (llama.field, llama.name, other.field, other.name) == ("ops[0].fusion.forms[0]", "llama",
                                                                  "ops[0].fusion.forms[1]", "")
    assert llama.inputs == ("x", "y", "g", "eps") and llama.constants == (("n", 1),) and not llama.conditions
    assert other.inputs == ("x", "y", "g") and other.constants == (("eps", 1e-06), ("n", 1)) and other.conditions
    assert fusion.targets == ("npugraph_ex",)
    assert [(m.architecture, m.config, m.cache) for m in fusion.models] == [("LlamaForCausalLM", (), ""), (
        "Qwen3ForCausalLM", (("num_hidden_layers", 1),), "static")]
    # traced once per dtype combination of the examples, then per other rank: the bfloat16 casts are in a pattern
    assert llama.floating_dtypes == (("bfloat16",) * 3, ("float32",) * 3)
    assert [(trace["x"].dtype, len(trace["x"].shape)) for trace in llama.traces] == [
        ("bfloat16", 2), ("float32", 3), ("float32", 2)]


def test_the_generated_patterns_name_each_form_and_the_tests_run_over_them():
    context = project_context(load(FORMS))["_opgen"]
    fusion = context["ops"][0]["fusion"]
    assert context["fusions"] == "(ADD_NORM_LLAMA, ADD_NORM_FORM1)"
    assert fusion["records"] == ["ADD_NORM_LLAMA", "ADD_NORM_FORM1"] and fusion["constant"] == "ADD_NORM_FORMS"
    # by index: collecting the tests imports no patterns.py (the `patterns` fixture does, for the fusion tests alone)
    assert fusion["parametrize"] == '@pytest.mark.parametrize("form", range(2), ids=("llama", "form1"))'
    assert (fusion["argument"], fusion["parameter"]) == ("patterns.ADD_NORM_FORMS[form]", "patterns, form")
    code = fusion["code"]
    for name in ("add_norm_llama_composite", "_add_norm_form1_search", ("ADD_NORM_FORMS = (ADD_NORM_LLAMA, "
                 "ADD_NORM_FORM1)"), 'field="ops[0].fusion.forms[1]"', ("ADD_NORM_LLAMA_DTYPES = (\n    (torch.bfloat16, "
                 "torch.bfloat16, torch.bfloat16),\n    (torch.float32, torch.float32, torch.float32),\n)")):
        assert name in code, name
    assert fusion["models"] == ['("LlamaForCausalLM", {})',
                                '("Qwen3ForCausalLM", {"num_hidden_layers": 1}, "static")']  # a third only with a cache
    assert fusion["models_parametrize"].splitlines()[0] == ('@pytest.mark.parametrize("dtype", [torch.bfloat16, '
                                                            'torch.float32], ids=("bfloat16", "float32"))')


def test_a_long_model_config_and_a_long_condition_stay_within_120_columns():
    """A model whose config does not fit a line lists it one item a line; a condition too long for `_applies`' line
    breaks before its last `==` (inside the parentheses): the same values, ruff's E501 satisfied."""
    config = ", ".join(f"option_number_{n}: {n}" for n in range(8))
    long_rule = '"broadcast(x.shape[:-1] + [x.shape[-1] // 2], g.shape) == x.shape[:-1] + [x.shape[-1] // 2]"'
    fusion = load(FORMS.replace("{num_hidden_layers: 1}, cache: static}", f"{{{config}}}}}").replace(
        'when: "g.dim() == 1"', f"when: [{long_rule}]"))
    context = project_context(fusion)["_opgen"]["ops"][0]["fusion"]
    parametrize = context["models_parametrize"]
    assert max(len(line) for line in parametrize.splitlines()) <= 120
    assert '                "option_number_7": 7,\n' in parametrize
    assert "\n        == [*x.shape[:-1], x.shape[-1] // 2]\n" in context["code"]
    assert max(len(line) for line in context["code"].splitlines()) <= 120


def test_a_form_states_the_tolerances_of_the_op_against_its_composite_in_the_generated_record():
    """`tolerances:` (a form whose casts the op does not follow); without it the record says none (bit-identical)."""
    spec = load("""
        fusion:
          - {name: exact}
          - name: rounded
            pattern: |
              s = x + y
              return (s * g * eps).to(x.dtype), s
            tolerances: {bfloat16: {rtol: 1.6e-2, atol: 0.0}, float16: {rtol: 2.0e-3, atol: 1.0e-6}}
        """)
    assert [form.tolerances for form in spec.ops[0].fusion.forms] == [
        (), (("bfloat16", 0.016, 0.0), ("float16", 0.002, 1e-06))]
    code = project_context(spec)["_opgen"]["ops"][0]["fusion"]["code"]
    assert "    tolerances={},\n" in code
    assert "    tolerances={torch.bfloat16: (0.016, 0.0), torch.float16: (0.002, 1e-06)},\n" in code


def test_dtypes_trace_each_example_in_each_dtype_and_leave_out_the_others():
    spec = OP.replace("    reference:", "    dtypes: [bfloat16, float16]\n    reference:")
    fusion = load("fusion: {}\nexamples:\n  - {x: {shape: [4, 8]}, y: {shape: [4, 8]}, g: {shape: [8]}}\n"
                  "  - {x: {shape: [4, 8], dtype: float16}, y: {shape: [4, 8], dtype: float16}, g: {shape: [8], "
                  "dtype: float16}}\n", spec).ops[0].fusion
    # the float32 example in bfloat16 and float16 (itself left out: ops[0].dtypes does not list float32)
    assert fusion.forms[0].floating_dtypes == (("bfloat16",) * 3, ("float16",) * 3)


def test_opgen_new_warns_when_no_form_is_traced_in_half_precision(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(OP + "    fusion: {}\n    examples:\n      - {x: {shape: [4, 8]}, y: {shape: [4, 8]}, g: "
                    "{shape: [8]}}\n", encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert ("ops[0].fusion is traced in float32 only (the dtypes of ops[0].examples): a bfloat16 or float16 model has "
            "casts these patterns lack") in " ".join(done.stderr.split()), done.stderr
    bf16 = OP + ("    fusion: {}\n    examples:\n      - {x: {shape: [4, 8], dtype: bfloat16}, y: {shape: [4, 8], "
                 "dtype: bfloat16}, g: {shape: [8], dtype: bfloat16}}\n")
    assert not [note for note in load_spec_text(bf16, "spec.yaml").ops[0].notes if "traced in" in note]


def test_an_op_without_fusion_gets_no_patterns_module():
    context = project_context(load_spec_text(OP, "spec.yaml"))["_opgen"]
    assert context["fusions"] == "" and context["ops"][0]["fusion"]["constant"] == ""
    assert context["ops"][0]["fusion"]["records"] == [] and context["ops"][0]["fusion"]["code"] == ""


@pytest.mark.parametrize("fusion, message, hint", [
    ("fusion: {inputs: [x, y, gg]}\n", "spec.yaml:10:29: ops[0].fusion.inputs: 'gg' is not an argument of ns::add_norm",
     "did you mean 'g'?"),
    ("fusion: {inputs: [x, y]}\n", "spec.yaml:10:22: ops[0].fusion.inputs leaves out the tensor(s) g",
     "add g to ops[0].fusion.inputs"),
    ("fusion: {inputs: [x, y, g, n]}\n",
     "spec.yaml:10:32: ops[0].fusion.inputs: 'n' is 'int', which a pattern cannot match as a value",
     "give its value in `ops[0].fusion.constants` instead"),
    ("fusion: {constants: {x: 1.0}}\n", "spec.yaml:10:26: ops[0].fusion.constants: 'x' cannot be a constant: a tensor",
     "remove it from ops[0].fusion.constants"),
    ("fusion: {constants: {eps: fast}}\n", "spec.yaml:10:31: ops[0].fusion.constants.eps must be a number",
     "the argument is 'float'"),
    ("fusion: {patern: x}\n", "spec.yaml:10:14: unknown key 'patern' in ops[0].fusion", "did you mean 'pattern'?"),
    ("fusion: {targets: [npugraph]}\n", "spec.yaml:10:24: ops[0].fusion.targets: unknown target 'npugraph'",
     "did you mean 'npugraph_ex'?"),
    ("fusion: {when: [\"g.dims() == 1\"]}\n", "spec.yaml:10:24: ops[0].fusion.when[0]: unsupported attribute `.dims`",
     "did you mean `.dim`?"),
    ("fusion: {when: \"g.dim()\"}\n", "spec.yaml:10:21: ops[0].fusion.when: a condition must be a bool",
     "compare explicitly"),
    ("fusion:\n  pattern: |\n    s = x +\n    return s, s\n", "spec.yaml:12:16: ops[0].fusion.pattern is not valid Python",
     "write the body of a function"),
    ("fusion:\n  pattern: |\n    s = x + y\n    return s * g\n",
     ("spec.yaml:13:9: ops[0].fusion.pattern returns 1 value(s), but it must return 2 value(s), one per return of the op "
     "(out, sum)"), "return what the op returns"),
    ("fusion:\n  pattern: |\n    s = x + y\n    return s * eps, s\n",
     "spec.yaml:11:16: ops[0].fusion.pattern never reads g, an input of the pattern (ops[0].fusion.inputs)",
     "read it in the composite"),
    ("fusion: []\n", "spec.yaml:10:13: ops[0].fusion is an empty list of forms", "give one form"),
    ("fusion: {forms: [{}], when: \"g.dim() == 1\"}\n",
     "spec.yaml:10:27: ops[0].fusion.when stands beside ops[0].fusion.forms: each form has its own", "move it into"),
    ("fusion: {forms: {}}\n", "spec.yaml:10:21: ops[0].fusion.forms must be a list of forms", None),
    ("fusion: [{}, {}]\n", "spec.yaml:10:18: ops[0].fusion[1] is the composite of ops[0].fusion[0] again",
     "operand orders of a sum or product are matched"),
    ("fusion: [{name: a}, {name: a, inputs: [x, y, g, eps]}]\n",
     "spec.yaml:10:25: ops[0].fusion[1].name 'a' is the name of ops[0].fusion[0] too", "its own name"),
    ("fusion: [{targets: [inductor]}]\n", "spec.yaml:10:15: unknown key 'targets' in ops[0].fusion[0]", None),
    ("fusion: {models: [Llama-7b]}\n", "spec.yaml:10:23: ops[0].fusion.models[0] 'Llama-7b' is not a valid", None),
    ("fusion: {models: [LlamaForCausalLM, LlamaForCausalLM]}\n",
     "spec.yaml:10:41: ops[0].fusion.models[1]: LlamaForCausalLM is listed twice", None),
    ("fusion: {models: [{architecture: X, config: [1]}]}\n",
     "spec.yaml:10:49: ops[0].fusion.models[0].config must map config names to values", None),
    ("fusion: {models: [{architecture: X, cache: dynamic}]}\n",
     "spec.yaml:10:48: ops[0].fusion.models[0].cache must be one of static", "a transformers StaticCache"),
    ("fusion: {tolerances: {bfloat17: {rtol: 0.01, atol: 0.0}}}\n",
     "spec.yaml:10:27: ops[0].fusion.tolerances: unknown dtype 'bfloat17'", "did you mean 'bfloat16'?"),
    ("fusion: {tolerances: {bfloat16: {rtol: 0.01}}}\n", "spec.yaml:10:37: ops[0].fusion.tolerances.bfloat16 has no 'atol'", "atol"),
    ("fusion:\n  pattern: |\n    return torch.ops.ns.add_norm(x, y, g), x\n",
     "spec.yaml:12:16: ops[0].fusion.pattern calls the op itself", "write the computation with torch operators"),
])
def test_a_bad_fusion_is_refused_at_its_line_and_column_with_a_hint(fusion, message, hint):
    with pytest.raises(OpgenError) as caught:
        load(fusion)
    rendered = caught.value.render()
    assert message in rendered, rendered
    if hint:
        assert hint in rendered, rendered


@pytest.mark.parametrize("op, message, hint", [
    (('namespace: ns\nops:\n  - schema: "noise(Tensor x) -> Tensor"\n    tags: [nondeterministic_seeded]\n'
     '    outputs: {out0: {like: x}}\n    reference: "return torch.rand_like(x)"\n'),
     "spec.yaml:7:5: ops[0].fusion: ns::noise cannot replace a composite: the op draws random numbers",
     "remove `ops[0].fusion`"),
    ('namespace: ns\nops:\n  - schema: "prefetch(Tensor x) -> ()"\n    reference: "pass"\n',
     "spec.yaml:5:5: ops[0].fusion: ns::prefetch cannot replace a composite: the op returns nothing and writes nothing",
     None),
    (('namespace: ns\nops:\n  - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"\n    tags: [inplace]\n'
     '    reference: "return x.mul_(s)"\n'),
     "spec.yaml:6:5: ops[0].fusion: ns::scale_ cannot replace a composite: the op is tagged torch.Tag.inplace",
     "opgen's default form"),
    ('namespace: ns\nops:\n  - schema: "top(Tensor x) -> Tensor"\n    reference: "return x"\n',
     "ops[0].fusion: ns::top cannot replace a composite: the op has no fake function", "fill ops[0].outputs.out0"),
    (('namespace: ns\nops:\n  - schema: "cat2(Tensor[] xs) -> Tensor"\n    outputs: {out0: {like: "xs[0]"}}\n'
     '    reference: "return xs[0]"\n'),
     "spec.yaml:3:19: ops[0].schema: `ops[0].fusion`: argument 'xs' is a list of tensors", "remove `ops[0].fusion`"),
    ('namespace: ns\nops:\n  - schema: "twice(Tensor x) -> Tensor"\n    outputs: {out0: {like: x}}\n',
     "spec.yaml:5:5: ops[0].fusion: no composite to match: the op has no `reference:`", "give `ops[0].fusion.pattern`"),
])
def test_an_op_that_cannot_be_a_replacement_is_refused(op, message, hint):
    with pytest.raises(OpgenError) as caught:
        load_spec_text(op + "    fusion: {}\n", "spec.yaml")
    rendered = caught.value.render()
    assert message in rendered, rendered
    if hint:
        assert hint in rendered, rendered


def test_the_cli_refuses_a_bad_fusion_with_exit_2_and_writes_nothing(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(OP + "    fusion: {inputs: [x, y, gg]}\n", encoding="utf-8")
    done = opgen("new", str(spec), "-o", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert f"{spec}:10:29: ops[0].fusion.inputs: 'gg' is not an argument" in done.stderr
    assert "hint: did you mean 'g'?" in done.stderr
    assert not (tmp_path / "out").exists()
