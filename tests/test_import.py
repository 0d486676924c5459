"""`opgen import`, run as a user runs it: a package's registrations in, one spec per namespace out.

A toy package registers correct ops (its fakes agree with its kernels) beside planted fake bugs (a wrong dtype, an
input returned, a fake that raises) and a schema torch takes and opgen refuses; the round trip imports each bundled
example's generated project and gets back its spec's schemas and semantics."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import worker_started_then
from forked_python import run_pytest
from import_helpers import evaluated, inputs_text
from new_helpers import EXAMPLES

from opgen.spec.load import load_spec

TOY = '''
import torch

lib = torch.library.Library("good", "FRAGMENT")
lib.define("rms(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor rstd)")


def _rms_cpu(x, gamma, eps=1e-6):
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x.float() * rstd * gamma.float()).to(x.dtype), rstd


def _rms_fake(x, gamma, eps=1e-6):
    torch._check(gamma.dim() == 1 and x.shape[-1] == gamma.shape[0])
    return torch.empty_like(x), x.new_empty(x.shape[:-1] + (1,), dtype=torch.float32)


lib.impl("rms", _rms_cpu, "CPU")
torch.library.register_fake("good::rms", _rms_fake, lib=lib)


@torch.library.custom_op("good::scale", mutates_args=())
def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return (x * s).float()


@scale.register_fake
def _(x, s):
    return torch.empty_like(x, dtype=torch.float32)


torch.library.define("good::pairs", "(Tensor x) -> Tensor", lib=lib)  # an older API: impl_abstract
torch.library.impl("good::pairs", "cpu", lambda x: x.reshape(x.shape[0] * 2, x.shape[1] // 2).clone(), lib=lib)


@torch.library.impl_abstract("good::pairs", lib=lib)
def _pairs_fake(x):
    torch._check(x.dim() == 2 and x.shape[1] % 2 == 0)
    return x.new_empty(x.shape[0] * 2, x.shape[1] // 2)


lib.define("zero_into(Tensor x, Tensor! out) -> ()")  # an unnamed write: torch prints it `Tensor($0! -> ) out`
lib.impl("zero_into", lambda x, out: [out.zero_()] and None, "CPU")
torch.library.register_fake("good::zero_into", lambda x, out: None, lib=lib)


bad = torch.library.Library("buggy", "FRAGMENT")
bad.define("scale(Tensor x, float s) -> Tensor")
bad.define("copy(Tensor x) -> Tensor")
bad.define("crash(Tensor x) -> Tensor")
bad.define("view(Tensor(a) x) -> Tensor(a)")
bad.impl("scale", lambda x, s: (x * s).float(), "CPU")
bad.impl("copy", lambda x: x.clone(), "CPU")
bad.impl("crash", lambda x: x + 1, "CPU")
bad.impl("view", lambda x: x.view(-1), "CPU")
torch.library.register_fake("buggy::scale", lambda x, s: torch.empty_like(x), lib=bad)  # the kernel: float32
torch.library.register_fake("buggy::copy", lambda x: x, lib=bad)  # returns its input
torch.library.register_fake("buggy::crash", lambda x: x.no_such_method(), lib=bad)
'''


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("toy")
    (root / "toyops").mkdir()
    (root / "toyops" / "__init__.py").write_text(TOY, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def imported(toy, tmp_path_factory):
    from conftest import run_opgen_command

    out = tmp_path_factory.mktemp("specs")
    done = run_opgen_command("import", str(toy / "toyops"), "-o", str(out), timeout=600)
    return done, out


# the tests that read `imported` run on one xdist worker, which imports the toy package once (a worker importing torch
# and tracing every op: ~6 CPU-s), not once per worker
ON_THE_IMPORTED_TOY = pytest.mark.xdist_group("imported_toy")


@ON_THE_IMPORTED_TOY
def test_writes_a_spec_per_namespace_that_opgen_new_accepts(imported, run_opgen, tmp_path):
    done, out = imported
    assert done.returncode == 1, done.stderr  # the planted bugs are findings
    assert sorted(p.name for p in out.iterdir()) == ["buggy.yaml", "good.yaml"]
    good = load_spec(str(out / "good.yaml"))
    assert (good.style, good.device) == ("library", "cpu")
    rms, scale, pairs, zero_into = good.ops  # in the order the package defines them
    assert str(zero_into.schema) == "good::zero_into(Tensor x, Tensor(a!) out) -> ()"  # a letter torch parses
    assert str(rms.schema) == "good::rms(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor rstd)"
    assert [(o.shape_rule.text, o.dtype_rule.text) for o in rms.outputs] == [
        ("x.shape", "x.dtype"), ("x.shape[:-1] + [1]", "float32")]
    assert (scale.outputs[0].shape_rule.text, scale.outputs[0].dtype_rule.text) == ("x.shape", "float32")
    assert pairs.outputs[0].shape_rule.text == "[2 * x.shape[0], x.shape[1] // 2]"  # sizes as arithmetic
    text = (out / "good.yaml").read_text(encoding="utf-8")
    assert "not an\n    # independent oracle" in text and "made up by opgen; the fake accepts it" in text
    for name in ("good", "buggy"):
        dry = run_opgen("new", str(out / f"{name}.yaml"), "-o", str(tmp_path / name), "--dry-run")
        assert dry.returncode == 0, dry.stderr


@ON_THE_IMPORTED_TOY
def test_correct_fakes_pass_and_planted_fake_bugs_are_reported_per_op(imported):
    done, _out = imported
    lines = done.stderr.splitlines()
    assert not [line for line in lines if "good::" in line], done.stderr  # the correct twins
    wrong_dtype = next(line for line in lines if "buggy::scale" in line)
    assert wrong_dtype.startswith("warning: ") and "__init__.py:" in wrong_dtype
    assert "the package's CPU kernel" in wrong_dtype and "float32" in wrong_dtype and "likelier: fake bug" in wrong_dtype
    assert any("buggy::copy" in line and "returns an input tensor itself" in line for line in lines), done.stderr
    crash = [line for line in lines if "buggy::crash" in line]
    assert any("AttributeError" in line and "no_such_method" in line for line in crash), done.stderr


@ON_THE_IMPORTED_TOY
def test_a_schema_opgen_cannot_express_is_left_out_with_its_reason(imported):
    done, out = imported
    assert any(line.startswith("error: ") and "buggy::view: left out" in line and "OPG102" not in line.split(
        "left out")[0] for line in done.stderr.splitlines()), done.stderr
    buggy = load_spec(str(out / "buggy.yaml"))
    assert [op.schema.name for op in buggy.ops] == ["scale", "copy", "crash"]  # the order the package defines them
    assert buggy.ops[2].missing_semantics  # a TODO, with the reason in the file
    assert "# TODO examples: no inputs the fake accepts" in (out / "buggy.yaml").read_text(encoding="utf-8")


def test_inputs_file_gives_the_examples(toy, run_opgen, tmp_path):
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("good::rms:\n  - {x: {shape: [2, 3, 16], dtype: float16}, gamma: {shape: [16], dtype: float16}}\n",
                      encoding="utf-8")
    done = run_opgen("import", str(toy / "toyops"), "-o", str(tmp_path / "out"), "--inputs", str(inputs), timeout=600)
    assert done.returncode == 1, done.stderr
    rms = load_spec(str(tmp_path / "out" / "good.yaml")).ops[0]
    assert rms.examples[0].values["x"].shape == (2, 3, 16)
    assert rms.outputs[1].shape_rule.text == "x.shape[:-1] + [1]"


def test_no_overwrite_without_force_and_nothing_written_on_a_package_that_does_not_import(
        imported, toy, run_opgen, tmp_path):
    _done, out = imported
    before = (out / "good.yaml").read_bytes()
    again = run_opgen("import", str(toy / "toyops"), "-o", str(out), timeout=600)
    assert again.returncode == 2 and "exists" in again.stderr and "--force" in again.stderr
    assert (out / "good.yaml").read_bytes() == before
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "__init__.py").write_text("import torch\n\nraise RuntimeError('no NPU here')\n", encoding="utf-8")
    done = run_opgen("import", str(broken), "-o", str(tmp_path / "none"), timeout=600)
    assert done.returncode == 2, done.stderr
    assert "RuntimeError: no NPU here" in done.stderr and "__init__.py:3" in done.stderr
    assert not (tmp_path / "none").exists()


def test_help_names_the_exit_codes(run_opgen):
    done = run_opgen("import", "--help")
    assert done.returncode == 0 and "Exit codes: 0" in done.stdout and "PATH_OR_MODULE" in done.stdout


# The default run round-trips one example of each kind (a multi-output norm, a list input, a data-dependent size,
# written buffers with checks:); the others are .ci/run's stress step (about 15 CPU-s each)
ROUND_TRIP_KINDS = ("rms_norm", "stack_scaled", "nonzero_rows", "kv_cache_update")
ROUND_TRIPS = [pytest.param(p, marks=() if p.stem in ROUND_TRIP_KINDS else (pytest.mark.slow, pytest.mark.stress))
               for p in EXAMPLES]


@pytest.mark.parametrize("spec_path", ROUND_TRIPS, ids=lambda p: p.stem)
def test_round_trip_gives_back_the_examples_schemas_and_semantics(spec_path, generated_examples, run_opgen,
                                                                  tmp_path):
    project = next(p for p in generated_examples("library") if p.name == spec_path.stem)
    original = load_spec(str(spec_path))
    inputs = tmp_path / "inputs.json"
    inputs.write_text(inputs_text(original), encoding="utf-8")
    done = run_opgen("import", str(project), "-o", str(tmp_path), "--inputs", str(inputs), timeout=600)
    assert done.returncode in (0, 1), done.stderr
    imported = load_spec(str(tmp_path / f"{original.namespace}.yaml"))
    assert [str(op.schema) for op in imported.ops] == [str(op.schema) for op in original.ops]
    for before, after in zip(original.ops, imported.ops, strict=True):
        assert bool(after.missing_semantics) == bool(before.missing_semantics), textwrap.shorten(done.stderr, 2000)
        if not before.missing_semantics:
            assert evaluated(after, before.examples) == evaluated(before, before.examples), (
                f"ops[{before.index}]: {[(o.shape_rule and o.shape_rule.text) for o in after.outputs]}")


def _adopted_outcomes(spec: Path, project: Path, toy: Path, run_opgen) -> tuple[list[str], str]:
    """`opgen new` of an imported spec (adopt mode), then its tests of the fake and the kernel against the semantics
    and opcheck, with the toy package importable: (the files written, pytest's output)."""
    import os

    done = run_opgen("new", str(spec), "-o", str(project))
    assert done.returncode == 0, done.stderr
    written = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()
                     and ".opgen" not in p.parts)
    env = {**os.environ, "PYTHONPATH": str(toy), "PYTHONDONTWRITEBYTECODE": "1"}
    tests = run_pytest([str(project / "tests"), "-q", "-p", "no:cacheprovider",
                        "-k", "follows_the_semantics or is_registered or opcheck"], env=env, cwd=project, timeout=600)
    return written, tests.stdout + tests.stderr


