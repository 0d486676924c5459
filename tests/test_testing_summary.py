"""The one-screen summary that ends a run of generated tests (opgen/testing/summary.py): each tier that ran with its
counts, each skip reason once with the tiers it hit, the opt-in tests left out and how to run them."""

from __future__ import annotations

from opgen.testing.summary import WIDTH, Result, skip_reason, summary_lines

NO_NPU = "no NPU: torch_npu not importable"


def test_the_summary_groups_skips_by_reason_and_names_opt_in_tests():
    results = [Result("kernel", "passed")] * 5 + [Result("npugraph_ex", "passed")] * 2 + [
        Result("npu", "skipped", NO_NPU), Result("npu", "skipped", NO_NPU), Result("cuda", "skipped", "no CUDA"),
        Result("kernel", "failed")]
    lines = summary_lines(results, {"models": (12, "transformers is not installed: pip install transformers")})
    assert lines == [
        "opgen: what ran, what did not and why",
        "  ran      kernel        5 passed, 1 failed",
        "  ran      npugraph_ex   2 passed",
        f"  skipped    2 (npu 2): {NO_NPU}",
        "  skipped    1 (cuda 1): no CUDA",
        "  not run   12 (models, opt-in): transformers is not installed: pip install transformers"]


def test_long_reasons_are_cut_to_one_line_and_skip_reports_are_read():
    lines = summary_lines([Result("fake", "skipped", "x" * 500)], {})
    assert len(lines) == 2 and len(lines[1]) == WIDTH and lines[1].endswith("...")
    assert skip_reason(("t.py", 3, "Skipped: no NPU: torch_npu not importable\nmore")) == NO_NPU
