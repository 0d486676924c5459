"""A float8 written buffer through generated projects: vLLM's static fp8 quant (`Tensor(a!) result` in
float8_e4m3fn) passes every tier in both styles on a correct kernel, opcheck included (torch's own test_schema cannot
compare float8 values on CPU, so opgen asks its questions bit for bit: tests/test_graph_checks.py), and a kernel with a
wrong scale fails the reference tier."""

from __future__ import annotations

import pytest
from new_helpers import REPO, STYLES, opgen, project_outcomes

# generates projects and runs their tests in one pytest process
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("float8_buffers")]

SPEC = (REPO / "tests" / "fixtures" / "written_out" / "static_scaled_fp8_quant.yaml").read_text(encoding="utf-8")
CORRECT = "    y = input.float() / scale.float()\n"
WRONG_SCALE = "    y = input.float() * scale.float()\n"  # the scale applied the other way round


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("float8")
    for name in (*STYLES, "planted"):
        text = SPEC.replace("namespace: vllm_fp8", f"namespace: fp8_{name}").replace(
            "style: library", f"style: {'library' if name == 'planted' else name}")
        spec = root / f"fp8_{name}.yaml"
        spec.write_text(text, encoding="utf-8")
        done = opgen("new", str(spec), "-o", str(root / name))
        assert done.returncode == 0, done.stderr
    kernel = root / "planted" / "fp8_planted" / "kernels" / "static_scaled_fp8_quant_cpu.py"
    source = kernel.read_text(encoding="utf-8")
    assert CORRECT in source
    kernel.write_text(source.replace(CORRECT, WRONG_SCALE), encoding="utf-8")
    return root, project_outcomes([root / name for name in (*STYLES, "planted")], root / "junit.xml")


def test_a_float8_quant_kernel_passes_every_tier_in_both_styles(outcomes):
    _, outcomes = outcomes
    for style in STYLES:
        results = outcomes[style]
        failed = {name: result["message"][:600] for name, result in results.items() if result["outcome"] == "failed"}
        assert not failed, (style, failed)
        for tier in ("opcheck", "non_contiguous_inputs", "matches_the_reference", "writes_what_the_schema_says",
                     "compiled_matches_eager"):
            assert results[f"test_static_scaled_fp8_quant_{tier}"]["outcome"] == "passed", (style, tier)


def test_a_float8_quant_kernel_with_a_wrong_scale_fails_the_reference_tier(outcomes):
    results = outcomes[1]["planted"]
    failed = results["test_static_scaled_fp8_quant_matches_the_reference"]
    assert failed["outcome"] == "failed", failed
    assert "float8_e4m3fn" in failed["message"] and "values differ" in failed["message"], failed["message"][:800]
    assert results["test_static_scaled_fp8_quant_opcheck"]["outcome"] == "passed"  # no tier fails for another reason


def test_opgen_check_passes_the_float8_op_saying_whose_schema_check_ran(outcomes):
    root, _ = outcomes
    done = opgen("check", "--skip", "npugraph_ex", "--skip", "capture", "--skip", "compile_cache", "--skip",
                 "capture_limit", "--skip", "streams", str(root / "library"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "opcheck: schema (opgen's: float8 values, bit for bit), fake tensors, AOT dispatch" in done.stdout, done.stdout
