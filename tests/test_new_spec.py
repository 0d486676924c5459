"""The spec loader and the template context as pure functions (no rendering, no torch)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from opgen.errors import OpgenError
from opgen.render.context import docstring, literal, project_context, string_call
from opgen.render.templates import render_package
from opgen.spec.load import load_spec_text
from opgen.spec.model import TensorValue


def load(text: str, **overrides):
    return load_spec_text(textwrap.dedent(text).lstrip("\n"), "spec.yaml", **overrides)


def test_defaults_and_shapes_of_a_minimal_spec():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x) -> Tensor"
        """)
    assert (spec.style, spec.device, spec.package) == ("library", "npu", "ns")
    op = spec.ops[0]
    assert op.schema.qualified_name == "ns::f"
    assert op.missing_semantics == ["ops[0].outputs.out0.shape", "ops[0].outputs.out0.dtype"]
    assert op.examples[0].derived and op.examples[0].values == {"x": TensorValue("float32", shape=(4, 8))}


def test_aliased_return_is_rewritten_to_nothing_with_a_note():
    spec = load("""
        namespace: ns
        ops:
          - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"
        """)
    op = spec.ops[0]
    assert op.schema.signature() == "scale_(Tensor(a!) x, float s) -> ()"
    assert op.outputs == ()
    assert any("OPG102: rewrote ns::scale_" in note for note in op.notes)


def test_side_effect_only_op_is_accepted_and_marked():
    spec = load("""
        namespace: ns
        ops:
          - schema: "prefetch(Tensor x) -> ()"
        """)
    assert project_context(spec)["_opgen"]["ops"][0]["registration"]["side_effect"] is True


def test_cli_overrides_are_written_into_the_stored_spec():
    text = """
        namespace: ns  # comment kept
        style: library
        ops:
          - schema: "f(Tensor x) -> Tensor"
        """
    spec = load(text, style="custom_op", device="cuda")
    assert spec.style == "custom_op" and spec.device == "cuda"
    assert "style: custom_op" in spec.text and "device: cuda" in spec.text and "# comment kept" in spec.text
    again = load_spec_text(spec.text, "again.yaml")
    assert (again.style, again.device) == ("custom_op", "cuda")


def test_yaml_1_1_float_strings_are_read_as_floats_for_float_arguments():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x, float eps) -> Tensor"
            examples:
              - {x: {shape: [2]}, eps: 1e-6}
        """)
    assert spec.ops[0].examples[0].values["eps"] == 1e-6


def test_exact_values_infer_their_dtype():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x, Tensor m) -> Tensor"
            examples:
              - {x: {values: [1, 2]}, m: {values: [true, false]}}
        """)
    values = spec.ops[0].examples[0].values
    assert values["x"] == TensorValue("int64", values=(1, 2))
    assert values["m"] == TensorValue("bool", values=(True, False))


@pytest.mark.parametrize("text, message", [
    ("namespace: ns\nops:\n  - schema: \"f(Tensor x) -> Tensor\"\n  - schema: \"f(Tensor y) -> Tensor\"\n",
     "spec.yaml:4:5: ops[1] defines 'f' again"),
    ("namespace: ns\nops:\n  - schema: \"other::f(Tensor x) -> Tensor\"\n",
     "spec.yaml:3:14: ops[0].schema: the schema's namespace 'other' differs"),
    ("namespace: ns\nops:\n  - schema: \"f(Tensor x) -> ()\"\n    outputs: {out0: {shape: x.shape}}\n",
     "spec.yaml:4:14: ops[0].outputs: the op returns nothing"),
    ("namespace: ns\nops:\n  - schema: \"f(Tensor x) -> Tensor\"\n    reference: |\n      return x +\n",
     "spec.yaml:5:17: ops[0].reference is not valid Python"),
    ("namespace: ns\npackage: class\nops:\n  - schema: \"f(Tensor x) -> Tensor\"\n",
     "spec.yaml:2:10: package 'class' is not a valid identifier"),
    ("", "spec.yaml:1: the spec is empty"),
    ("- a\n", "spec.yaml:1:1: the spec must be a mapping"),
])
def test_errors_name_the_file_line_and_column(text, message):
    with pytest.raises(OpgenError) as caught:
        load_spec_text(text, "spec.yaml")
    assert message in caught.value.render()


def test_string_helpers_never_let_text_escape():
    nasty = 'a "b" \'\'\' """ \\ {{ x }} {% y %}\n\tz'
    assert ast.literal_eval(literal(nasty)) == nasty
    assert ast.literal_eval(docstring(nasty)) == nasty.strip()
    assert ast.literal_eval(docstring("Plain text.")) == "Plain text."
    wrapped = string_call("f(", "word, " * 60, ")")
    call = ast.parse(wrapped).body[0].value
    assert ast.literal_eval(call.args[0]) == "word, " * 60
    assert max(len(line) for line in wrapped.splitlines()) <= 120


