"""Specs of real torch_npu 2.13.0 ops (tests/fixtures/real_ops, schemas as in torch_npu's YAML), one per gap of
issue 21: a Tensor[] return (npu_grouped_matmul), float8 outputs from int dtype codes laid out like the input
(npu_dynamic_quant), `let:` and dimension helpers (npu_swiglu, npu_dequant_swiglu_quant), random ops
(_npu_dropout, npu_sim_exponential_).

Their fakes, printed from the semantics, are compared with torch_npu's own Meta functions (shape, dtype and
strides of every output) on every example and on a non-contiguous copy of it: live from the wheel when
OPGEN_TORCH_NPU_WHEEL names one, else against the values recorded from it in torch_npu_meta.json (the wheel
test also checks that the record is what the wheel gives). Each spec generates a project that passes its own
tests in each style that can register the op."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch
from new_helpers import REPO, opgen, opgen_in_one_process, run_generated_tests
from op_plugin_helpers import WHEEL, needs_wheel

from opgen.op_plugin.render import meta_parameters
from opgen.render.fakes import fake_and_expected
from opgen.spec.load import load_spec
from opgen.spec.model import TensorValue

SPECS = sorted((REPO / "tests" / "fixtures" / "real_ops").glob("*.yaml"))
RECORDED = REPO / "tests" / "fixtures" / "real_ops" / "torch_npu_meta.json"
CUSTOM_OP_REFUSED = {"npu_dequant_swiglu_quant", "npu_dynamic_quant", "npu_grouped_matmul"}  # keyword-only tensors


def _ops():
    return [op for path in SPECS for op in load_spec(str(path)).ops]


def _meta_tensor(value: TensorValue, non_contiguous: bool) -> torch.Tensor:
    shape = list(value.shape) if value.shape is not None else list(torch.tensor(value.values).shape)
    dtype = getattr(torch, value.dtype)
    if non_contiguous and len(shape) >= 2:  # the same sizes, transposed in memory
        return torch.empty([*shape[:-2], shape[-1], shape[-2]], dtype=dtype, device="meta").transpose(-1, -2)
    return torch.empty(shape, dtype=dtype, device="meta")


def _value(value, non_contiguous: bool):
    if isinstance(value, TensorValue):
        return _meta_tensor(value, non_contiguous)
    if isinstance(value, tuple) and value and all(isinstance(v, TensorValue) for v in value):
        return [_meta_tensor(v, non_contiguous) for v in value]
    return value


# More calls for the comparison only (the CPU reference kernels need not run them): the dtype codes the specs'
# examples leave out (hifloat8 290, fp4 296/297, float8 291/292), other ranks and dims, an int32 weight.
ORACLE_CALLS = """
npu_dequant_swiglu_quant:
  - {x: {shape: [4, 16]}, dst_type: 290}
  - {x: {shape: [4, 16]}, dst_type: 296}
  - {x: {shape: [2, 6, 16]}, activate_dim: -1, dst_type: 297}
  - {x: {shape: [6, 8]}, activate_dim: 0, dst_type: 292}
npu_dynamic_quant:
  - {input: {shape: [4, 16], dtype: float16}, dst_type: 290}
  - {input: {shape: [4, 16], dtype: float16}, dst_type: 292}
  - {input: {shape: [3, 5, 16]}, dst_type: 291, quant_mode: perchannel}
npu_swiglu:
  - {self: {shape: [2, 3, 4, 6]}, dim: 2}
  - {self: {shape: [8, 2, 2]}, dim: -3}
npu_grouped_matmul:
  - {x: [{shape: [4, 8], dtype: int8}], weight: [{shape: [8, 2], dtype: int32}], group_type: -1, output_dtype: 6}
  - {x: [{shape: [4, 8]}, {shape: [2, 8]}], weight: [{shape: [8, 3]}, {shape: [8, 5]}], group_type: 0, output_dtype: 15}
_npu_dropout:
  - {self: {shape: [1000]}, p: 0.1}
  - {self: {shape: [2, 0]}, p: 0.1}