@ON_THE_IMPORTED_TOY
def test_adopt_mode_writes_tests_only_that_pass_the_correct_ops_and_fail_the_planted_bug(imported, toy, run_opgen,
                                                                                          tmp_path):
    _done, out = imported
    assert "adopt: toyops" in (out / "good.yaml").read_text(encoding="utf-8")
    written, output = _adopted_outcomes(out / "good.yaml", tmp_path / "good", toy, run_opgen)
    assert written == ["README.md", "opgen.yaml", "tests/test_toyops.py"]  # nothing registered twice
    assert " failed" not in output and "passed" in output, output
    readme = (tmp_path / "good" / "README.md").read_text(encoding="utf-8")
    assert "which the\ntests import (`import toyops`)" in readme and "independent of" in readme
    _written, output = _adopted_outcomes(out / "buggy.yaml", tmp_path / "buggy", toy, run_opgen)
    assert "FAILED tests/test_toyops.py::test_scale_kernel_follows_the_semantics" in output, output
    assert "gives torch.float32" in output, output


@pytest.mark.parametrize(("seen", "rule"), [
    ([(("x.shape[0]", "1"), {"x": 2, "gamma": 1}, {}), (("x.shape[0]", "1", "1"), {"x": 3, "gamma": 2}, {})],
     "x.shape[:x.dim() - gamma.dim()] + [1] * gamma.dim()"),
    ([(("3", "xs[0].shape[0]", "xs[0].shape[1]"), {"xs[0]": 2}, {"xs": 3}), (("1", "xs[0].shape[0]"), {"xs[0]": 1},
                                                                             {"xs": 1})], "[len(xs)] + xs[0].shape"),
    ([(("x.shape[0]", "1"), {"x": 2}, {}), (("x.shape[0]", "x.shape[1]", "1"), {"x": 3}, {})], "x.shape[:-1] + [1]"),
    ([(("key.shape[0]",), {"key": 3}, {})], "[key.shape[0]]"),
    ([(("x.shape[0]",), {"x": 1}, {}), (("x.shape[0]", "x.shape[1]"), {"x": 2}, {})], "x.shape"),
    ([(("x.shape[0]", "2"), {"x": 2}, {}), (("x.shape[1]", "3"), {"x": 2}, {})], None),  # nothing fits: a TODO
])
def test_sizes_on_several_examples_become_one_rule(seen, rule):
    from opgen.importer.generalize import Sizes, shape_rule

    assert shape_rule([Sizes(dims, ranks, lengths) for dims, ranks, lengths in seen]) == rule


