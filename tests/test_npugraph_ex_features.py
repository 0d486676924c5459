"""The generated tiers of npugraph_ex's production features (tests/npugraph_ex_features.py of every project), run by
generated projects' own pytest: the compile cache loaded by a fresh process that imports only the package, one
graph for two sizes under capture_limit, and the op on a second stream (an NPU only: a skip on CPU). Bundled
examples in both styles pass; three planted projects fail, each naming what to change: an op registered lazily
(the loading process does not have it), a package digest blind to the fakes (a changed fake would load a stale
graph), and a fake that specialises on a size (capture_limit never applies). `opgen check` runs the same checks
as its rungs (tests/test_check.py); a kernel synchronizing a stream is the capture tier's (tests/test_graph_checks.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_opgen_command
from new_helpers import REPO, opgen, run_generated_tests

from opgen.npugraph_ex import loader

pytestmark = [pytest.mark.slow, pytest.mark.skipif(loader().unavailable(capture=True) is not None,
                                                   reason=str(loader().unavailable(capture=True)))]
FIXTURES = Path(__file__).parent / "fixtures" / "check"
FEATURES = ("compile_cache", "capture_limit", "streams")  # opgen check's rungs of them
# the capture-limit tier (two compiles with dynamic=True, about 1.5 s an op) on a few ops, the others on all
LIMITED = ("kv_cache_update", "rms_norm", "nonzero_rows", "pair_scale", "blind_scale", "standin_sum", "hostread_sum")
FEATURE_TIERS = " or ".join(["npugraph_ex_compile_cache", "npugraph_ex_on_a_second_stream",
                             *(f"{stem}_npugraph_ex_capture_limit" for stem in LIMITED)])
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


# a reference reading the host (a loop over sequence lengths): on device npu the CPU kernel stands in for a stub NPU
# kernel, so the feature tiers skip saying why (the capture tier names the line); on device cpu it is the kernel the
# device runs, so they fail
HOST_READ_SPEC = """namespace: {name}_ops
style: library
device: {device}
ops:
  - schema: "{name}_sum(Tensor x, Tensor lengths) -> Tensor"
    outputs: {{out0: {{shape: "[lengths.shape[0], x.shape[1]]", dtype: x}}}}
    reference: |
      out = x.new_zeros(lengths.shape[0], x.shape[1])
      start = 0
      for b, n in enumerate(lengths.tolist()):
          out[b] = x[start:start + n].sum(0)
          start += n
      return out
    examples:
      - {{x: {{shape: [6, 8]}}, lengths: {{values: [2, 4]}}}}
"""
STAND_IN_SKIP = "stands in for the device kernel, and the NPU graph refuses to capture it (Cannot call Tensor.tolist()"


# correct: two ops of one package, each loaded under the digest it was saved with (a probe of one op's fake must
# not change the other's cache directory)
PAIR_SPEC = """namespace: pair_ops
style: library
device: npu
ops:
  - schema: "pair_scale(Tensor x, Tensor w) -> Tensor"
    outputs: {out0: {like: x}}
    reference: |
      return x * w
    examples: [{x: {shape: [4, 8]}, w: {shape: [8]}}]
  - schema: "pair_shift(Tensor x, Tensor w) -> Tensor"
    outputs: {out0: {like: x}}
    reference: |
      return x + w
    examples: [{x: {shape: [4, 8]}, w: {shape: [8]}}]