def test_context_is_plain_data():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x) -> Tensor"
            outputs:
              out0: {shape: "x.shape", dtype: float16}
        """)
    context = project_context(spec)

    def plain(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, int, bool))

    assert plain(context)
    op = context["_opgen"]["ops"][0]
    assert op["fake"]["lines"] == ["out0 = torch.empty(x.shape, dtype=torch.float16, device=x.device)", "return out0"]


def test_a_sized_list_example_takes_any_length_as_torch_does():
    """`int[1]? dim` with `[0, -1]`: torch does not enforce the size of `int[N]` (`aten::sum.dim_IntList(x,
    [0, -1])` works), so opgen does not either."""
    import torch

    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x, int[1]? dim=None, int[2] pad=0) -> Tensor"
            examples: [{x: {shape: [2, 3, 4], dtype: float32}, dim: [0, -1], pad: [1, 2, 3]}]
        """)
    values = spec.ops[0].examples[0].values
    assert values["dim"] == (0, -1) and values["pad"] == (1, 2, 3)
    assert torch.ops.aten.sum.dim_IntList(torch.ones(2, 3, 4), [0, -1]).shape == (3,)  # torch's premise


def test_a_made_up_example_is_said_and_gives_index_arguments_valid_indices():
    spec = load_spec_text("namespace: g\nops:\n  - schema: \"gather(Tensor x, Tensor index, float s) -> Tensor\"\n")
    example = spec.ops[0].examples[0]
    assert example.derived
    assert example.values["index"].dtype == "int64" and example.values["index"].values == (0, 1, 2, 3)
    assert example.values["x"].dtype == "float32" and example.values["x"].shape == (4, 8)
    note = ("no `ops[0].examples`: the generated tests call the op with one opgen made up (x: float32[4, 8], "
            "index: int64 [0, 1, 2, 3], s: 0.5); add examples with the shapes, dtypes and values your kernel expects "
            "(docs/spec.md)")
    assert spec.ops[0].notes == (note,)


def test_tags_keep_the_aliased_return_and_need_no_semantics():
    spec = load("""
        namespace: ns
        ops:
          - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"
            tags: [inplace]
          - schema: "topk.values(Tensor x, int k, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)"
            tags: [out]
        """)
    inplace, out = spec.ops
    assert inplace.tags == ("inplace",)
    assert [note for note in inplace.notes if "OPG" in note] == []  # no rewrite: the aliased return is kept
    assert inplace.schema.signature() == "scale_(Tensor(a!) x, float s) -> Tensor(a!)"
    assert [o.returns_argument for o in inplace.outputs] == ["x"] and inplace.missing_semantics == []
    assert [o.returns_argument for o in out.outputs] == ["values", "indices"] and out.missing_semantics == []
    ops = project_context(spec)["_opgen"]["ops"]
    files = {f.path: f.content for f in render_package(spec)}
    registration, tests = files["ns/ops.py"], files["tests/test_ns.py"]
    assert ('lib.define("scale_(Tensor(a!) x, float s) -> Tensor(a!)", '
            'tags=(torch.Tag.inplace, torch.Tag.pt2_compliant_tag))\n') in registration
    assert ops[0]["fake"]["trivial"] and not ops[0]["fake"]["todo"] and ops[0]["fake"]["lines"] == []
    assert ops[0]["tests"]["semantics_lines"] == ["return [(x.shape, x.dtype)]"]
    assert ops[1]["tests"]["semantics_lines"] == [
        "return [(values.shape, values.dtype), (indices.shape, indices.dtype)]"]
    assert '    returned=("values", "indices"),\n    tag="out",\n' in tests  # the checks read the returned arguments
    # the long schema is wrapped over lines: still one define call
    defines = [node for node in ast.walk(ast.parse(registration)) if isinstance(node, ast.Call)
               and ast.unparse(node.func) == "lib.define"]
    assert [ast.literal_eval(call.args[0]) for call in defines][1].startswith("topk.values(Tensor x, int k, *, ")


def test_without_tags_the_rewrite_note_names_the_tags_key():
    spec = load("""
        namespace: ns
        ops:
          - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"
        """)
    assert "add `tags: [inplace]` or `tags: [out]`" in spec.ops[0].notes[0]