def test_an_op_that_hangs_is_reported_and_the_others_still_written(run_opgen, tmp_path):
    package = tmp_path / "hangs"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent('''
        import time

        import torch

        lib = torch.library.Library("hangs", "FRAGMENT")
        lib.define("a_slow(Tensor x) -> Tensor")
        lib.define("b_fine(Tensor x) -> Tensor")
        lib.impl("a_slow", lambda x: x.clone(), "CPU")
        lib.impl("b_fine", lambda x: x.clone(), "CPU")
        torch.library.register_fake("hangs::a_slow", lambda x: time.sleep(600), lib=lib)
        torch.library.register_fake("hangs::b_fine", lambda x: torch.empty_like(x), lib=lib)
    '''), encoding="utf-8")
    done = run_opgen("import", str(package), "-o", str(tmp_path / "out"), "--timeout", "5", timeout=600)
    assert done.returncode == 1, done.stderr
    assert "hangs::a_slow: left out: the worker hung (no answer in 5 s)" in done.stderr
    spec = load_spec(str(tmp_path / "out" / "hangs.yaml"))
    assert [op.schema.name for op in spec.ops] == ["b_fine"] and not spec.ops[0].missing_semantics


def test_the_timeout_clock_starts_once_the_worker_has_started():
    """--timeout bounds one op, not the worker's start (Python and torch, slow on a loaded machine); the twin: a
    silence after the start longer than it is a hang."""
    from opgen.importer.command import _follow

    slow_start, hung = worker_started_then(0), worker_started_then(30)  # at once: the waits overlap
    assert _follow(slow_start, 1.0, {}) == {"done": True}
    assert _follow(hung, 1.0, {})["failure"] == "hung (no answer in 1 s)"
    hung.kill()


def test_the_command_line_side_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, opgen.importer.command, opgen.importer.validate; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, check=False).returncode == 0
