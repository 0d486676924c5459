"""The generated tiers of npugraph_ex's production features (tests/npugraph_ex_features.py of every project), run by
generated projects' own pytest: the compile cache loaded by a fresh process that imports only the package, one
graph for two sizes under capture_limit, and the op on a second stream (an NPU only: a skip on CPU). Bundled
examples in both styles pass; three planted projects fail, each naming what to change: an op registered lazily
(the loading process does not have it), a package digest blind to the fakes (a changed fake would load a stale
graph), and a fake that specialises on a size (capture_limit never applies). `opgen check` runs the same checks
as its rungs (tests/test_check.py); a kernel synchronizing a stream is the capture tier's (tests/test_graph_checks.py).
"""

from __future__ import annotations

import pytest
from new_helpers import REPO, opgen, run_generated_tests

from opgen.npugraph_ex import loader

pytestmark = [pytest.mark.slow, pytest.mark.skipif(loader().unavailable(capture=True) is not None,
                                                   reason=str(loader().unavailable(capture=True)))]
FEATURE_TIERS = "npugraph_ex_compile_cache or npugraph_ex_capture_limit or npugraph_ex_on_a_second_stream"
# bundled examples proven (one pytest process: the packages must differ): in the library style an in-place op with
# two caches, a tagged in-place op returning its argument, a data-dependent size; in the custom_op style two outputs
# with autograd (a custom_op keeps its fake on the op, which the package digest must read)
LIBRARY = ("kv_cache_update", "scale_inplace", "nonzero_rows")
CUSTOM_OP = "rms_norm"
STEMS = {"kv_cache_update": "kv_cache_update", "scale_inplace": "scale_", "nonzero_rows": "nonzero_rows",
         "rms_norm": "rms_norm"}
STREAMS_SKIP = "npugraph_ex's multi-stream scopes run on an NPU only"
DYNAMIC_SKIP = "has a data-dependent output size (`dynamic`)"
PLANTED_SPEC = """namespace: {namespace}
style: library
device: npu
ops:
  - schema: "{name}_scale(Tensor x, Tensor w) -> Tensor"
    doc: "Scales each row of x by w."
    outputs: {{out0: {{like: x}}}}
    reference: |
      return x * w
    examples:
      - {{x: {{shape: [4, 8]}}, w: {{shape: [8]}}}}
"""


def _edit(path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def planted_projects(root) -> dict[str, object]:
    """`lazy`: the package registers its op only when `ops` is first used (the tests import it themselves);
    `blind`: its compile_cache digest ignores the fakes, and its fake branches on the last size."""
    projects = {}
    for name in ("lazy", "blind"):
        spec = root / f"{name}.yaml"
        spec.write_text(PLANTED_SPEC.format(namespace=f"{name}_ops", name=name), encoding="utf-8")
        done = opgen("new", str(spec), "-o", str(root / name))
        assert done.returncode == 0, done.stderr
        projects[name] = root / name
    lazy = projects["lazy"]
    _edit(lazy / "lazy_ops" / "__init__.py", "from .ops import lazy_scale\n",
          "def __getattr__(name):  # planted: the op is registered on first use\n"
          "    from . import ops\n\n    return getattr(ops, name)\n")
    _edit(lazy / "tests" / "test_graph_entry.py", "import lazy_ops  # registers the operators\n",
          "import lazy_ops  # registers the operators\nimport lazy_ops.ops  # noqa: F401\n")
    blind = projects["blind"]
    _edit(blind / "blind_ops" / "compile_cache.py", "\\n{_fake_source(name)}\\n", "\\n")  # planted: fakes not seen
    _edit(blind / "blind_ops" / "ops.py", "    out0 = torch.empty_like(x)\n",
          "    if x.shape[-1] > 8:  # planted: a branch on a size\n        return torch.empty_like(x)\n"
          "    out0 = torch.empty_like(x)\n")
    return projects


@pytest.mark.xdist_group("examples-library")
def test_the_feature_tiers_pass_bundled_examples_and_fail_planted_projects(generated_examples, tmp_path):
    """One pytest process over bundled examples of both styles and the planted projects: the correct ops pass
    compile cache and capture limit, a `dynamic` op skips them, every stream tier skips saying why; each planted
    project fails the tier it breaks with the signature and the fix, and passes the others."""
    projects = [p for p in generated_examples("library") if p.name in LIBRARY]
    done = opgen("new", str(REPO / "examples" / f"{CUSTOM_OP}.yaml"), "-o", str(tmp_path / CUSTOM_OP), "--style",
                 "custom_op")
    assert done.returncode == 0, done.stderr
    planted = planted_projects(tmp_path)
    results = run_generated_tests([*projects, tmp_path / CUSTOM_OP, *planted.values()], tmp_path / "junit.xml",
                                  select=FEATURE_TIERS)
    for example in (*LIBRARY, CUSTOM_OP):
        stem = STEMS[example]
        for tier in ("compile_cache_in_a_fresh_process", "capture_limit", "on_a_second_stream"):
            result = results[f"test_{stem}_npugraph_ex_{tier}"]
            if example == "nonzero_rows":
                assert result["outcome"] == "skipped" and DYNAMIC_SKIP in result["message"], (stem, tier, result)
            elif tier == "on_a_second_stream":
                assert result["outcome"] == "skipped" and STREAMS_SKIP in result["message"], (stem, result)
            else:
                assert result["outcome"] == "passed", (stem, tier, result["message"][-3000:])
    by_file = {(name.split("_")[1], name.split("_npugraph_ex_")[1]): r for name, r in results.items()
               if name.startswith(("test_lazy_scale_", "test_blind_scale_")) and "_npugraph_ex_" in name}
    lazy_cache = by_file["lazy", "compile_cache_in_a_fresh_process"]
    assert lazy_cache["outcome"] == "failed", lazy_cache
    assert ("the graph cached by npugraph_ex calls lazy_ops.lazy_scale.default, which a fresh process importing only "
            "lazy_ops does not register") in lazy_cache["message"], lazy_cache["message"][-3000:]
    assert "register it at import in lazy_ops/__init__.py" in lazy_cache["message"]
    assert by_file["lazy", "capture_limit"]["outcome"] == "passed"
    blind_cache, blind_limit = by_file["blind", "compile_cache_in_a_fresh_process"], by_file["blind", "capture_limit"]
    assert blind_cache["outcome"] == "failed" and "a fake changed under the warm cache would load the graph " \
        "compiled for the old one: blind_ops.compile_cache.cache_dir() gave the same directory" in blind_cache[
            "message"], blind_cache["message"][-3000:]
    assert blind_limit["outcome"] == "failed" and "Dynamo compiled 2 graphs for two sizes with dynamic=True: the " \
        "op's fake specialises on a size" in blind_limit["message"], blind_limit["message"][-3000:]
