"""`opgen new` through the real command line: ownership, --force, --dry-run, --schema, and clear
errors (file:line:col, hint, exit code 2, no traceback, nothing written) for bad specs."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forked_python import run_python
from new_helpers import NOT_FEATURES, REPO, opgen, opgen_in_one_process, project_outcomes, snapshot

from opgen.npugraph_ex import loader

RMS_NORM = REPO / "examples" / "rms_norm.yaml"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def assert_refused(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr


# --- writing ----------------------------------------------------------------------------------------


def test_new_creates_a_project_and_reports_each_file(tmp_path):
    done = opgen("new", str(RMS_NORM), "-o", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert "create     myops/ops.py" in done.stdout
    files = snapshot(tmp_path / "p")
    assert {"myops/ops.py", "myops/kernels/rms_norm_cpu.py", "myops/kernels/rms_norm_npu.py", "opgen.yaml",
            "tests/test_myops.py", "pyproject.toml", ".opgen/manifest.json"} <= set(files)


def test_dry_run_writes_nothing(tmp_path):
    target = tmp_path / "p"
    done = opgen("new", str(RMS_NORM), "-o", str(target), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "create     myops/ops.py" in done.stdout and "nothing was written" in done.stdout
    assert not target.exists()
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    (target / "myops" / "kernels" / "rms_norm_cpu.py").write_text("# mine\n")
    before = snapshot(target)
    edited = write(tmp_path / "spec.yaml", RMS_NORM.read_text().replace("RMS normalisation over", "RMS norm over"))
    done = opgen("new", str(edited), "-o", str(target), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "update     myops/ops.py" in done.stdout
    assert snapshot(target) == before


def test_refuses_a_directory_it_did_not_create_unless_forced(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me\n")
    assert_refused(opgen("new", str(RMS_NORM), "-o", str(target)), "opgen did not create", "--force")
    assert snapshot(target) == {"notes.txt": b"keep me\n"}
    done = opgen("new", str(RMS_NORM), "-o", str(target), "--force")
    assert done.returncode == 0, done.stderr
    assert (target / "notes.txt").read_text() == "keep me\n"
    assert (target / "myops" / "ops.py").is_file()


def test_user_kernels_survive_regeneration_and_new_ops_get_new_files(tmp_path):
    target = tmp_path / "p"
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    kernel = target / "myops" / "kernels" / "rms_norm_npu.py"
    kernel.write_text(kernel.read_text().replace("raise NotImplementedError(", "return my_kernel(  # mine\n"))
    mine = kernel.read_bytes()
    spec = RMS_NORM.read_text().replace("RMS normalisation over", "RMS norm over") + textwrap.indent(textwrap.dedent("""
        - schema: "scale(Tensor x, float s) -> Tensor"
          outputs:
            out0: {shape: "x.shape", dtype: "x.dtype"}
          reference: |
            return x * s
        """), "  ")
    done = opgen("new", str(write(tmp_path / "two.yaml", spec)), "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert kernel.read_bytes() == mine
    assert "update     myops/ops.py" in done.stdout
    assert "create     myops/kernels/scale_cpu.py" in done.stdout
    assert "RMS norm over" in (target / "myops" / "ops.py").read_text()
    assert "keep" in done.stdout or "myops/kernels/rms_norm_npu.py" not in done.stdout


def test_a_changed_reference_is_said_once_and_the_kernel_kept(tmp_path):
    """`reference:` seeds the CPU kernel once; changed later, the kernel stays the user's and the run that
    sees the change says so (the look-alike: the next run, and a change elsewhere, say nothing of it)."""
    target = tmp_path / "p"
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    kernel = target / "myops" / "kernels" / "rms_norm_cpu.py"
    before = kernel.read_bytes()
    spec = write(tmp_path / "changed.yaml", RMS_NORM.read_text().replace("return y, rstd.float()",
                                                                         "return y.clone(), rstd.float()"))
    done = opgen("new", str(spec), "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert kernel.read_bytes() == before
    assert ("keep       myops/kernels/rms_norm_cpu.py  (yours, kept; the spec now gives this file other code "
            "(a changed reference or schema): move it away and re-run to get that)") in done.stdout
    again = opgen("new", str(write(tmp_path / "doc.yaml", spec.read_text().replace("RMS normalisation over",
                                                                                   "RMS norm over"))),
                  "-o", str(target))
    assert again.returncode == 0 and "rms_norm_cpu.py" not in again.stdout, again.stdout
    assert "update     myops/ops.py" in again.stdout


def test_an_edited_generated_file_is_not_overwritten_without_force(tmp_path):
    target = tmp_path / "p"
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    ops = target / "myops" / "ops.py"
    ops.write_text(ops.read_text() + "# hand edit\n")
    spec = write(tmp_path / "spec.yaml", RMS_NORM.read_text().replace("RMS normalisation over", "RMS norm over"))
    before = snapshot(target)
    assert_refused(opgen("new", str(spec), "-o", str(target)), "myops/ops.py", "edited by hand")
    assert snapshot(target) == before
    done = opgen("new", str(spec), "-o", str(target), "--force")
    assert done.returncode == 0, done.stderr
    assert "# hand edit" not in ops.read_text() and "RMS norm over" in ops.read_text()
    backups = list((target / ".opgen" / "backup").rglob("ops.py"))
    assert backups and "# hand edit" in backups[0].read_text()


def test_plain_new_inside_a_project_regenerates_from_its_opgen_yaml(tmp_path):
    target = tmp_path / "p"
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    spec = target / "opgen.yaml"
    spec.write_text(spec.read_text().replace("RMS normalisation over", "RMS norm over"))
    # opgen.yaml is the one generated file meant to be edited: it is the input, so it is never "overwritten"
    done = opgen("new", cwd=target)
    assert done.returncode == 0, done.stderr
    assert "update     myops/ops.py" in done.stdout
    assert "RMS norm over" in (target / "myops" / "ops.py").read_text()
    assert "RMS norm over" in spec.read_text()
    before = snapshot(target)
    done = opgen("new", "opgen.yaml", "-o", ".", cwd=target)
    assert done.returncode == 0 and "nothing to write" in done.stdout, done.stdout + done.stderr
    assert snapshot(target) == before


def test_no_spec_outside_a_project_is_a_usage_error(tmp_path):
    assert_refused(opgen("new", cwd=tmp_path), "no SPEC given and no opgen.yaml", "hint:")


def test_a_return_the_semantics_cannot_describe_gets_a_by_hand_todo(tmp_path):
    """`-> SymInt` has no `outputs:` entry to fill (the spec refuses one): the TODO fake says to write it by
    hand, not to fill a field (the look-alike, `-> Tensor[]` without semantics, names the fields)."""
    target = tmp_path / "q"
    done = opgen("new", "--schema", "quick::count(Tensor x) -> SymInt", "-o", str(target))
    assert done.returncode == 0, done.stderr
    todo = (target / "quick" / "fakes" / "count.py").read_text()
    message = next(ast.literal_eval(n.exc.args[0]) for n in ast.walk(ast.parse(todo)) if isinstance(n, ast.Raise))
    assert message == ("quick::count has no fake function: the spec's semantics cannot describe its returns "
                       "('SymInt'), so write the fake function by hand in quick/fakes/count.py")
    assert "cannot describe the op's returns (int), so this\nfunction is written by hand" in todo
    assert "fill them in opgen.yaml" not in todo
    done = opgen("new", "--schema", "quick::chunks(Tensor x, int n) -> Tensor[]", "-o", str(tmp_path / "l"))
    assert done.returncode == 0, done.stderr
    todo = (tmp_path / "l" / "quick" / "fakes" / "chunks.py").read_text()
    assert "    ops[0].outputs.out0.length\n    ops[0].outputs.out0.shape\n    ops[0].outputs.out0.dtype\n" in todo


def test_missing_out_dir_is_a_usage_error(tmp_path):
    done = opgen("new", str(RMS_NORM), cwd=tmp_path)
    assert done.returncode == 2 and "-o/--out" in done.stderr


def test_schema_quick_start_writes_a_todo_fake(tmp_path):
    target = tmp_path / "q"
    done = opgen("new", "--schema", "quick::scale(Tensor x, float s) -> Tensor", "-o", str(target), "--device", "cpu")
    assert done.returncode == 0, done.stderr
    todo = ast.parse((target / "quick" / "fakes" / "scale.py").read_text())
    message = next(ast.literal_eval(n.exc.args[0]) for n in ast.walk(todo) if isinstance(n, ast.Raise))
    assert message.startswith("quick::scale has no fake function: fill ops[0].outputs.out0.shape, "
                              "ops[0].outputs.out0.dtype in opgen.yaml")
    assert not (target / "quick" / "kernels" / "scale_npu.py").exists()  # device cpu: the CPU kernel is the kernel
    assert "device: cpu" in (target / "opgen.yaml").read_text()
    assert_refused(opgen("new", "--schema", "scale(Tensor x) -> Tensor", "-o", str(tmp_path / "r")),
                   "--schema needs a namespace")
    assert_refused(opgen("new", "--schema", "q::scale(Tensor x, int y=1.5) -> Tensor", "-o", str(tmp_path / "r")),
                   "1.5 is not an integer", "^")
    assert not (tmp_path / "r").exists()


def test_hostile_docs_cannot_escape_strings(tmp_path):
    doc = 'He said "hi" \'\'\' """ \\n \\\\ {{ cookiecutter.project_slug }} {% raw %} {%- if 1 %}\nline two\t# not code'
    spec = write(tmp_path / "hostile.yaml", f"""
        namespace: hostile
        ops:
          - schema: "f(Tensor x) -> Tensor"
            doc: {_yaml_string(doc)}
            outputs:
              out0: {{shape: "x.shape", dtype: "x.dtype"}}
            reference: |
              return x.clone()
        """)
    for style in ("library", "custom_op"):
        target = tmp_path / style
        done = opgen("new", str(spec), "-o", str(target), "--style", style)
        assert done.returncode == 0, done.stderr
        ops = (target / "hostile" / "ops.py").read_text()
        tree = ast.parse(ops)
        function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "f")
        assert ast.get_docstring(function, clean=False) == doc
        ruff = shutil.which("ruff")
        checked = subprocess.run([ruff, "check", "--no-cache", str(target)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout


def _yaml_string(text: str) -> str:
    import json

    return json.dumps(text)


# --- bad specs ----------------------------------------------------------------------------------------

BAD_SPECS = {
    "wrong key": ("""
        namespace: a
        ops:
          - shema: "f(Tensor x) -> Tensor"
        """, "bad.yaml:3:5: unknown key 'shema' in ops[0]", "did you mean 'schema'?"),
    "wrong top-level key": ("""
        namespaec: a
        ops: []
        """, "bad.yaml:1:1: unknown key 'namespaec' in the spec", "did you mean 'namespace'?"),
    "bad expression": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            outputs:
              out0: {shape: "x.shap", dtype: "x.dtype"}
        """, "bad.yaml:5:24: ops[0].outputs.out0.shape: unsupported attribute `.shap`", "did you mean `.shape`?"),
    "unknown name in expression": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            outputs:
              out0:
                shape: "[y.shape[0]]"
                dtype: x.dtype
        """, "bad.yaml:6:18: ops[0].outputs.out0.shape: unknown name `y`", "the op's arguments are: x"),
    "misused reduce": ("""
        namespace: a
        ops:
          - schema: "sum_dims(Tensor x, int[] dims, bool keepdim=False) -> Tensor"
            outputs:
              out0: {shape: "reduce(x.shape, dims, keep=keepdim)", dtype: x}
        """, "bad.yaml:5:44: ops[0].outputs.out0.shape: `reduce` has no argument `keep`", "did you mean `keepdim=`?"),
    "unknown output": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor y"
            outputs:
              out0: {shape: "x.shape", dtype: "x.dtype"}
        """, "bad.yaml:5:7: ops[0].outputs: 'out0' is not a return of a::f", "the op returns: y"),
    "unknown argument in examples": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            examples:
              - {x: {shape: [2]}, z: 1}
        """, "bad.yaml:5:27: unknown key 'z' in ops[0].examples[0]", "allowed keys: x"),
    "missing argument in examples": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, int k) -> Tensor"
            examples:
              - {x: {shape: [2]}}
        """, "bad.yaml:5:9: ops[0].examples[0] gives no value for 'k'", "add `k: ...`"),
    "malformed schema": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, int y=1.5) -> Tensor"
        """, "bad.yaml:3:32: ops[0].schema: default for 'y' does not fit type 'int'", "write an integer"),
    "aliased view return": ("""
        namespace: a
        ops:
          - schema: "f(Tensor(a) x) -> Tensor(a)"
        """, "bad.yaml:3:32: ops[0].schema [OPG102]", "return nothing"),
    "keyword-only tensor with custom_op": ("""
        namespace: a
        style: custom_op
        ops:
          - schema: "f(Tensor x, *, Tensor bias) -> Tensor"
        """, "bad.yaml:4:29: ops[0].schema [OPG106]", ("the Library style registers them: set `style: library` in the "
            "spec (or pass `--style library` to `opgen new`)")),
    "bad style": ("""
        namespace: a
        style: libary
        ops:
          - schema: "f(Tensor x) -> Tensor"
        """, "bad.yaml:2:8: unknown style 'libary'", "did you mean 'library'?"),
    "reserved namespace": ("""
        namespace: aten
        ops:
          - schema: "f(Tensor x) -> Tensor"
        """, "bad.yaml:1:12: namespace 'aten' is reserved by PyTorch", "project's name"),
    "argument named like a Python keyword": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x, int lambda) -> Tensor"
        """, "bad.yaml:3:26: ops[0].schema: argument name 'lambda' cannot be used", "rename it"),
    "bad example dtype": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor"
            examples:
              - {x: {shape: [2], dtype: float23}}
        """, "bad.yaml:5:33: ops[0].examples[0].x.dtype: unknown dtype 'float23'", "did you mean 'float32'?"),
    "unknown tag": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x) -> Tensor(a!)"
            tags: [inplcae]
        """, "bad.yaml:4:12: ops[0].tags: unknown tag 'inplcae'", "did you mean 'inplace'?"),
    "tags not a list": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x) -> Tensor(a!)"
            tags: inplace
        """, "bad.yaml:4:11: ops[0].tags must be a list of torch.Tag names", "`tags: [inplace]`"),
    "both tags": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x) -> Tensor(a!)"
            tags: [inplace, out]
        """, "bad.yaml:4:11: ops[0].tags: an op is either in-place (Tag.inplace) or an out= variant", "keep one"),
    "inplace tag on a second mutated argument": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)"
            tags: [inplace]
        """, ("bad.yaml:3:31: ops[0].schema [OPG112]: Tag.inplace allows only the first positional argument to be "
        "mutated, not also 'y'"), "remove `inplace` from `ops[0].tags`"),
    "out tag on a positional out": ("""
        namespace: a
        ops:
          - schema: "f.out(Tensor x, Tensor(a!) out) -> Tensor(a!)"
            tags: [out]
        """, "bad.yaml:3:30: ops[0].schema [OPG112]: Tag.out requires every mutated argument to be keyword-only",
        "every mutated argument keyword-only"),
    "outputs of a tagged op": ("""
        namespace: a
        ops:
          - schema: "f_(Tensor(a!) x) -> Tensor(a!)"
            tags: [inplace]
            outputs:
              out0: {shape: "x.shape", dtype: "x.dtype"}
        """, "bad.yaml:5:5: ops[0].outputs: the op is tagged torch.Tag.inplace", "remove `outputs:`"),
    "invalid yaml": ("""
        namespace: a
        ops:
          - schema: "f(Tensor x) -> Tensor
        """, "bad.yaml:", "invalid YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_is_refused_with_location_and_hint(tmp_path, case):
    text, location, hint = BAD_SPECS[case]
    spec = write(tmp_path / "bad.yaml", text)
    target = tmp_path / "out"
    done = opgen("new", str(spec), "-o", str(target))
    assert_refused(done, location, hint)
    assert not target.exists()


def test_aliased_return_is_rewritten_with_a_warning(tmp_path):
    spec = write(tmp_path / "inplace.yaml", """
        namespace: inpl
        device: cpu
        ops:
          - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"
            reference: |
              x.mul_(s)
            examples:
              - {x: {shape: [4]}, s: 3.0}
        """)
    done = opgen("new", str(spec), "-o", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert "warning:" in done.stderr and "OPG102: rewrote inpl::scale_" in done.stderr
    assert "scale_(Tensor(a!) x, float s) -> ()" in (tmp_path / "p" / "inpl" / "ops.py").read_text()


@pytest.mark.slow
def test_tagged_op_refuses_to_import_on_a_torch_without_the_tag(tmp_path):
    """torch_npu pins torches without torch.Tag.inplace: the generated package says so at import, naming the
    op and the spec key, before registering anything."""
    spec = write(tmp_path / "tagged.yaml", """
        namespace: tagged
        device: cpu
        ops:
          - schema: "scale_(Tensor(a!) x, float s) -> Tensor(a!)"
            tags: [inplace]
            reference: |
              x.mul_(s)
              return x
        """)
    without_tag = ("import types, torch\n"
                   "torch.Tag = types.SimpleNamespace(pt2_compliant_tag=torch.Tag.pt2_compliant_tag)\n"
                   "import tagged\n")
    with_tag = "import torch, tagged\nx = torch.ones(3)\nassert tagged.scale_(x, 2.0) is x and x.tolist() == [2.0] * 3\n"
    for style in ("library", "custom_op"):
        target = tmp_path / style
        done = opgen("new", str(spec), "-o", str(target), "--style", style)
        assert done.returncode == 0, done.stderr
        assert "OPG102" not in done.stderr  # nothing rewritten: the tag keeps the return
        refused = run_python(["-c", without_tag], cwd=target)
        assert refused.returncode == 1
        assert ("RuntimeError: tagged::scale_ is tagged torch.Tag.inplace (ops[0].tags in opgen.yaml), but this "
                "torch has no torch.Tag.inplace") in refused.stderr, refused.stderr
        works = run_python(["-c", with_tag], cwd=target)
        assert works.returncode == 0, works.stderr


def test_the_package_never_makes_pip_replace_torch_and_refuses_a_torch_older_than_proven(tmp_path):
    """torch_npu pins one exact torch: a torch requirement pip could meet by upgrading would replace it, so torch is
    only in the `torch` extra; on a torch older than the lines opgen proves (torch_npu's 2.1) the package says so at
    import, naming the line, before registering anything. A list argument gets custom_op's schema spelled out
    (torch 2.6 infers none from `list[...]`)."""
    import tomllib

    old_torch = "import torch\ntorch.__version__ = torch.torch_version.TorchVersion('2.1.2')\nimport list_ops\n"
    for style in ("library", "custom_op"):
        target = tmp_path / style
        done = opgen("new", str(REPO / "examples" / "stack_scaled.yaml"), "-o", str(target), "--style", style)
        assert done.returncode == 0, done.stderr
        project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
        assert project["dependencies"] == [] and project["optional-dependencies"]["torch"] == ["torch>=2.6"]
        refused = run_python(["-c", old_torch], cwd=target)
        assert ("ImportError: list_ops is generated for torch 2.6 or later (the lines opgen proves), but this is "
                "torch 2.1.2") in refused.stderr, refused.stderr
        works = run_python(["-c", "import torch, list_ops"], cwd=target)
        assert works.returncode == 0, works.stderr
    assert 'schema="(Tensor[] xs, float scale=1.0) -> Tensor",' in (tmp_path / "custom_op/list_ops/ops.py").read_text()


# 3 ops x 12 runnable tiers: the reference tier, the backward refused without a formula and both npugraph_ex-on-CPU
# tiers included; 10 without the fetch (those two skip, naming the fetch command)
PASSED_PER_STYLE = 36 if loader().unavailable() is None else 30

SCALAR_ARGS = """
    namespace: args_{style}
    device: cuda
    ops:
      - schema: "opt_bias(Tensor x, Tensor? bias=None, *, Scalar alpha=1) -> Tensor"
        outputs: {{out0: {{like: x}}}}
        reference: |
          y = x * alpha
          return y if bias is None else y + bias
        examples:
          - {{x: {{shape: [2, 3], dtype: float32}}, bias: {{shape: [3], dtype: float32}}, alpha: 2}}
          - {{x: {{shape: [2, 3], dtype: float32}}}}
      - schema: "cast_to(Tensor x, ScalarType dtype) -> Tensor"
        outputs: {{out0: {{shape: "x.shape", dtype: "dtype"}}}}
        reference: "return x.to(dtype, copy=True)"  # x.to(x.dtype) is x: an aliased return
        examples: [{{x: {{shape: [4], dtype: float32}}, dtype: float16}}]
      - schema: "maybe_list(Tensor x, Tensor?[] extras) -> Tensor"
        outputs: {{out0: {{like: x}}}}
        reference: |
          return x + sum(e for e in extras if e is not None)
        examples: [{{x: {{shape: [3], dtype: float32}}, extras: [{{shape: [3], dtype: float32}}, null]}}]
    """

SUM_DIMS = """
    namespace: {namespace}
    device: cuda
    ops:
      - schema: "sum_dims(Tensor x, int[] dims, bool keepdim=False) -> Tensor"
        outputs: {{out0: {{shape: "{shape}", dtype: x}}}}
        reference: "return x.sum(dims, keepdim)"
        examples:
          - {{x: {{shape: [2, 3, 4]}}, dims: [0, -1], keepdim: true}}
          - {{x: {{shape: [2, 3, 4]}}, dims: [1]}}
          - {{x: {{shape: [5, 3]}}, dims: [], keepdim: true}}
          - x: {{values: [[1.0, 2.0], [3.0, 4.0]]}}
            dims: [-1]
            expect: {{out0: [3.0, 7.0]}}
    """

SHARED_ALIAS_SET = """
    namespace: shared_{style}
    ops:
      - schema: "bump_both(Tensor(a!) x, Tensor(a!) y, float s) -> ()"
        reference: |
          x.add_(s)
          y.mul_(s)
        examples:
          - {{x: {{shape: [4, 8]}}, y: {{shape: [4, 8]}}, s: 2.0}}
          - x: {{values: [[1.0, 2.0], [0.0, -1.0]]}}
            y: {{values: [[3.0, 4.0], [0.5, 1.0]]}}
            s: 2.0
            expect: {{x: [[3.0, 4.0], [2.0, 1.0]], y: [[6.0, 8.0], [1.0, 2.0]]}}
    """


@pytest.fixture(scope="module")
def working(tmp_path_factory) -> tuple[Path, dict[str, dict[str, dict]], dict[str, str]]:
    """The projects of the three tests below (three specs in both styles, and the reduction whose rule ignores keepdim),
    each in the folder named as its namespace, and their tests' outcomes from ONE pytest process (its start, torch's
    import, is most of a small project's run): (their folder, {project: {test: outcome}}, {shared alias set's
    project: what `opgen new` printed on stderr}). The wrong rule's project runs only the test that must catch it
    (every test passed on the right rule)."""
    root = tmp_path_factory.mktemp("working")
    specs = {}
    for style in ("library", "custom_op"):
        specs[f"args_{style}"] = (SCALAR_ARGS.format(style=style), style)
        specs[f"red_{style}"] = (SUM_DIMS.format(namespace=f"red_{style}", shape="reduce(x.shape, dims, keepdim)"),
                                 style)
    specs["red_wrong"] = (SUM_DIMS.format(namespace="red_wrong", shape="reduce(x.shape, dims)"), "library")
    generations = [["new", str(write(root / f"{name}.yaml", text)), "-o", str(root / name), "--style", style]
                   for name, (text, style) in specs.items()]
    assert opgen_in_one_process(*generations) == [0] * len(generations)
    said = {}
    for style in ("library", "custom_op"):  # what `opgen new` says is part of this one's test: a process each
        name = f"shared_{style}"
        done = opgen("new", str(write(root / f"{name}.yaml", SHARED_ALIAS_SET.format(style=style))), "-o",
                     str(root / name), "--style", style)
        assert done.returncode == 0, done.stderr
        said[name] = done.stderr
    projects = [root / name for name in [*specs, *said]]
    select = f"({NOT_FEATURES}) and not (red_wrong and not kernel_follows_the_semantics)"
    return root, project_outcomes(projects, root / "junit.xml", select), said


@pytest.mark.slow  # runs the generated tests
@pytest.mark.npugraph_ex  # both states
@pytest.mark.xdist_group("new_cli_working")  # the projects of `working`, built on one worker
def test_scalar_optional_and_scalar_type_arguments_generate_working_tests(working):
    """`Scalar` (annotated `Number`, which the test module must import too), `Tensor?`, `Tensor?[]` and
    `ScalarType` arguments: every runnable tier of both styles passes."""
    _, outcomes, _ = working
    for style in ("library", "custom_op"):
        results = outcomes[f"args_{style}"]
        failed = {name: r["message"][-1500:] for name, r in results.items() if r["outcome"] not in ("passed", "skipped")}
        assert not failed, (style, failed)
        skipped = {r["message"].strip().splitlines()[0] for r in results.values() if r["outcome"] == "skipped"}
        allowed = ("no CUDA", "the ops are generated for device 'cuda'", "no expected values", "npugraph_ex")
        assert all(reason.startswith(allowed) for reason in skipped), (style, skipped)
        assert sum(r["outcome"] == "passed" for r in results.values()) == PASSED_PER_STYLE, style


@pytest.mark.slow  # runs the generated tests
@pytest.mark.xdist_group("new_cli_working")
def test_a_reduction_rule_generates_working_tests_and_a_wrong_one_is_named(working):
    """`reduce(x.shape, dims, keepdim)`, the sizes of torch's sum over an int[] argument: every runnable tier of
    both styles passes; the same op whose rule ignores keepdim fails a generated test naming the rule's field."""
    _, outcomes, _ = working
    for name in ("red_library", "red_custom_op"):
        failed = {test: r["message"][-1500:] for test, r in outcomes[name].items()
                  if r["outcome"] not in ("passed", "skipped")}
        assert not failed, (name, failed)
        passed = {test for test, r in outcomes[name].items() if r["outcome"] == "passed"}
        assert {"test_sum_dims_kernel_follows_the_semantics", "test_sum_dims_opcheck",
                "test_sum_dims_compiles_once_for_two_sizes"} <= passed, (name, sorted(outcomes[name]))
    # the wrong rule ran only the test that must catch it (every test passed on the right rule above)
    assert sorted(outcomes["red_wrong"]) == ["test_sum_dims_kernel_follows_the_semantics"], sorted(outcomes["red_wrong"])
    failed = {name: r["message"] for name, r in outcomes["red_wrong"].items() if r["outcome"] == "failed"}
    assert "ops[0].outputs.out0.shape" in failed.get("test_sum_dims_kernel_follows_the_semantics", ""), failed


def test_long_names_stay_within_the_line_length(tmp_path):
    tensor, other = "first_input_tensor_with_a_long_name", "second_input_tensor_with_a_long_name"
    spec = write(tmp_path / "long.yaml", f"""
        namespace: npu_fused_kernels
        ops:
          - schema: "paged_attention_kv_cache_update_(Tensor(a!) {tensor}, Tensor {other}) -> ()"
            reference: "{tensor}.add_({other})"
          - schema: "prefetch_weights_into_l2_cache(Tensor x) -> ()"
          - schema: "fused_rotary_embedding_with_cache(Tensor {tensor}) -> Tensor"
            outputs: {{out0: {{shape: {tensor}.shape, dtype: {tensor}.dtype}}}}
          - schema: "grouped_topk_router_selection(Tensor {tensor}, int k) -> Tensor"
        """)
    for style in ("library", "custom_op"):
        target = tmp_path / style
        done = opgen("new", str(spec), "-o", str(target), "--style", style)
        assert done.returncode == 0, done.stderr
        checked = subprocess.run([shutil.which("ruff"), "check", "--no-cache", "--extend-select", "E,F", str(target)],
                                 capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout


# --- what a newcomer meets first ------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "fragments"), [
    ("aten::foo(Tensor x) -> Tensor", ["error: column 1: --schema: namespace 'aten' is reserved by PyTorch",
                                       "  | aten::foo(Tensor x) -> Tensor\n  | ^\n"]),
    ("myops::foo(Tensor(a!) x, int(b!) n) -> ()", ["error: column 26: --schema [OPG109]: myops::foo: argument 'n'",
                                                   "  | myops::foo(Tensor(a!) x, int(b!) n) -> ()\n  |                          ^\n"]),
    ("  myops::foo(Tensor lib) -> Tensor", ["error: column 14: --schema: argument name 'lib' cannot be used",
                                            "  |   myops::foo(Tensor lib) -> Tensor\n  |              ^\n"]),
])
def test_schema_errors_point_into_the_schema_typed(tmp_path, schema, fragments):
    done = opgen("new", "--schema", schema, "-o", str(tmp_path / "p"))
    assert_refused(done, *fragments)
    assert "<--schema>" not in done.stderr and "opgen.yaml" not in done.stderr
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("new_cli_working")
def test_a_shared_alias_set_is_generated_as_written_and_its_tests_pass(working):
    """torch accepts `Tensor(a!) x, Tensor(a!) y` at every stage (OPG101, tests/test_contract.py), so opgen generates
    it in both styles, keeping the schema (custom_op gets it as schema=: its inference gives each tensor a letter)."""
    root, by_project, said = working
    for style in ("library", "custom_op"):
        name = f"shared_{style}"
        assert "OPG101" not in said[name]  # a note (info), not a warning
        ops = (root / name / name / "ops.py").read_text(encoding="utf-8")
        assert "(Tensor(a!) x, Tensor(a!) y, float s) -> ()" in ops
        results = by_project[name]
        outcomes = {test: r["outcome"] for test, r in results.items() if "capture_replay" not in test}
        assert {"test_bump_both_opcheck", "test_bump_both_compiles_once_for_two_sizes",
                "test_bump_both_matches_expected_values"} <= set(outcomes), sorted(outcomes)
        assert set(outcomes.values()) <= {"passed", "skipped"} and "passed" in outcomes.values(), results
        # (custom_op attaches no autograd to what an op writes: returning nothing else, it has no backward to refuse)
        assert all(outcomes[test] == "passed" for test in outcomes if "npugraph_ex" not in test
                   and not test.endswith("backward_raises_without_formula")), (style, outcomes)


def test_schema_warnings_name_the_option_and_a_made_up_example_points_at_examples(tmp_path):
    done = opgen("new", "--schema", "myops::gather(Tensor x, Tensor(a!) index) -> Tensor(a!)", "-o",
                 str(tmp_path / "p"), "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "warning: --schema: OPG102: rewrote myops::gather" in done.stderr
    assert ("warning: --schema: no `ops[0].examples`: the generated tests call the op with one opgen made up "
            "(x: float32[4, 8], index: int64 [0, 1, 2, 3])") in done.stderr
    tests = (tmp_path / "p" / "tests" / "test_myops.py").read_text()
    assert "torch.tensor([0, 1, 2, 3], dtype=torch.int64)" in tests


def test_dry_run_in_a_refused_directory_shows_the_plan_and_the_refusal(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me\n")
    done = opgen("new", str(RMS_NORM), "-o", str(target), "--dry-run")
    assert_refused(done, "opgen did not create", "--force")
    assert "create     myops/ops.py" in done.stdout and "this plan needs --force" in done.stdout
    assert snapshot(target) == {"notes.txt": b"keep me\n"}


def test_help_shows_spec_as_optional():
    done = opgen("new", "--help")
    assert done.returncode == 0 and "Usage: python -m opgen new [OPTIONS] [SPEC]" in done.stdout


def _on_a_terminal(*args: str, cwd: Path) -> str:
    """Run `python -m opgen ARGS` with stdout and stderr on a pseudo-terminal; what it printed."""
    import os
    import pty

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec the command on the terminal
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "opgen", *args], env)
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.waitpid(pid, 0)
    return output.decode()


def test_new_and_lint_colour_a_terminal_and_nothing_else(tmp_path):
    coloured = _on_a_terminal("new", str(RMS_NORM), "-o", "p", cwd=tmp_path)
    assert "\x1b[32mcreate\x1b[0m     myops/ops.py" in coloured
    bad = tmp_path / "bad.py"
    bad.write_text('from torch.library import Library\nlib = Library("w", "IMPL", "npu")\n')
    coloured = _on_a_terminal("lint", "bad.py", cwd=tmp_path)
    assert "\x1b[1mbad.py\x1b[0m" in coloured and "\x1b[31m\x1b[1mOPG204\x1b[0m" in coloured
    coloured = _on_a_terminal("new", "missing.yaml", "-o", "q", cwd=tmp_path)
    assert "\x1b[31m\x1b[1merror\x1b[0m: spec file missing.yaml does not exist" in coloured
    # piped (as every other test runs them): plain text
    piped = opgen("lint", "bad.py", cwd=tmp_path)
    assert "\x1b[" not in piped.stdout + piped.stderr and "bad.py:2:" in piped.stdout