"""


def _edit(path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, object]:
    """`lazy`: the package registers its op only when `ops` is first used (the tests import it themselves);
    `blind`: its compile_cache digest ignores the fakes, and its fake branches on the last size; `unstable`: its
    digest differs in every process; and, correct, the custom_op-style project of examples/rms_norm.yaml."""
    root = tmp_path_factory.mktemp("planted")
    done = opgen("new", str(REPO / "examples" / f"{CUSTOM_OP}.yaml"), "-o", str(root / CUSTOM_OP), "--style",
                 "custom_op")
    assert done.returncode == 0, done.stderr
    projects = {CUSTOM_OP: root / CUSTOM_OP}
    (root / "pair.yaml").write_text(PAIR_SPEC, encoding="utf-8")
    done = opgen("new", str(root / "pair.yaml"), "-o", str(root / "pair"))
    assert done.returncode == 0, done.stderr
    projects["pair"] = root / "pair"
    for name in ("lazy", "blind", "unstable"):
        spec = root / f"{name}.yaml"
        spec.write_text(PLANTED_SPEC.format(namespace=f"{name}_ops", name=name), encoding="utf-8")
        done = opgen("new", str(spec), "-o", str(root / name))
        assert done.returncode == 0, done.stderr
        projects[name] = root / name
    for name, device in (("standin", "npu"), ("hostread", "cpu")):
        spec = root / f"{name}.yaml"
        spec.write_text(HOST_READ_SPEC.format(name=name, device=device), encoding="utf-8")
        done = opgen("new", str(spec), "-o", str(root / name))
        assert done.returncode == 0, done.stderr
        projects[name] = root / name
    lazy = projects["lazy"]
    _edit(lazy / "lazy_ops" / "__init__.py", "from .ops import lazy_scale\n",
          "def __getattr__(name):  # planted: the op is registered on first use\n"
          "    from . import ops\n\n    return getattr(ops, name)\n")
    _edit(lazy / "tests" / "test_lazy_ops.py", "import lazy_ops  # registers the operators\n",
          "import lazy_ops  # registers the operators\nimport lazy_ops.ops  # noqa: F401\n")
    blind = projects["blind"]
    _edit(blind / "blind_ops" / "compile_cache.py", "\\n{_fake_source(name)}\\n", "\\n")  # planted: fakes not seen
    _edit(blind / "blind_ops" / "ops.py", "    out0 = torch.empty_like(x)\n",
          "    if x.shape[-1] > 8:  # planted: a branch on a size\n        return torch.empty_like(x)\n"
          "    out0 = torch.empty_like(x)\n")
    _edit(projects["unstable"] / "unstable_ops" / "compile_cache.py", "    digest = hashlib.sha256()\n",
          "    digest = hashlib.sha256(str(os.getpid()).encode())  # planted: another digest in every process\n")
    return projects


@pytest.mark.xdist_group("examples-library")
def test_the_feature_tiers_pass_bundled_examples_and_fail_planted_projects(generated_examples, planted, tmp_path):
    """One pytest process over bundled examples of both styles and the planted projects: the correct ops pass
    compile cache and capture limit, a `dynamic` op skips them, every stream tier skips saying why; each planted
    project fails the tier it breaks with the signature and the fix, and passes the others."""
    projects = [p for p in generated_examples("library") if p.name in LIBRARY]
    temp = tmp_path / "temp"
    temp.mkdir()
    results = run_generated_tests([*projects, *planted.values()], tmp_path / "junit.xml", select=FEATURE_TIERS,
                                  env={"TMPDIR": str(temp)})
    # every round trip, passed, failed or skipped, removes its cache folder (one per package and run used to stay)
    assert not [p.name for p in temp.iterdir() if p.name.startswith("opgen-compile-cache-")]
    for example in (*LIBRARY, CUSTOM_OP, "pair_scale", "pair_shift"):
        stem = STEMS.get(example, example)
        for tier in ("compile_cache_in_a_fresh_process", "capture_limit", "on_a_second_stream"):
            if tier == "capture_limit" and stem not in LIMITED:
                assert f"test_{stem}_npugraph_ex_{tier}" not in results
                continue
            result = results[f"test_{stem}_npugraph_ex_{tier}"]
            if example == "nonzero_rows":
                assert result["outcome"] == "skipped" and DYNAMIC_SKIP in result["message"], (stem, tier, result)
            elif tier == "on_a_second_stream":
                assert result["outcome"] == "skipped" and STREAMS_SKIP in result["message"], (stem, result)
            else:
                assert result["outcome"] == "passed", (stem, tier, result["message"][-3000:])
    by_file = {(name.split("_")[1], name.split("_npugraph_ex_")[1]): r for name, r in results.items()
               if name.startswith(("test_lazy_scale_", "test_blind_scale_", "test_unstable_scale_"))}
    unstable = by_file["unstable", "compile_cache_in_a_fresh_process"]
    assert unstable["outcome"] == "failed" and "names another cache directory than the process that saved the " \
        "cache" in unstable["message"], unstable["message"][-3000:]
    lazy_cache = by_file["lazy", "compile_cache_in_a_fresh_process"]
    assert lazy_cache["outcome"] == "failed", lazy_cache
    assert ("the graph cached by npugraph_ex calls lazy_ops.lazy_scale.default, which a fresh process importing only "
            "lazy_ops does not register") in lazy_cache["message"], lazy_cache["message"][-3000:]
    assert "register it at import in lazy_ops/__init__.py" in lazy_cache["message"]
    for tier in ("compile_cache_in_a_fresh_process", "capture_limit"):
        stand_in, host_read = results[f"test_standin_sum_npugraph_ex_{tier}"], results[f"test_hostread_sum_npugraph_ex_{tier}"]
        assert stand_in["outcome"] == "skipped" and STAND_IN_SKIP in stand_in["message"], (tier, stand_in)
        assert host_read["outcome"] == "failed" and "Cannot call Tensor.tolist() during NPU graph capture" in host_read[
            "message"], (tier, host_read["message"][-3000:])
    blind_cache, blind_limit = by_file["blind", "compile_cache_in_a_fresh_process"], by_file["blind", "capture_limit"]
    assert blind_cache["outcome"] == "failed" and "a fake changed under the warm cache would load the graph " \
        "compiled for the old one: blind_ops.compile_cache.cache_dir() gave the same directory" in blind_cache[
            "message"], blind_cache["message"][-3000:]
    assert blind_limit["outcome"] == "failed" and "Dynamo compiled 2 graphs for two sizes with dynamic=True: the " \
        "op's fake specialises on a size" in blind_limit["message"], blind_limit["message"][-3000:]


@pytest.mark.xdist_group("examples-library")
def test_opgen_check_runs_the_feature_rungs_and_names_each_planted_bug(planted):
    """`opgen check` runs the same checks as its compile_cache, capture_limit and streams rungs: the correct project
    and a correct module op pass (the module's note says npugraph_ex's key holds nothing of the op), each planted
    bug has its signature: "compile-cache-op-not-registered", "compile-cache-stale", "compile-cache-not-loaded",
    "capture-limit" (with --keep-going, after the stale cache), and "stream-misuse" at the capture rung (a kernel
    waiting on the host for its stream), whose twin orders the streams on the device."""
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
    targets = [str(planted[name]) for name in (CUSTOM_OP, "lazy", "blind", "unstable")]
    skip = [arg for rung in ("static", "opcheck", "aot_eager", "npugraph_ex") for arg in ("--skip", rung)]
    done = run_opgen_command("check", "--json", "--keep-going", *skip, *targets,
                             "check_fixtures.capture:chk_cap::stream_synced", "check_fixtures.capture:ok_cap::stream_synced",
                             env=env, cwd=str(FIXTURES), timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    found = {report["op"]: report for report in map(json.loads, done.stdout.splitlines())}
    rungs = {op: {r["name"]: r for r in report["rungs"]} for op, report in found.items()}
    for op in ("myops::rms_norm", "ok_cap::stream_synced"):
        assert found[op]["verdict"] is None, (op, found[op]["verdict"])
        assert {name: r["status"] for name, r in rungs[op].items() if name in FEATURES} == {
            "compile_cache": "pass", "capture_limit": "pass", "streams": "skip"}, (op, rungs[op])
    assert "myops.compile_cache.cache_dir() named another directory" in rungs["myops::rms_norm"]["compile_cache"][
        "reason"]
    assert "npugraph_ex's cache key holds nothing of the op: clear the cache" in rungs["ok_cap::stream_synced"][
        "compile_cache"]["reason"]
    expected = {"lazy_ops::lazy_scale": ("compile_cache", "compile-cache-op-not-registered"),
                "blind_ops::blind_scale": ("compile_cache", "compile-cache-stale"),
                "unstable_ops::unstable_scale": ("compile_cache", "compile-cache-not-loaded"),
                "chk_cap::stream_synced": ("capture", "stream-misuse")}
    for op, (rung, signature) in expected.items():
        verdict = found[op]["verdict"]
        assert verdict["signature"] == signature and verdict["evidence"].startswith(f"{rung}: "), (op, verdict)
    assert rungs["blind_ops::blind_scale"]["capture_limit"]["status"] == "fail"
    assert "Dynamo compiled 2 graphs for two sizes" in rungs["blind_ops::blind_scale"]["capture_limit"]["reason"]
    assert "at check_fixtures/capture.py:" in found["chk_cap::stream_synced"]["verdict"]["evidence"]
