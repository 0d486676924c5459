"""`opgen lint` through the real command (`python -m opgen lint`, forked from a warm interpreter where it can be:
tests/forked_python.py): output formats, selection, exit codes, fixes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from forked_python import run_python

FIXTURES = Path(__file__).parent / "fixtures" / "lint"
ROOT = Path(__file__).resolve().parents[1]


def run_lint(*args: str, cwd: Path | str = FIXTURES) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return run_python(["-m", "opgen", "lint", *args], cwd=cwd, env=env, timeout=300)


LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>OPG\d{3})( \[\*\])? (?P<msg>.+)$")


def findings(stdout: str) -> list[tuple[str, int, int, str]]:
    out = []
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match:
            out.append((match["path"], int(match["line"]), int(match["col"]), match["code"]))
    return out


def test_clean_file_exits_zero_and_says_so():
    result = run_lint("good.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "All checks passed!"
    assert result.stderr == ""


def test_findings_exit_one_with_ruff_style_lines():
    result = run_lint("resolve/aliases.py")
    assert result.returncode == 1
    assert findings(result.stdout) == [
        ("resolve/aliases.py", 10, 12, "OPG001"),   # implicit concatenation: reported at the literal
        ("resolve/aliases.py", 18, 36, "OPG204"),   # "cuda" in Library.impl
        ("resolve/aliases.py", 23, 12, "OPG304"),   # torch.empty without device= in the fake
    ]
    assert "[*] 1 fixable with the `--fix` option." in result.stdout


def test_schema_error_column_points_inside_the_string(tmp_path):
    source = 'from torch.library import Library\nlib = Library("c", "FRAGMENT")\nlib.define("f(Tensor x, int y=1.5) -> Tensor")\n'
    (tmp_path / "c.py").write_text(source)
    result = run_lint("c.py", cwd=tmp_path)
    [(_, line, col, code)] = findings(result.stdout)
    assert (line, code) == (3, "OPG001")
    assert source.splitlines()[2][col - 1:].startswith("1.5"), "column of the bad default inside the literal"


def test_ops_are_matched_across_files():
    both = run_lint("crossfile")
    assert findings(both.stdout) == [("crossfile/defs.py", 6, 13, "OPG208")], both.stdout  # shift has no fake
    # pre-commit passes only staged files: the rest of their package is read for registrations
    # (fakes.py here), and nothing is reported in it.
    staged = run_lint("crossfile/defs.py", "crossfile/kernels.py")
    assert findings(staged.stdout) == [("crossfile/defs.py", 6, 13, "OPG208")], staged.stdout
    only_fakes = run_lint("crossfile/fakes.py")
    assert only_fakes.returncode == 0, only_fakes.stdout


def test_syntax_error_is_one_diagnostic_not_a_traceback():
    result = run_lint("syntax_error.py")
    assert result.returncode == 1
    assert findings(result.stdout) == [("syntax_error.py", 4, 11, "OPG200")]
    assert "Traceback" not in result.stdout + result.stderr


def test_noqa_line_and_file_level():
    result = run_lint("noqa.py", "filenoqa.py")
    assert findings(result.stdout) == [("noqa.py", 5, 27, "OPG204"), ("noqa.py", 6, 27, "OPG204")]


def test_select_and_ignore_with_prefixes():
    everything = {f[3] for f in findings(run_lint("resolve", "op_plugin_functions.yaml").stdout)}
    assert {"OPG001", "OPG204", "OPG304", "OPG401", "OPG102"} <= everything
    only_3 = {f[3] for f in findings(run_lint("resolve", "op_plugin_functions.yaml", "--select", "OPG3").stdout)}
    assert only_3 == {"OPG304"}
    ignored = {f[3] for f in findings(run_lint("resolve", "op_plugin_functions.yaml",
                                               "--ignore", "OPG0,OPG30").stdout)}
    assert ignored == everything - {"OPG001", "OPG304"}


def test_unknown_selector_is_a_usage_error():
    result = run_lint("good.py", "--select", "NOPE1")
    assert result.returncode == 2
    assert "unknown rule selector 'NOPE1'" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_missing_path_is_a_usage_error():
    result = run_lint("does_not_exist.py")
    assert result.returncode == 2
    assert "no such file or directory: does_not_exist.py" in result.stderr


def test_exit_zero_and_statistics():
    result = run_lint("noqa.py", "--exit-zero")
    assert result.returncode == 0 and len(findings(result.stdout)) == 2
    stats = run_lint("noqa.py", "resolve", "--statistics")
    assert stats.returncode == 1
    rows = [line.split("\t") for line in stats.stdout.splitlines()]
    assert rows[0] == ["3", "OPG204", "[*] dispatch-key-spelling"]
    assert sorted(r[1] for r in rows) == ["OPG001", "OPG204", "OPG304"]


def test_explain_reads_the_shared_catalogue():
    result = run_lint("--explain", "OPG301")
    assert result.returncode == 0
    assert result.stdout.startswith("OPG301 (undeclared-mutation, error)")
    assert "Bad:" in result.stdout and "Good:" in result.stdout
    contract = run_lint("--explain", "opg102")
    assert contract.returncode == 0 and "aliased-return" in contract.stdout
    unknown = run_lint("--explain", "OPG999")
    assert unknown.returncode == 2 and "unknown diagnostic code" in unknown.stderr


def test_yaml_schema_errors_have_file_positions():
    result = run_lint("op_plugin_functions.yaml")
    assert findings(result.stdout) == [
        ("op_plugin_functions.yaml", 8, 39, "OPG001"),  # 1.5, inside the quoted func: value
        ("op_plugin_functions.yaml", 12, 11, "OPG401"),
        ("op_plugin_functions.yaml", 14, 11, "OPG102"),
    ]
    line = (FIXTURES / "op_plugin_functions.yaml").read_text().splitlines()[7]
    assert line[38:].startswith("1.5")


def test_fix_rewrites_keys_schema_and_reports_count(tmp_path):
    source = (
        "from torch.library import Library\n"
        'lib = Library("fx", "FRAGMENT")  # keep this comment\n'
        'lib.define("fx::fill(Tensor x, float v) -> ()")\n'
        "\n\n"
        "def fill(x, v):\n"
        "    x.fill_(v)  # in place\n"
        "\n\n"
        'lib.impl("fill", fill, "npu")\n'
        'lib.impl("fill", fill, "Privateuse1")\n'
    )
    target = tmp_path / "fx.py"
    target.write_text(source)
    result = run_lint("--fix", "fx.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == "Fixed 4 problems, 0 remaining."
    assert target.read_text() == source.replace('"fx::fill(Tensor x', '"fill(Tensor(a!) x').replace(
        '"npu"', '"PrivateUse1"').replace('"Privateuse1"', '"PrivateUse1"')
    assert run_lint("fx.py", cwd=tmp_path).returncode == 0


def test_json_output_structure():
    result = run_lint("resolve", "--output-format", "json")
    data = json.loads(result.stdout)
    schema = {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["code", "name", "message", "severity", "filename", "location", "fix", "noqa_row"],
            "properties": {
                "code": {"type": "string", "pattern": "^OPG[0-9]{3}$"},
                "name": {"type": "string"},
                "message": {"type": "string", "minLength": 1},
                "severity": {"enum": ["error", "warning", "info"]},
                "filename": {"type": "string"},
                "location": {"type": "object", "required": ["row", "column"],
                             "properties": {"row": {"type": "integer", "minimum": 1},
                                            "column": {"type": "integer", "minimum": 1}}},
                "fix": {"oneOf": [{"type": "null"}, {
                    "type": "object", "required": ["applicability", "message", "edits"],
                    "properties": {"applicability": {"const": "safe"},
                                   "edits": {"type": "array", "minItems": 1, "items": {
                                       "type": "object", "required": ["content", "location", "end_location"]}}}}]},
            },
        },
    }
    jsonschema.validate(data, schema)
    assert [(d["code"], d["location"]["row"]) for d in data] == [("OPG001", 10), ("OPG204", 18), ("OPG304", 23)]
    assert data[1]["fix"]["edits"][0]["content"] == "CUDA"


def test_sarif_output_structure():
    result = run_lint("resolve", "op_plugin_functions.yaml", "--output-format", "sarif")
    sarif = json.loads(result.stdout)
    region = {"type": "object", "required": ["startLine", "startColumn"],
              "properties": {"startLine": {"type": "integer", "minimum": 1},
                             "startColumn": {"type": "integer", "minimum": 1}}}
    schema = {
        "type": "object",
        "required": ["version", "$schema", "runs"],
        "properties": {
            "version": {"const": "2.1.0"},
            "runs": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["tool", "results"],
                "properties": {
                    "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                        "type": "object", "required": ["name", "rules"],
                        "properties": {"rules": {"type": "array", "items": {
                            "type": "object", "required": ["id", "shortDescription", "fullDescription",
                                                           "defaultConfiguration"]}}}}}},
                    "results": {"type": "array", "items": {
                        "type": "object", "required": ["ruleId", "ruleIndex", "level", "message", "locations"],
                        "properties": {
                            "level": {"enum": ["error", "warning", "note"]},
                            "message": {"type": "object", "required": ["text"]},
                            "locations": {"type": "array", "minItems": 1, "items": {
                                "type": "object", "required": ["physicalLocation"], "properties": {
                                    "physicalLocation": {"type": "object",
                                                         "required": ["artifactLocation", "region"],
                                                         "properties": {"region": region}}}}}}}}}}},
        },
    }
    jsonschema.validate(sarif, schema)
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    for result_ in run["results"]:
        assert rules[result_["ruleIndex"]]["id"] == result_["ruleId"]
    assert {r["ruleId"] for r in run["results"]} == {"OPG001", "OPG204", "OPG304", "OPG401", "OPG102"}


def test_github_output_line_by_line():
    result = run_lint("resolve", "noqa.py", "--output-format", "github")
    lines = result.stdout.splitlines()
    assert len(lines) == 5
    pattern = re.compile(r"^::(error|warning|notice) file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+),"
                         r"title=opgen \(OPG\d{3}\)::OPG\d{3} [^\n]+$")
    for line in lines:
        match = pattern.match(line)
        assert match, line
        assert "%" not in match["file"]
    assert lines[0].startswith("::error file=noqa.py,line=5,col=27,")


def test_directory_walk_skips_venvs_and_honours_config(tmp_path):
    bad = 'from torch.library import Library\nlib = Library("w", "IMPL", "npu")\n'
    for rel in ("pkg/a.py", "pkg/.venv/x.py", "pkg/build/y.py", "pkg/generated/z.py", "pkg/tests/t.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(bad)
    assert {f[0] for f in findings(run_lint(cwd=tmp_path).stdout)} == {
        "pkg/a.py", "pkg/generated/z.py", "pkg/tests/t.py"}
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.opgen.lint]\nextend-exclude = ["pkg/generated"]\n'
        'per-file-ignores = { "pkg/tests/*" = ["OPG204"] }\n')
    assert {f[0] for f in findings(run_lint(cwd=tmp_path).stdout)} == {"pkg/a.py"}
    # as in ruff, `exclude` replaces the default list (.venv, build, ...) instead of adding to it
    (tmp_path / "pyproject.toml").write_text('[tool.opgen.lint]\nexclude = ["pkg/generated"]\n')
    assert {f[0] for f in findings(run_lint(cwd=tmp_path).stdout)} == {
        "pkg/a.py", "pkg/.venv/x.py", "pkg/build/y.py", "pkg/tests/t.py"}
    (tmp_path / "pyproject.toml").write_text('[tool.opgen.lint]\nignore = ["OPG2"]\n')
    assert run_lint(cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.opgen.lint]\nselct = ["OPG2"]\n')
    broken = run_lint(cwd=tmp_path)
    assert broken.returncode == 2 and "unknown key(s) in [tool.opgen.lint]: selct" in broken.stderr


def test_exclude_and_extend_exclude_on_the_command_line(tmp_path):
    bad = 'from torch.library import Library\nlib = Library("w", "IMPL", "npu")\n'
    for rel in ("a.py", "vendor/b.py", "build/c.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(bad)
    assert {f[0] for f in findings(run_lint(cwd=tmp_path).stdout)} == {"a.py", "vendor/b.py"}
    assert {f[0] for f in findings(run_lint("--extend-exclude", "vendor", cwd=tmp_path).stdout)} == {"a.py"}
    assert {f[0] for f in findings(run_lint("--exclude", "vendor,a.py", cwd=tmp_path).stdout)} == {"build/c.py"}


def test_many_files_run_in_parallel_with_the_same_result(tmp_path):
    """Above the parallel threshold the work is spread over processes; the result must not change."""
    bad = 'from torch.library import Library\nlib = Library("p{i}", "IMPL", "npu")\n'
    for i in range(300):  # files of many sizes: the workers get them dealt by size
        (tmp_path / f"m{i:03}.py").write_text(bad.format(i=i) if i % 50 == 0 else "x = 1\n" * (i % 7 + 1))
    # op YAML is linted by the parent while the workers read the Python files
    (tmp_path / "op_plugin_functions.yaml").write_text("- func: broken(Tensor x -> Tensor\n")
    serial = run_lint(".", "-j", "1", cwd=tmp_path)
    parallel = run_lint(".", "-j", "2", cwd=tmp_path)
    assert serial.stdout == parallel.stdout
    assert len(findings(parallel.stdout)) == 7
    assert "op_plugin_functions.yaml:1:" in parallel.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_python_m_opgen_lint_entry_point():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "opgen.lint", "noqa.py"], cwd=FIXTURES, capture_output=True,
                            text=True, env=env, timeout=120, check=False)
    assert result.returncode == 1 and len(findings(result.stdout)) == 2


def test_kernels_and_fakes_imported_from_sibling_modules_are_read():
    """The layout `opgen new` generates: ops.py registers functions imported from kernels/ and fakes/."""
    result = run_lint("imported/pkg/ops.py")
    assert findings(result.stdout) == [
        ("imported/pkg/fakes/rows.py", 2, 5, "OPG306"),     # the TODO fake skeleton is still registered
        ("imported/pkg/kernels/rows_cpu.py", 2, 5, "OPG301"),  # the CPU kernel writes x
    ], result.stdout


def test_a_bug_on_one_file_still_checks_the_others_and_exits_two(monkeypatch, tmp_path):
    """An opgen bug while reading one file: the other files are checked, the run exits 2, no traceback."""
    from click.testing import CliRunner

    from opgen.lint import collect
    from opgen.lint.command import lint

    real = collect.collect_source

    def flaky(path, text):
        if path.endswith("boom.py"):
            raise KeyError("simulated bug")
        return real(path, text)

    monkeypatch.setattr(collect, "collect_source", flaky)
    (tmp_path / "boom.py").write_text("import torch\nlib = torch.library.Library('b', 'FRAGMENT')\n")
    (tmp_path / "bad.py").write_text("import torch\nlib = torch.library.Library('b', 'IMPL', 'npu')\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(lint, ["boom.py", "bad.py"])
    assert result.exit_code == 2
    assert "bad.py:2:42: OPG204" in result.output
    assert "boom.py: opgen could not check this file: KeyError: 'simulated bug'" in result.output
    assert "Traceback" not in result.output


def test_library_object_imported_from_a_sibling_module():
    result = run_lint("imported/pkg/npu_kernels.py")
    assert findings(result.stdout) == [("imported/pkg/npu_kernels.py", 8, 28, "OPG204")], result.stdout
    assert "'npu' does not exist; write 'PrivateUse1'" in result.stdout


def test_empty_directory_and_non_python_files_are_clean(tmp_path):
    (tmp_path / "empty").mkdir()
    assert run_lint("empty", cwd=tmp_path).returncode == 0
    (tmp_path / "README.md").write_text("# lib = Library('x', 'IMPL', 'npu') (\n")
    (tmp_path / "tool").write_text("#!/usr/bin/env python\nfrom torch.library import Library\n"
                                   "lib = Library('t', 'IMPL', 'npu')\n")
    result = run_lint("README.md", "tool", cwd=tmp_path)
    assert findings(result.stdout) == [("tool", 3, 28, "OPG204")], result.stdout


def test_tag_contract_is_checked_with_the_rule_opgen_new_uses(tmp_path):
    """OPG112 (contract.tag_contract_problems) in hand-written code: only where the tags are read and broken."""
    (tmp_path / "tagged.py").write_text(
        "import torch\n\n"
        "lib = torch.library.Library(\"lt\", \"FRAGMENT\")\n"
        "lib.define(\"scale_(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)\", tags=(torch.Tag.inplace,))\n"
        "lib.define(\"good_(Tensor(a!) x, float s) -> Tensor(a!)\", tags=torch.Tag.inplace)\n"
        "lib.define(\"sin.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)\", tags=[torch.Tag.out])\n"
        "lib.define(\"cos.out(Tensor x, Tensor(a!) out) -> Tensor(a!)\", tags=(torch.Tag.out,))\n"
        "TAGS = some_tags()\n"
        "lib.define(\"tan_(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)\", tags=TAGS)\n", encoding="utf-8")
    result = run_lint("tagged.py", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    found = [(line, code) for _, line, _, code in findings(result.stdout) if code == "OPG112"]
    assert found == [(4, "OPG112"), (7, "OPG112")], result.stdout
    assert "not also 'y'" in result.stdout and "keyword-only (after the *), not 'out'" in result.stdout


def test_schemas_torch_accepts_pass_and_a_mutated_non_tensor_is_caught(tmp_path):
    """A shared alias set (OPG101, torch accepts it at every stage) is not reported in either style; `int(b!)`
    (OPG109, torch.compile fails) is, in the same file next to its correct look-alike."""
    (tmp_path / "lib_style.py").write_text(
        "import torch\n\n"
        "lib = torch.library.Library(\"lc\", \"FRAGMENT\")\n"
        "lib.define(\"shared(Tensor(a!) x, Tensor(a!) y) -> ()\")\n"
        "lib.define(\"count(Tensor(a!) x, int(b!) n) -> ()\")\n"
        "lib.define(\"count_ok(Tensor(a!) x, int n) -> ()\")\n"
        "for name in (\"shared\", \"count\", \"count_ok\"):\n"
        "    lib.impl(name, lambda *args: None, \"CompositeExplicitAutograd\")\n"
        "    torch.library.register_fake(f\"lc::{name}\", lambda *args: None, lib=lib)\n", encoding="utf-8")
    (tmp_path / "co_style.py").write_text(
        "import torch\n\n\n"
        "@torch.library.custom_op(\"lc::co_shared\", mutates_args=(\"x\", \"y\"),\n"
        "                         schema=\"(Tensor(a!) x, Tensor(a!) y) -> ()\")\n"
        "def co_shared(x: torch.Tensor, y: torch.Tensor) -> None:\n"
        "    x.add_(1)\n"
        "    y.mul_(2)\n\n\n"
        "@co_shared.register_fake\n"
        "def _(x, y):\n"
        "    return None\n", encoding="utf-8")
    result = run_lint("lib_style.py", "co_style.py", cwd=tmp_path)
    assert findings(result.stdout) == [("lib_style.py", 5, 33, "OPG109")], result.stdout
    assert "only tensors can be (torch.compile of a caller fails)" in result.stdout