EXPECT_SPEC = """
    namespace: ns
    ops:
      - schema: "f(Tensor(a!) cache, Tensor x, *, Tensor(b!) out) -> (Tensor y, Tensor n)"
        examples:
          - cache: {shape: [4, 2]}
            x: {values: [1.0, 2.0]}
            out: {shape: [2]}
            expect:
    """


def test_expect_reads_whole_tensors_rows_and_tolerances():
    spec = load(EXPECT_SPEC + """
              y: [[1.0, .nan]]
              n: {values: 3, rtol: 0.5, atol: 1e-3}
              cache: {rows: {-1: [1, 2], 0: [0, 0]}}
              out: [2.0, 4.0]
        tolerances: {half: {rtol: 1.0e-2, atol: 1.0e-3}}
    """)
    op = spec.ops[0]
    y, n, cache, out = op.examples[0].expect
    assert (y.name, y.output, y.argument, y.values[0][0]) == ("y", 0, None, 1.0) and y.values[0][1] != y.values[0][1]
    assert (n.output, n.values, n.rtol, n.atol) == (1, 3, 0.5, 1e-3)
    assert (cache.output, cache.argument, cache.rows) == (None, 0, ((-1, (1, 2)), (0, (0, 0))))
    assert (out.argument, out.values) == ("out", (2.0, 4.0))
    assert op.tolerances == (("float16", 0.01, 0.001),)
    lines = project_context(spec)["_opgen"]["ops"][0]["tests"]["expected_lines"]
    assert lines[0] == 'checks.Expected(example=0, name="y", values=[[1.0, float("nan")]]),'
    assert lines[1] == 'checks.Expected(example=0, name="n", values=3, rtol=0.5, atol=0.001),'
    assert lines[2] == 'checks.Expected(example=0, name="cache", rows={-1: [1, 2], 0: [0, 0]}),'
    assert lines[3] == 'checks.Expected(example=0, name="out", values=[2.0, 4.0]),'


def test_long_expected_values_are_wrapped_and_stay_python():
    row = "[" + ", ".join(["1.25"] * 40) + "]"
    spec = load(EXPECT_SPEC + f"""
              y: [{row}, {row}]
              cache: {{rows: {{3: {row}}}}}
    """)
    lines = project_context(spec)["_opgen"]["ops"][0]["tests"]["expected_lines"]
    assert all(len(line) + 4 <= 120 for line in lines)
    calls = ast.parse("(" + "\n".join(lines) + ")").body[0].value.elts
    values = [{k.arg: ast.literal_eval(k.value) for k in call.keywords} for call in calls]
    assert values[0]["values"] == [[1.25] * 40] * 2 and values[1]["rows"] == {3: [1.25] * 40}


@pytest.mark.parametrize("entries, message", [
    ("z: [1.0]", "spec.yaml:9:11: ops[0].examples[0].expect: 'z' is neither a return nor a mutated argument"),
    ("x: [1.0]", "spec.yaml:9:11: ops[0].examples[0].expect: 'x' is neither a return nor a mutated argument"),
    ("y: [[1.0], [2.0, 3.0]]", "spec.yaml:9:14: ops[0].examples[0].expect.y must be a number or a rectangular"),
    ("y: [a]", "spec.yaml:9:14: ops[0].examples[0].expect.y must be a number"),
    ("y: {values: [1], rows: {0: 1}}", "spec.yaml:9:14: ops[0].examples[0].expect.y needs exactly one of"),
    ("y: {rows: {a: 1}}", "spec.yaml:9:22: ops[0].examples[0].expect.y.rows: 'a' is not a row index"),
    ("y: {values: [1], rtol: -1}", "spec.yaml:9:34: ops[0].examples[0].expect.y.rtol must be a number >= 0"),
    ("y: {value: [1]}", "spec.yaml:9:15: unknown key 'value' in ops[0].examples[0].expect.y"),
])
def test_expect_errors_name_the_file_line_and_column(entries, message):
    with pytest.raises(OpgenError) as caught:
        load(EXPECT_SPEC + "          " + entries + "\n")
    assert message in caught.value.render()