"""


def _examples(op):
    from opgen.spec.load import load_inputs_text

    schemas = {other.schema.name: other.schema for other in _ops()}
    return [*op.examples, *load_inputs_text(ORACLE_CALLS, "ORACLE_CALLS", schemas).get(op.schema.name, ())]


def cases(op) -> dict[str, tuple[list, dict]]:
    """Label -> (args, kwargs) on meta tensors: every example (and ORACLE_CALLS), with every argument given (as
    the dispatcher passes them), and a non-contiguous copy of each call that has a tensor of rank >= 2."""
    found = {}
    for number, example in enumerate(_examples(op)):
        variants = [False] + ([True] if any(
            isinstance(v, TensorValue) and len(_meta_tensor(v, False).shape) >= 2
            or isinstance(v, tuple) and any(isinstance(t, TensorValue) for t in v) for v in example.values.values())
            else [])
        for non_contiguous in variants:
            values = {a.name: _value(example.values.get(a.name, a.default), non_contiguous) for a in op.schema.arguments}
            args = [values[a.name] for a in op.schema.arguments if not a.kwarg_only]
            kwargs = {a.name: values[a.name] for a in op.schema.arguments if a.kwarg_only}
            found[f"{number}{'-noncontiguous' if non_contiguous else ''}"] = (args, kwargs)
    return found


def fake_function(op):
    """The fake function opgen prints from the op's semantics (a tagged op's is torch's: its mutated argument)."""
    if op.aliasing_tag:
        position = next(i for i, a in enumerate(op.schema.arguments) if a.is_write)
        return lambda *args, **kwargs: args[position]
    body, _ = fake_and_expected(op)
    source = f"def fake({meta_parameters(op.schema)}):\n" + "".join(f"    {line}\n" for line in body)
    scope = {"torch": torch}
    exec(compile(source, f"<fake of {op.schema.name}>", "exec"), scope)  # noqa: S102 - the printed fake is the subject
    return scope["fake"]


