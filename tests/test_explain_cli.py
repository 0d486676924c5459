"""`opgen explain` run as a real command: text, JSON, stdin batches, codes, exit statuses."""

from __future__ import annotations

import json

import pytest

from opgen.contract import RULES

INPLACE = "myns::scale_.out(Tensor(a!) self, Tensor? bias=None, SymInt[2] stride=1, *, ScalarType? dtype=None) -> ()"
ALIASED = "scale_(Tensor(a!) x, float s) -> Tensor(a!)"


def test_text_report_is_plain_in_a_pipe_and_complete(run_opgen):
    result = run_opgen("explain", INPLACE)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # no colour codes when piped
    lines = out.splitlines()
    assert lines[0] == INPLACE
    assert "  namespace: myns   name: scale_   overload: out" in lines
    assert "  self: Tensor(a!)  [mutated]" in lines
    assert "  stride: SymInt[2] = 1" in lines
    assert "      python: list[int]" in lines  # not eaten as console markup
    assert "      c++:    at::Tensor &" in lines
    assert "  dtype: ScalarType? = None  [keyword-only]" in lines
    assert 'custom_op mutates_args: ("self",)' in lines
    assert "returns: ()" in lines
    assert max(len(line) for line in lines[1:] if not line.startswith("  info")) <= 100


def test_text_report_exit_1_on_error_diagnostics(run_opgen):
    result = run_opgen("explain", ALIASED)
    assert result.returncode == 1
    assert "  error OPG102: scale_: return 0 'Tensor(a!)' aliases an input" in result.stdout
    assert "      hint: return nothing ('-> ()')" in result.stdout
    assert result.stderr == ""


def test_warnings_alone_exit_0(run_opgen):
    result = run_opgen("explain", "prefetch(Tensor x) -> ()")
    assert result.returncode == 0
    assert "warning OPG104" in result.stdout


def test_json_has_every_documented_key(run_opgen):
    result = run_opgen("explain", "--json", INPLACE)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["canonical"] == INPLACE
    assert (info["namespace"], info["name"], info["overload"]) == ("myns", "scale_", "out")
    assert [a["name"] for a in info["arguments"]] == ["self", "bias", "stride", "dtype"]
    for arg in info["arguments"]:
        assert {"name", "type", "default", "kwarg_only", "mutated", "alias"} <= set(arg)
    self_, bias, stride, dtype = info["arguments"]
    assert (self_["type"], self_["mutated"], self_["alias"], self_["default"]) == ("Tensor(a!)", True, "(a!)", None)
    assert (bias["default"], bias["mutated"], bias["alias"]) == ("None", False, None)
    assert (stride["type"], stride["default"]) == ("SymInt[2]", "1")
    assert dtype["kwarg_only"] is True and self_["kwarg_only"] is False
    assert info["returns"] == []
    assert info["mutates_args"] == ["self"]
    for diag in info["diagnostics"]:
        assert {"code", "severity", "message"} <= set(diag)


def test_json_returns_and_diagnostics(run_opgen):
    result = run_opgen("explain", "--json", "ns::topk(Tensor x, int k) -> (Tensor(a) values, Tensor indices)")
    info = json.loads(result.stdout)
    assert result.returncode == 1
    assert info["returns"] == [{"name": "values", "type": "Tensor(a)", "alias": "(a)"},
                               {"name": "indices", "type": "Tensor", "alias": None}]
    assert [d["code"] for d in info["diagnostics"]] == ["OPG102", "OPG107"]
    assert info["diagnostics"][0]["severity"] == "error"


def test_json_stdin_one_object_per_line_in_order(run_opgen):
    lines = ["f(Tensor x) -> Tensor", "f(Tensor x, int y=1.5) -> Tensor", "", ALIASED, "my op(Tensor x) -> ()"]
    result = run_opgen("explain", "--json", "-", input="\n".join(lines) + "\n")
    assert result.returncode == 2  # the worst line decides
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 4  # the blank line is skipped
    assert objects[0]["canonical"] == "f(Tensor x) -> Tensor"
    assert objects[1] == {"input": lines[1], "error": {
        "message": "default for 'y' does not fit type 'int': 1.5 is not an integer", "column": 19,
        "hint": "write an integer such as 0 or -1"}}
    assert objects[2]["diagnostics"][0]["code"] == "OPG102"
    assert objects[3]["input"] == "my op(Tensor x) -> ()" and objects[3]["error"]["column"] == 4
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("lines", "code"), [
    (["f(Tensor x) -> Tensor", "g(Tensor(a!) x) -> ()"], 0),
    (["f(Tensor x) -> Tensor", ALIASED], 1),
    ([ALIASED, "f(Tensor x -> Tensor"], 2),
])
def test_stdin_exit_status_is_the_worst_line(run_opgen, lines, code):
    result = run_opgen("explain", "--json", "-", input="\r\n".join(lines))
    assert result.returncode == code
    assert len(result.stdout.splitlines()) == len(lines)