def test_like_gives_shape_dtype_and_layout_of_an_argument():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x, Tensor y) -> (Tensor a, Tensor b)"
            outputs:
              a: {like: y}
              b: {shape: "x.shape", dtype: "x.dtype"}
        """)
    op = project_context(spec)["_opgen"]["ops"][0]
    assert op["fake"]["lines"][0] == "a = torch.empty_like(y)"
    assert op["fake"]["lines"][1] == "b = torch.empty(x.shape, dtype=x.dtype, device=x.device)"
    assert "a = torch.empty(y.shape, dtype=y.dtype, device=\"meta\")" in "\n".join(op["tests"]["semantics_lines"])


@pytest.mark.parametrize("entry, message", [
    ("{like: z}", "spec.yaml:4:25: ops[0].outputs.a.like: unknown name `z`"),
    ("{like: n}", "spec.yaml:4:25: ops[0].outputs.a.like: `like` must be a tensor, got an int: `n`"),
    ('{like: x, shape: "[1]"}', "spec.yaml:4:28: ops[0].outputs.a: `like` gives the shape (and layout) already"),
])
def test_like_errors_are_located(entry, message):
    with pytest.raises(OpgenError) as caught:
        load(f"""
            namespace: ns
            ops:
              - schema: "f(Tensor x, int n) -> Tensor a"
                outputs: {{a: {entry}}}
            """)
    assert message in caught.value.render()


def test_an_argument_named_expect_is_an_argument():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x, int expect) -> Tensor"
            examples:
              - {x: {shape: [2]}, expect: 3}
        """)
    assert spec.ops[0].examples[0].values["expect"] == 3 and spec.ops[0].examples[0].expect == ()


def test_dynamic_tier_pairs_two_examples_or_doubles_the_last_size():
    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor(a!) cache, Tensor key, Tensor slots) -> ()"
            examples:
              - {cache: {shape: [8, 16]}, key: {shape: [2, 16]}, slots: {values: [1, 5]}}
          - schema: "g(Tensor x, float s) -> Tensor"
            examples:
              - {x: {shape: [4, 8]}, s: 1.0}
              - {x: {shape: [2, 8], dtype: float16}, s: 1.0}
              - {x: {shape: [6, 3]}, s: 1.0}
        """)
    f, g = project_context(spec)["_opgen"]["ops"]
    f_pair, g_pair = f["tests"]["two_sizes"], g["tests"]["two_sizes"]
    assert f_pair["derived"] and "last size 16 doubled" in f_pair["doc"]
    derived = "\n".join(f_pair["lines"])
    assert '"cache": checks.random_tensor((8, 32), torch.float32, g)' in derived
    assert '"key": checks.random_tensor((2, 32), torch.float32, g)' in derived
    assert '"slots": torch.tensor([1, 5], dtype=torch.int64)' in derived  # its last size (2) is not 16: kept
    assert not g_pair["derived"] and g_pair["pair"] == [0, 2] and g_pair["lines"] == []


def test_the_two_sizes_pair_never_uses_sizes_0_or_1():
    """torch.compile specialises sizes 0 and 1: a pair differing there would compile twice whatever the fake does
    (a false failure); examples 1 and 2 differ only in sizes above 1."""
    spec = load("""
        namespace: ns
        ops:
          - schema: "g(Tensor x) -> Tensor"
            examples:
              - {x: {shape: [1, 8]}}
              - {x: {shape: [4, 8]}}
              - {x: {shape: [6, 8]}}
          - schema: "h(Tensor x) -> Tensor"
            examples:
              - {x: {shape: [1, 8]}}
              - {x: {shape: [4, 8]}}
        """)
    g, h = (op["tests"]["two_sizes"] for op in project_context(spec)["_opgen"]["ops"])
    assert g["pair"] == [1, 2] and not g["derived"]
    assert h["derived"] and h["pair"] is None  # example 0 with its last size doubled instead


def test_opgen_check_chooses_the_two_sizes_the_generated_tests_do():
    """One rule (opgen.spec.two_sizes) for the generated tests and `opgen check`'s capture_limit rung: the same pair,
    the same doubled call (an exact tensor whose last size is the doubled one repeats its values: the check once
    left it as it was), none for calls that differ at a size 1 only."""
    from types import SimpleNamespace

    from opgen.check.worker import _two_sizes

    spec = load("""
        namespace: ns
        ops:
          - schema: "f(Tensor x, Tensor w) -> Tensor"
            examples:
              - {x: {shape: [4, 8]}, w: {values: [1, 2, 3, 4, 5, 6, 7, 8]}}
          - schema: "g(Tensor x) -> Tensor"
            examples:
              - {x: {shape: [1, 8]}}
              - {x: {shape: [4, 8]}}
              - {x: {shape: [6, 8]}}
          - schema: "h(Tensor x) -> Tensor"
            examples:
              - {x: {shape: [1]}}
        """)
    f, g, h = (SimpleNamespace(calls=[example.values for example in op.examples]) for op in spec.ops)
    (first, doubled), derived = _two_sizes(f)
    assert derived and first is f.calls[0] and doubled["x"].shape == (4, 16)
    assert doubled["w"].values == (1, 2, 3, 4, 5, 6, 7, 8) * 2
    assert _two_sizes(g) == ([g.calls[1], g.calls[2]], False)
    assert _two_sizes(h) is None