def metadata(result) -> list[list]:
    """[shape, dtype, strides] of every output tensor, flattened (a Tensor[] output's tensors in order)."""
    tensors = [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    return [[list(t.shape), str(t.dtype).removeprefix("torch."), list(t.stride())] for t in tensors]


def fake_outputs() -> dict[str, dict[str, list]]:
    return {op.schema.name: {label: metadata(fake_function(op)(*args, **kwargs))
                             for label, (args, kwargs) in cases(op).items()} for op in _ops()}


def meta_outputs(meta: dict) -> dict[str, dict[str, list]]:
    return {op.schema.name: {label: metadata(meta[op.schema.name](*args, **kwargs))
                             for label, (args, kwargs) in cases(op).items()} for op in _ops()}


def _disagreements(fakes: dict, oracle: dict) -> list[str]:
    return [f"{name} case {label}: opgen's fake {got}, torch_npu's Meta {oracle[name][label]}"
            for name, by_case in fakes.items() for label, got in by_case.items() if got != oracle[name][label]]


def test_the_fakes_agree_with_torch_npus_recorded_meta_functions():
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    fakes = fake_outputs()
    assert fakes.keys() == recorded.keys() and all(fakes[k].keys() == recorded[k].keys() for k in fakes)
    assert not _disagreements(fakes, recorded)
    assert sum(len(by_case) for by_case in fakes.values()) == 67  # calls compared (examples, non-contiguous copies)


def test_the_comparison_catches_a_planted_wrong_fake():
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    fakes = fake_outputs()
    fakes["npu_swiglu"]["1"][0][0][1] *= 2  # the halved dim not halved
    fakes["npu_dynamic_quant"]["1-noncontiguous"][0][2] = [256, 16, 1]  # contiguous where the input is not
    assert len(_disagreements(fakes, recorded)) == 2


@needs_wheel
def test_the_record_is_what_the_wheel_gives_and_the_fakes_agree_live():
    from torch_npu_meta import load_meta_functions

    live = meta_outputs(load_meta_functions(WHEEL))
    assert live == json.loads(RECORDED.read_text(encoding="utf-8"))
    assert not _disagreements(fake_outputs(), live)


def record() -> None:
    """Rewrite torch_npu_meta.json from the wheel (python -c 'import test_real_ops as t; t.record()' in tests/)."""
    from torch_npu_meta import load_meta_functions

    RECORDED.write_text(json.dumps(meta_outputs(load_meta_functions(WHEEL)), indent=1, sort_keys=True) + "\n",
                        encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("style", ["library", "custom_op"])
def test_each_spec_generates_a_project_that_passes_its_own_tests(tmp_path, style):
    """In each style that can register the op; custom_op refuses keyword-only tensors, saying how to switch.
    (The projects run in one pytest process: each gets a package of its own, as two `npu` packages would clash.)"""
    projects = []
    for spec in SPECS:
        path = tmp_path / spec.name
        path.write_text(spec.read_text().replace("namespace: npu\n", f"namespace: npu\npackage: {spec.stem}_ops\n"))
        target = tmp_path / spec.stem
        if style == "custom_op" and spec.stem in CUSTOM_OP_REFUSED:  # what the command says is the test: a process each
            done = opgen("new", str(path), "-o", str(target), "--style", style)
            assert done.returncode == 2 and "[OPG106]" in done.stderr and "--style library" in done.stderr
            assert not target.exists()
            continue
        projects.append(target)
    # the others in one process (one start and opgen's imports, not one per spec)
    assert opgen_in_one_process(*(["new", str(tmp_path / f"{project.name}.yaml"), "-o", str(project), "--style", style]
                                  for project in projects)) == [0] * len(projects)
    assert len(projects) == (6 if style == "library" else 3)
    ruff = shutil.which("ruff") or pytest.fail("ruff is not installed (it is part of the test extra)")
    done = subprocess.run([ruff, "check", "--no-cache", "--extend-select", "E,F", *map(str, projects)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
    results = run_generated_tests(projects, tmp_path / "junit.xml")
    bad = {name: r["message"][:600] for name, r in results.items() if r["outcome"] in ("failed", "error")}
    assert not bad, bad
    assert sum(r["outcome"] == "passed" for r in results.values()) >= len(projects) * 8
    # a random op's values are compared under one seed (compiled == eager), not skipped
    assert results["test__npu_dropout_compiled_matches_eager"]["outcome"] == "passed"
    assert results["test__npu_dropout_compiles_once_for_two_sizes"]["outcome"] == "passed"
    if style == "library":  # expect: on a Tensor[] return
        assert results["test_npu_grouped_matmul_matches_expected_values"]["outcome"] == "passed"


NEW_SPECS = sorted((REPO / "tests" / "fixtures" / "real_ops41").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.stress  # two minutes a style: .ci/run's stress step (issue 41's count of real ops passing out of the box)
@pytest.mark.parametrize("style", ["library", "custom_op"])
def test_issue_41s_real_op_specs_pass_out_of_the_box(tmp_path, style):
    """Twelve specs of real vLLM and torch_npu ops (tests/fixtures/real_ops41), written as a user writes them, against
    the tiers of issue 41 (aliasing, out= given an input or a wrong size, extremes at a row's ends, tile sizes on the
    leading dims): every project passes in both styles, no failure, no error. reshape_and_cache_flash's 4-D paged
    cache, viewed as token rows, takes a transposed cache and refuses a permuted one (a refusal, not a failure);
    rotary_embedding writes an optional `Tensor(b!)? key`, None in its second example; awq_dequantize declares its
    int32 packed inputs in `checks:`, so the int64 variant is outside its contract; topk_softmax declares `ties:`."""
    assert len(NEW_SPECS) == 12
    namespaces = [load_spec(str(spec)).namespace for spec in NEW_SPECS]  # one package each: run together, a shared
    assert len(set(namespaces)) == len(namespaces), namespaces            # name imports only one of them
    projects = []
    for spec in NEW_SPECS:
        done = opgen("new", str(spec), "-o", str(tmp_path / spec.stem), "--style", style)
        assert done.returncode == 0, done.stderr
        projects.append(tmp_path / spec.stem)
    results = run_generated_tests(projects, tmp_path / "junit.xml")
    bad = {name: r["message"][:600] for name, r in results.items() if r["outcome"] in ("failed", "error")}
    assert not bad, bad
    for spec in NEW_SPECS:  # the oracle ran on each op, with the new variants
        op = load_spec(str(spec)).ops[0]
        assert results[f"test_{op.schema.name}_matches_the_reference"]["outcome"] == "passed"
