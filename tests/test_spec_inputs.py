"""`ops[i].inputs` (where an argument's values live), `contiguous:` on a written argument and ScalarType defaults
written as numbers: read from the spec with located errors, and what they generate (no torch, no rendering run)."""

from __future__ import annotations

import textwrap

import pytest

from opgen.render.context import project_context
from opgen.spec.load import load_spec_text
from opgen.spec.nodes import SpecError

CACHE = """
namespace: ns
dtype_codes: {39: float8_e4m3fn}
ops:
  - schema: "put_(Tensor(a!) cache, Tensor slots, Tensor rows, float scale=1.0) -> ()"
    contiguous: [cache]
    inputs:
      slots: {index_into: "cache.shape[0]", unique: true}
      rows: {finite: true, nonempty: true}
      scale: {range: [0, null]}
    reference: |
      cache.view(-1, cache.shape[-1])[slots] = rows * scale
    examples:
      - cache: {shape: [8, 4]}
        slots: {shape: [3], dtype: int64}
        rows: {shape: [3, 4]}
"""


def load(text: str):
    return load_spec_text(textwrap.dedent(text).lstrip("\n"), "spec.yaml")


def error(text: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load(text)
    return caught.value


def test_inputs_are_read_and_reach_the_generated_tests():
    spec = load(CACHE)
    op = spec.ops[0]
    slots = op.input_spec("slots")
    assert slots.unique and slots.index_into.python() == "cache.shape[0]" and op.input_spec("scale").low == 0
    assert op.input_spec("rows").finite and op.input_spec("rows").nonempty
    tests = project_context(spec)["_opgen"]["ops"][0]["tests"]
    lines = "\n".join(tests["op_lines"])
    assert 'checks.Domain(index_into=lambda *, cache, **_: cache.shape[0], unique=True)' in lines
    assert '"scale": checks.Domain(low=0)' in lines and 'contiguous=("cache",)' in lines
    assert tests["drawn"] and any('"slots": checks.Draw((3,), torch.int64)' in line for line in tests["example_lines"])
    assert not any(".view()" in note for note in op.notes)  # the declaration answers the .view( warning


def test_a_written_argument_declared_contiguous_is_refused_when_it_is_not():
    op = project_context(load(CACHE))["_opgen"]["ops"][0]
    for code in (op["registration"]["wrappers"], "\n".join(op["fake"]["lines"])):
        assert "torch._check(\n" in code and "cache.is_contiguous()," in code
        assert "ns::put_ writes cache in place as one dense block: it must be contiguous" in code
    assert "cache.contiguous()" not in op["registration"]["wrappers"]  # a copy would take the writes


def test_a_view_in_a_reference_writing_an_argument_says_what_contiguous_means_for_it():
    spec = load(CACHE.replace("    contiguous: [cache]\n", ""))
    note = next(note for note in spec.ops[0].notes if ".view()" in note)
    assert "for a written argument (cache) `contiguous:` means the op refuses a non-contiguous one" in note


@pytest.mark.parametrize(("old", "new", "line", "message"), [
    ("slots: {index_into", "slot: {index_into", 7, "ops[0].inputs: 'slot' is not an argument of ns::put_"),
    ('"cache.shape[0]"', '"cache.shape[9"', 7, "ops[0].inputs.slots.index_into"),
    ("unique: true}", "unique: yes please}", 7, "ops[0].inputs.slots.unique must be true or false"),
    ("scale: {range: [0, null]}", "scale: {range: [1, 0]}", 9, "the low bound 1 is above the high bound 0"),
    ("scale: {range: [0, null]}", "scale: {range: [null, null]}", 9, "ops[0].inputs.scale.range bounds nothing"),
    ("scale: {range: [0, null]}", "scale: {finite: true}", 9, "unknown key 'finite' in ops[0].inputs.scale"),
    ("rows: {finite: true", "rows: {finit: true", 8, "unknown key 'finit' in ops[0].inputs.rows"),
    ("scale: {range: [0, null]}", "scale: {values: []}", 9, "ops[0].inputs.scale.values must be a list of"),
    ("scale: {range: [0, null]}", "scale: {values: [1.0, .nan]}", 9, "scale.values: nan is not a finite number"),
    ("scale: {range: [0, null]}", "scale: {values: [1.0, 1.0]}", 9, "ops[0].inputs.scale.values: 1.0 is listed twice"),
    ("scale: {range: [0, null]}", "scale: {values: [1" + "0" * 400 + "]}", 9, "(401 characters) is not a finite number"),
    ("scale: {range: [0, null]}", "scale: {range: [0, null], values: [1.0]}", 9,
     "ops[0].inputs.scale: `values` already gives every value of 'scale'"),
    ("rows: {finite: true", "rows: {values: [1], finite: true", 8, "unknown key 'values' in ops[0].inputs.rows"),
])
def test_a_wrong_inputs_entry_is_an_error_at_its_line(old, new, line, message):
    found = error(CACHE.replace(old, new))
    assert found.line == line and message in found.message, (found.line, found.message)
    assert found.hint


def test_a_scalartype_default_written_as_a_number_needs_its_dtype_code():
    text = """
        namespace: ns
        ops:
          - schema: "cast(Tensor x, ScalarType dst_type=39) -> Tensor"
        """
    found = error(text)
    assert found.line == 3 and "the default of ScalarType 'dst_type' is the number 39" in found.message
    assert "dtype_codes: {39: float8_e4m3fn}" in found.hint
    assert found.column == textwrap.dedent(text).splitlines()[3].index("ScalarType") + 1
    spec = load(text.replace("namespace: ns", "namespace: ns\n        dtype_codes: {39: float8_e4m3fn}"))
    assert spec.ops[0].dtype_defaults == (("dst_type", "float8_e4m3fn"),)
    signature = project_context(spec)["_opgen"]["ops"][0]["signature"]["parameters"]
    assert "dst_type: torch.dtype = torch.float8_e4m3fn" in signature
    load(text.replace("=39", "=float16"))  # a dtype word is what torch and Python both read


def test_a_bad_inputs_entry_through_the_cli_is_located_and_writes_nothing(tmp_path, run_opgen):
    spec = tmp_path / "spec.yaml"
    spec.write_text(CACHE.lstrip("\n").replace("unique: true}", "unique: 3}"), encoding="utf-8")
    done = run_opgen("new", str(spec), "-o", str(tmp_path / "out"))
    assert done.returncode == 2
    assert f"{spec}:7:" in done.stderr and "ops[0].inputs.slots.unique must be true or false" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_scalar_listed_values_reach_the_generated_tests_and_an_int_takes_ints_only():
    spec = load(CACHE.replace("scale: {range: [0, null]}", "scale: {values: [0.5, 2]}"))
    assert spec.ops[0].input_spec("scale").values == (0.5, 2)
    lines = "\n".join(project_context(spec)["_opgen"]["ops"][0]["tests"]["op_lines"])
    assert '"scale": checks.Domain(values=(0.5, 2))' in lines
    text = CACHE.replace("float scale=1.0", "int block=16").replace("scale: {range: [0, null]}", "block: {values: "
                                                                     "[16, 32.5]}")
    found = error(text)
    assert found.line == 9 and "ops[0].inputs.block.values: 32.5 is not a 64-bit int" in found.message
    assert "[16, 32, 64]" in found.hint


TOPK = """
namespace: ns
ops:
  - schema: "route(Tensor(a!) weights, Tensor(b!) ids, Tensor logits) -> ()"
    ties: {ids: "torch.softmax(logits.float(), -1)"}
    reference: |
      w, i = torch.topk(torch.softmax(logits.float(), -1), weights.shape[-1], dim=-1)
      weights.copy_(w)
      ids.copy_(i)
    examples:
      - weights: {shape: [4, 2]}
        ids: {shape: [4, 2], dtype: int64}
        logits: {shape: [4, 8]}
"""


def test_ties_are_read_and_reach_the_generated_tests_as_a_function_of_the_arguments():
    op = load(TOPK).ops[0]
    assert op.ties == (("ids", "torch.softmax(logits.float(), -1)", ("logits",)),)
    lines = "\n".join(project_context(load(TOPK))["_opgen"]["ops"][0]["tests"]["op_lines"])
    assert 'ties={"ids": lambda *, logits, **_: torch.softmax(logits.float(), -1)}' in lines
    plain = load(TOPK.replace('"torch.softmax(logits.float(), -1)"', "logits")).ops[0]
    assert plain.ties == (("ids", "logits", ("logits",)),)


@pytest.mark.parametrize(("ties", "where", "message"), [
    ("{idx: logits}", "spec.yaml:4:12:", "'idx' is neither a return nor a written argument of ns::route"),
    ("{ids: weights}", "spec.yaml:4:17:", "'weights' reads weights, which the op writes"),
    ("{ids: scores}", "spec.yaml:4:17:", "'scores' names scores, not an argument"),
    ('{ids: "logits +"}', "spec.yaml:4:17:", "'logits +' is not a Python expression"),
    ("[ids]", "spec.yaml:4:11:", "ops[0].ties must map an index output to the scores it picks from"),
])
def test_a_wrong_ties_entry_is_a_located_error_with_a_hint(ties, where, message):
    text = TOPK.replace('{ids: "torch.softmax(logits.float(), -1)"}', ties)
    found = error(text)
    assert str(found).startswith(f"error: {where}") and message in str(found), str(found)
    assert "= hint: " in str(found), str(found)