def test_text_stdin_sends_errors_to_stderr(run_opgen):
    result = run_opgen("explain", "-", input="f(Tensor x) -> Tensor\nf(Tensor x,) -> Tensor\n")
    assert result.returncode == 2
    assert result.stdout.startswith("f(Tensor x) -> Tensor\n")
    assert "error: column 11: trailing ','" in result.stderr
    assert "  | f(Tensor x,) -> Tensor" in result.stderr


def test_code_explains_a_rule(run_opgen):
    result = run_opgen("explain", "--code", "opg102")
    assert result.returncode == 0
    rule = RULES["OPG102"]
    assert result.stdout.startswith(f"OPG102 ({rule.name}, error): {rule.summary}")
    assert "Found a custom (non-ATen) operator whose output has alias" in result.stdout
    assert f"Bad:\n    {rule.bad}" in result.stdout and f"Good:\n    {rule.good}" in result.stdout


def test_code_as_json(run_opgen):
    result = run_opgen("explain", "--code", "OPG001", "--json")
    assert result.returncode == 0
    info = json.loads(result.stdout)
    assert info["code"] == "OPG001" and info["severity"] == "error" and info["bad"]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--code", "OPG999"], "unknown diagnostic code 'OPG999'"),
    (["f(Tensor x) -> Tensor", "--code", "OPG102"], "give either a SCHEMA or --code, not both"),
    ([], "missing SCHEMA"),
    (["--bogus-flag", "f(Tensor x) -> ()"], "No such option"),
])
def test_bad_usage_exits_2_without_traceback(run_opgen, args, fragment):
    result = run_opgen("explain", *args)
    assert result.returncode == 2
    assert fragment in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_unknown_code_lists_the_known_ones(run_opgen):
    result = run_opgen("explain", "--code", "OPG999")
    assert "= hint: known codes: " in result.stderr and "OPG102" in result.stderr


def test_tags_make_an_aliased_return_valid_as_in_a_spec(run_opgen):
    """torch_npu's `npu_sim_exponential_(...) -> Tensor(a!)` is valid with `tags: [inplace]`: so with --tag."""
    schema = "npu_sim_exponential_(Tensor(a!) self, float lambd=1, *, Generator? generator=None) -> Tensor(a!)"
    assert run_opgen("explain", schema).returncode == 1  # the look-alike without the tag: OPG102
    result = run_opgen("explain", "--tag", "inplace", "--tag", "nondeterministic_seeded", schema)
    assert result.returncode == 0, result.stdout
    assert "tags: torch.Tag.inplace, torch.Tag.nondeterministic_seeded" in result.stdout.splitlines()
    assert "OPG102" not in result.stdout
    info = json.loads(run_opgen("explain", "--json", "--tag", "out", "f.out(Tensor x, *, Tensor(a!) out) -> "
                                "Tensor(a!)").stdout)
    assert info["tags"] == ["out"] and not info["has_errors"]


def test_a_tag_whose_contract_the_schema_breaks_is_an_error(run_opgen):
    result = run_opgen("explain", "--tag", "inplace", "f_(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)")
    assert result.returncode == 1 and "error OPG112:" in result.stdout


def test_tags_apply_to_every_line_of_a_batch(run_opgen):
    lines = "scale_(Tensor(a!) x, float s) -> Tensor(a!)\nf(Tensor x) -> Tensor\n"
    result = run_opgen("explain", "--json", "--tag", "inplace", "-", input=lines)
    infos = [json.loads(line) for line in result.stdout.splitlines()]
    assert [i["tags"] for i in infos] == [["inplace"], ["inplace"]]
    assert not any(d["code"] == "OPG102" for d in infos[0]["diagnostics"])


@pytest.mark.parametrize("args, message", [
    (["--tag", "random"], "unknown --tag 'random'; did you mean 'nondeterministic_seeded'?"),
    (["--tag", "inplace", "--tag", "out"], "--tag inplace and --tag out exclude each other"),
])
def test_bad_tags_are_usage_errors(run_opgen, args, message):
    result = run_opgen("explain", *args, "f(Tensor x) -> Tensor")
    assert result.returncode == 2 and message in result.stderr
