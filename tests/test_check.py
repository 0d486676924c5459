"""`opgen check`, through the real command: every deliberately broken op of tests/fixtures/check is
classified to its layer and signature, its correct twin passes every runnable rung, and the CLI's usage
errors, --explain, --versions, --inputs, project targets, crashes and hangs behave as documented.

The npugraph_ex rung needs the cache `opgen npugraph-ex fetch` fills: the ambient one, or one fetched into
a temporary OPGEN_CACHE_DIR from the wheel named by $OPGEN_TORCH_NPU_WHEEL. Without either, the ops only
that rung catches are left out (with OPGEN_REQUIRE_NPUGRAPH_EX set, as in CI, that fails instead).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
from pathlib import Path

import forked_python
import pytest
from conftest import run_opgen_command, worker_started_then
from forked_python import run_python
from new_helpers import REPO, opgen

from opgen.check.signatures import BY_ID, causes_for, classify
from opgen.check.signatures import explain as explain_signature
from opgen.npugraph_ex import loader

FIXTURES = Path(__file__).parent / "fixtures" / "check"
RUNG_NAMES = ["import", "static", "eager", "opcheck", "aot_eager", "npugraph_ex", "fusion", "capture", "compile_cache",
              "capture_limit", "streams"]
# npugraph_ex's production features (a fresh process, dynamic shapes): proven on a few ops by
# test_the_feature_rungs_..., skipped in the other runs here, which check dozens of ops
FEATURES = ("compile_cache", "capture_limit", "streams")
FEATURES_SKIPPED = dict.fromkeys(FEATURES, "skip")
FEATURE_TESTS = "test_npugraph_ex_features"  # the module proving the feature rungs' rows

# op -> (layer, signature, rule) of the first failing rung, static rung skipped (the dynamic diagnosis)
BROKEN = {
    "chk_lib::no_fake": ("dynamo-fx", "missing-fake", "OPG208"),
    "chk_lib::fill_all": ("dynamo-fx", "undeclared-mutation", "OPG301"),  # its twin: npugraph_ex on list buffers
    "chk_lib::item_fake": ("dynamo-fx", "fake-reads-data", "OPG302"),
    "chk_lib::meta_on_cpu": ("dynamo-fx", "fake-wrong-device", "OPG304"),
    "chk_lib::writes_input": ("dynamo-fx", "undeclared-mutation", "OPG301"),
    "chk_lib::returns_view": ("dynamo-fx", "view-return", "OPG303"),
    "chk_lib::wrong_shape": ("dynamo-fx", "fake-wrong-shape", None),
    "chk_lib::wrong_dtype": ("dynamo-fx", "fake-wrong-dtype", None),
    "chk_lib::aliased_return": ("dynamo-fx", "aliased-return-annotation", "OPG102"),
    "chk_lib::wrong_key": ("eager", "no-kernel-for-device", "OPG204"),
    "chk_lib::grad_mode": ("precision", "compiled-differs-opcheck", None),
    "chk_lib::random": ("npugraph_ex", "random-op", "OPG307"),
    "chk_lib::host_sync": ("ge-cann", "cpu-sync-in-kernel", "OPG307"),
    "chk_lib::scale_": ("npugraph_ex", "npugraph_ex-leftover-copy", "OPG112"),
    "chk_lib::side_effect": ("npugraph_ex", "npugraph_ex-op-eliminated", "OPG104"),
    "chk_cop::returns_input": ("eager", "custom-op-returns-input", "OPG102"),
    "chk_cop::no_fake": ("dynamo-fx", "missing-fake", "OPG208"),
    "chk_cop::undeclared": ("dynamo-fx", "undeclared-mutation", "OPG301"),
    "chk_cop::wrong_shape": ("dynamo-fx", "fake-wrong-shape", None),
    "chk_cop::wrong_dtype": ("dynamo-fx", "fake-wrong-dtype", None),
    "chk_vllm::cache_write": ("dynamo-fx", "undeclared-mutation", "OPG301"),
    "chk_vllm::silu": ("dynamo-fx", "missing-fake", "OPG208"),
    "chk_vllm::flatten": ("dynamo-fx", "view-return", "OPG303"),
    # an exception no row knows, on inputs opgen made up: named as such, asking for --inputs (it may be the inputs)
    "chk_lib::weird": ("eager", "derived-inputs-refused", None),
    "chk_lib::positive": ("npugraph_ex", "npugraph_ex-dynamic-output", None),
    "check_fixtures.defined_twice": ("eager", "op-defined-twice", "OPG205"),
    "check_fixtures.bad_schema": ("eager", "registration-failed", None),
    "chk_lib::strided": ("dynamo-fx", "fake-wrong-metadata", None),
    "chk_lib::any_negative": ("dynamo-fx", "graph-break", None),
    "chk_lib::compiling_branch": ("precision", "compiled-differs", None),
    "chk_lib::float_sync": ("ge-cann", "cpu-sync-in-kernel", "OPG307"),
    "chk_lib::todo_fake": ("dynamo-fx", "fake-not-implemented", "OPG306"),
    "chk_lib::fake_args": ("dynamo-fx", "fake-signature-mismatch", "OPG305"),
    "chk_lib::fake_raises": ("dynamo-fx", "fake-raised", None),
    "chk_lib::plain_only": ("dynamo-fx", "fake-raised", None),
    "chk_lib::composite": ("npugraph_ex", "npugraph_ex-op-decomposed", None),
    "chk_lib::redispatched": ("npugraph_ex", "npugraph_ex-op-decomposed", None),  # by its Autograd kernel
    "chk_vllm::gelu_tanh": ("npugraph_ex", "npugraph_ex-op-decomposed", None),
}
# a module that fails to import -> the op of good_library.py that is its correct twin
MODULE_TWINS = {"check_fixtures.bad_schema": "bad_schema"}
NEEDS_NPUGRAPH_EX = {"chk_lib::host_sync", "chk_lib::float_sync", "chk_lib::scale_", "chk_lib::side_effect", "chk_lib::positive",
                     "chk_lib::composite", "chk_vllm::gelu_tanh", "chk_lib::redispatched"}
BROKEN_MODULES = ("check_fixtures.broken_library", "check_fixtures.broken_custom_op", "check_fixtures.broken_vllm",
                  "check_fixtures.defined_twice", "check_fixtures.bad_schema")
GOOD_MODULES = ("check_fixtures.good_library", "check_fixtures.good_custom_op", "check_fixtures.good_vllm")


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory) -> dict:
    """Environment for `opgen check` with npugraph_ex fetched, or {"npugraph_ex": False} when it cannot be."""
    if loader().unavailable() is None:
        return {}
    wheel = os.environ.get("OPGEN_TORCH_NPU_WHEEL")
    if wheel and Path(wheel).is_file():
        cache = tmp_path_factory.mktemp("cache")
        done = run_opgen_command("npugraph-ex", "fetch", "--wheel", wheel, env={"OPGEN_CACHE_DIR": str(cache)})
        assert done.returncode == 0, done.stderr
        return {"OPGEN_CACHE_DIR": str(cache)}
    if os.environ.get("OPGEN_REQUIRE_NPUGRAPH_EX"):
        pytest.fail("OPGEN_REQUIRE_NPUGRAPH_EX is set but npugraph_ex is not fetched")
    return {"npugraph_ex": "absent"}


def check(*args: str, env: dict | None = None, cwd: Path = FIXTURES, timeout: float = 600, features: bool = False):
    """`opgen check ARGS` on the fixtures; the feature rungs skipped unless `features`."""
    env = {key: value for key, value in (env or {}).items() if key != "npugraph_ex"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(FIXTURES), os.environ.get("PYTHONPATH", "")])
    skips = [] if features or args[:1] == ("--explain",) or "--versions" in args else [
        arg for rung in FEATURES if rung not in args for arg in ("--skip", rung)]
    return run_opgen_command("check", *skips, *args, env=env, cwd=str(cwd), timeout=timeout)


def reports(done) -> dict[str, dict]:
    return {report["op"]: report for report in map(json.loads, done.stdout.splitlines())}


@pytest.mark.slow
@pytest.mark.npugraph_ex  # both states
def test_every_broken_op_is_classified_and_every_twin_passes(cache_env):
    done = check("--json", "--skip", "static", *BROKEN_MODULES, env=cache_env)
    assert done.returncode == 1, done.stderr
    found = reports(done)
    assert set(found) == set(BROKEN)
    for op, (layer, signature, rule) in BROKEN.items():
        if op in NEEDS_NPUGRAPH_EX and cache_env.get("npugraph_ex") == "absent":
            continue
        verdict = found[op]["verdict"]
        assert (verdict["layer"], verdict["signature"], verdict["rule"]) == (layer, signature, rule), (op, verdict)
        assert verdict["causes"] and verdict["next_action"] and verdict["evidence"]
        assert [r["name"] for r in found[op]["rungs"]] == RUNG_NAMES
    if cache_env.get("npugraph_ex") != "absent":
        _assert_explanations_hold_for_the_ops_dispatch_keys(found)
    good = check("--json", *GOOD_MODULES, env=cache_env)
    twins = reports(good)
    assert {op.split("::")[-1] for op in twins} == ({op.split("::")[-1] for op in BROKEN if "::" in op}
                                                     | set(MODULE_TWINS.values()))
    for op, report in twins.items():
        assert report["verdict"] is None, (op, report["verdict"])
        statuses = {r["name"]: r["status"] for r in report["rungs"]}
        expected_npugraph_ex = "skip" if cache_env.get("npugraph_ex") == "absent" else "pass"
        assert statuses == {**dict.fromkeys(RUNG_NAMES, "pass"), "npugraph_ex": expected_npugraph_ex,
                            "fusion": "skip", "capture": expected_npugraph_ex, **FEATURES_SKIPPED}, op  # fusion: projects
        capture = next(r["reason"] for r in report["rungs"] if r["name"] == "capture")
        if cache_env.get("npugraph_ex") == "absent":  # no NPU, no GPU here: capture on CPU needs npugraph_ex too
            assert "capture on CPU needs npugraph_ex" in capture, capture
        else:
            assert "npugraph_ex's AclGraph captured its CPU kernel" in capture and "1 capture and 3 replays" in capture
    assert good.returncode == 0, good.stdout


def _assert_explanations_hold_for_the_ops_dispatch_keys(found: dict) -> None:
    """A cause naming a kernel is printed only for an op that has it: the CompositeImplicitAutograd op is told it is
    inlined, the op an Autograd kernel replaces (no CompositeImplicitAutograd kernel) is told which kernel calls what;
    an op with a Meta kernel is never told it has none. A data-dependent output is said in opgen's words, npugraph_ex's
    own TypeError kept as evidence."""
    composite, redispatched = found["chk_lib::composite"]["verdict"], found["chk_lib::redispatched"]["verdict"]
    assert any("registered at CompositeImplicitAutograd" in cause for cause in composite["causes"])
    assert not any("CompositeImplicitAutograd (" in cause for cause in redispatched["causes"]), redispatched["causes"]
    assert redispatched["causes"][0].startswith("its Autograd kernel (an autograd formula or a wrapper registered "
                                                "there) calls aten.mul.Tensor instead of redispatching to the op")
    npugraph_ex = next(r for r in found["chk_lib::redispatched"]["rungs"] if r["name"] == "npugraph_ex")
    assert npugraph_ex["reason"] == ("chk_lib::redispatched is replaced by aten.mul.Tensor before npugraph_ex sees it: "
                                     "it has no CompositeImplicitAutograd kernel; its Autograd kernel calls "
                                     "aten.mul.Tensor in its place")
    assert any("was never written" in cause for cause in found["chk_lib::no_fake"]["verdict"]["causes"])
    positive = next(r for r in found["chk_lib::positive"]["rungs"] if r["name"] == "npugraph_ex")
    assert positive["reason"].startswith("chk_lib::positive has a data-dependent output size (output 0 [u0]: its fake "
                                         "leaves the size to the input values): npugraph_ex cannot compile it")
    assert "'ValuePack' and 'int'" not in positive["reason"]
    assert "npugraph_ex raised: BackendCompilerFailed: TypeError: '>=' not supported between instances of 'ValuePack'" \
        in found["chk_lib::positive"]["verdict"]["evidence"]


def test_a_cause_naming_a_kernel_is_printed_only_for_an_op_that_has_it_or_lacks_it_as_it_says():
    fake = [cause for cause in BY_ID["missing-fake"].causes if "never written" in str(cause)]
    assert fake and str(fake[0]) in causes_for(BY_ID["missing-fake"], {"CPU"})
    assert str(fake[0]) not in causes_for(BY_ID["missing-fake"], {"CPU", "Meta"})  # it has one: not the cause
    assert str(fake[0]) in causes_for(BY_ID["missing-fake"], None)  # keys unknown (the op never resolved): printed
    inlined = [str(c) for c in BY_ID["compiled-differs"].causes if "CompositeImplicitAutograd" in str(c)]
    assert inlined and not set(inlined) & set(causes_for(BY_ID["compiled-differs"], {"CPU", "Meta"}))
    assert set(inlined) <= set(causes_for(BY_ID["compiled-differs"], {"CompositeImplicitAutograd"}))
    assert "(printed for an op with a CompositeImplicitAutograd kernel)" in explain_signature("compiled-differs")


def _assert_compiled_ops_pass_and_a_stand_in_is_a_skip(found: dict) -> None:
    """torch's own C++ quantization op (check_fixtures/native.py, a fake added as a third party adds one) passes every
    rung: the capture takes it as one launch of the op and replays it whole, as an NPU graph does (recorded launch by
    launch, its outputs stayed the emulation's poison). A CPU kernel standing in for a stub NPU kernel whose host read
    fails capture is a skip naming the line; the same kernel as an op's only kernel fails (zero_rows)."""
    rungs = {r["name"]: r for r in found[NATIVE]["rungs"]}
    assert {name: r["status"] for name, r in rungs.items()} == {**dict.fromkeys(RUNG_NAMES, "pass"), "static": "skip",
                                                                "fusion": "skip", **FEATURES_SKIPPED}, rungs
    assert ("captured its CPU kernel (compiled code; the op has no NPU kernel), as one launch of the op" in
            rungs["capture"]["reason"]), rungs["capture"]["reason"]
    stand_in = {r["name"]: r for r in found[STAND_IN]["rungs"]}
    assert stand_in["capture"]["status"] == "skip" and found[STAND_IN]["verdict"] is None, stand_in
    assert "judged only the op's plumbing, which passed" in stand_in["capture"]["reason"]
    assert "capture.py:58: for row in idx.tolist():" in stand_in["capture"]["reason"]


# check_fixtures/capture.py: op -> (signature, the kernel line its evidence names)
CAPTURE = {
    "chk_cap::value_branch": ("cpu-sync-in-kernel", "capture.py:28: if x.abs().max() > 1:"),
    "chk_cap::validated": ("cpu-sync-in-kernel", "capture.py:44: if (idx >= x.shape[0]).any().item():"),
    "chk_cap::zero_rows": ("cpu-sync-in-kernel", "capture.py:58: for row in idx.tolist():"),
    "chk_cap::round_trip": ("cpu-sync-in-kernel", "capture.py:69: host = x.cpu()"),
    "chk_cap::npu_checked": ("cpu-sync-in-kernel", "capture.py:79: if x.isnan().any():"),  # in the NPU kernel
    "chk_cap::workspace": ("capture-static-output", "capture.py:101: torch.mul(x, 2, out=out)"),
    "chk_cap::rebind": ("capture-recapture", "capture.py:111: cache.set_(torch.cat([cache[1:], x[:1]]))"),
    "chk_cap::scheduled": ("capture-frozen-value", 'capture.py:91: return x * (0.5 ** SCHEDULE["step"])'),
}
# its kernel is no function of its inputs, which opcheck, aot_eager and npugraph_ex's compiler all see first
FROZEN = "chk_cap::scheduled"
NATIVE = "quantization::_FloatToBfloat16Quantized"  # a C++ kernel (check_fixtures/native.py)
STAND_IN = "chk_cap::stub_read"  # a CPU kernel standing in for a stub NPU kernel


@pytest.mark.slow
@pytest.mark.npugraph_ex  # both states
def test_the_capture_rung_classifies_planted_kernels_and_passes_their_twins(cache_env):
    """The capture rung on CPU (npugraph_ex's AclGraph over the emulated NPU graph) classifies each planted kernel of
    check_fixtures/capture.py after every earlier rung passed it: host syncs as "cpu-sync-in-kernel" (layer ge-cann),
    a buffer kept across calls as "capture-static-output", a kernel moving its mutated argument as
    "capture-recapture", and (earlier rungs skipped) a per-call config as "capture-frozen-value", each with the
    kernel's line as evidence. Every twin passes every rung, the capture included."""
    if cache_env.get("npugraph_ex") == "absent":
        pytest.skip("npugraph_ex is not fetched")
    targets = [f"check_fixtures.capture:{op}" for op in [*CAPTURE, STAND_IN]]  # FROZEN's report here: see below
    found = reports(check("--json", "--skip", "static", *targets, f"check_fixtures.native:{NATIVE}", env=cache_env))
    _assert_compiled_ops_pass_and_a_stand_in_is_a_skip(found)
    assert found[FROZEN]["verdict"]["signature"] == "compiled-differs-opcheck"  # why its earlier rungs are skipped
    frozen = reports(check("--json", "--skip", "static", "--skip", "opcheck", "--skip", "aot_eager", "--skip",
                           "npugraph_ex", f"check_fixtures.capture:{FROZEN}", env=cache_env))
    for op, (signature, line) in CAPTURE.items():
        report = {**found, **frozen}[op]
        statuses = {r["name"]: r["status"] for r in report["rungs"]}
        assert statuses["capture"] == "fail" and all(status != "fail" for name, status in statuses.items()
                                                     if name != "capture"), (op, statuses)
        verdict = report["verdict"]
        assert verdict["signature"] == signature, (op, verdict)
        assert verdict["layer"] == BY_ID[signature].layer
        assert f"at check_fixtures/{line}" in verdict["evidence"], (op, verdict["evidence"])
    twins = [f"check_fixtures.capture:ok_cap::{op.split('::')[1]}" for op in CAPTURE]
    good = check("--json", *twins, env=cache_env)
    for op, report in reports(good).items():
        assert report["verdict"] is None, (op, report["verdict"])
        assert {r["name"]: r["status"] for r in report["rungs"]} == {**dict.fromkeys(RUNG_NAMES, "pass"),
                                                                   "fusion": "skip", **FEATURES_SKIPPED}, op
    assert good.returncode == 0


@pytest.mark.slow
@pytest.mark.npugraph_ex  # both states
def test_deeper_rungs_and_keep_going(cache_env):
    """Past opcheck (skipped), the same bugs show where the ladder goes on: the undeclared write lands in
    npugraph_ex's private input copy; the missing fake is a graph break of aot_eager; --keep-going runs
    every rung after a failure, and the verdict stays the first."""
    if cache_env.get("npugraph_ex") == "absent":
        pytest.skip("npugraph_ex is not fetched")
    done = check("--json", "--keep-going", "--skip", "static", "--skip", "opcheck",
                 "check_fixtures.broken_library:chk_lib::writes_input",
                 "check_fixtures.broken_library:chk_lib::no_fake", env=cache_env)
    found = reports(done)
    assert done.returncode == 1
    writes, no_fake = found["chk_lib::writes_input"], found["chk_lib::no_fake"]
    assert writes["verdict"]["signature"] == "npugraph_ex-private-input-copy"
    assert writes["verdict"]["layer"] == "npugraph_ex" and writes["verdict"]["rule"] == "OPG301"
    assert no_fake["verdict"]["signature"] == "missing-fake"
    assert "unsupported operator: chk_lib.no_fake.default" in no_fake["verdict"]["evidence"]
    statuses = {r["name"]: r["status"] for r in no_fake["rungs"]}
    assert statuses["aot_eager"] == "fail" and statuses["npugraph_ex"] == "fail"


@pytest.mark.slow
def test_a_raising_fake_is_the_same_row_at_opcheck_and_under_dynamo():
    """opcheck's test_faketensor hands on the fake's own exception; past it (skipped), Dynamo's fake run wraps
    the same exception ("Dynamo failed to run FX node with fake tensors: ... got E(...)") in Unsupported or
    TorchRuntimeError, and each must still reach its fake row, not graph-break or unclassified."""
    ops = {"chk_lib::todo_fake": "fake-not-implemented", "chk_lib::fake_args": "fake-signature-mismatch",
           "chk_lib::fake_raises": "fake-raised"}
    done = check("--json", "--skip", "static", "--skip", "opcheck", "--skip", "npugraph_ex",
                 *[f"check_fixtures.broken_library:{op}" for op in ops])
    found = reports(done)
    assert done.returncode == 1
    for op, signature in ops.items():
        verdict = found[op]["verdict"]
        assert verdict["signature"] == signature and verdict["layer"] == "dynamo-fx", (op, verdict)
        assert {r["name"]: r["status"] for r in found[op]["rungs"]}["aot_eager"] == "fail"
        assert "when making fake tensor call" in verdict["evidence"] or "with fake tensors" in verdict["evidence"]


@pytest.mark.slow
def test_train_finds_a_missing_backward_and_passes_its_twin(cache_env):
    done = check("--json", "--train", "--skip", "npugraph_ex", "check_fixtures.train", env=cache_env)
    found = reports(done)
    assert done.returncode == 1
    assert found["chk_train::double"]["verdict"]["signature"] == "missing-autograd"
    assert found["ok_train::double"]["verdict"] is None
    plain = reports(check("--json", "--skip", "aot_eager", "--skip", "npugraph_ex",
                          "check_fixtures.train:chk_train::double"))
    assert plain["chk_train::double"]["verdict"] is None  # inference only: no backward needed


def test_static_rung_catches_what_lint_and_the_contract_see():
    skip = [arg for rung in RUNG_NAMES[2:] if rung not in FEATURES for arg in ("--skip", rung)]
    done = check("--json", *skip, *BROKEN_MODULES[:3])
    found = reports(done)
    assert done.returncode == 1
    static = {op: (r["verdict"]["layer"], r["verdict"]["rule"]) for op, r in found.items() if r["verdict"]}
    # OPG308: lint reads `return x` in a custom_op kernel that mutates x (torch refuses it at run time)
    # OPG304: lint reads a Meta-key kernel allocating without device= (on meta inputs it returns a CPU tensor)
    assert static == {"chk_lib::aliased_return": ("static", "OPG102"), "chk_cop::undeclared": ("static", "OPG301"),
                      "chk_vllm::cache_write": ("static", "OPG301"), "chk_cop::returns_input": ("static", "OPG308"),
                      "chk_lib::meta_on_cpu": ("static", "OPG304")}
    assert all(r["status"] == "skip" and r["reason"] == "skipped with --skip"
               for report in found.values() for r in report["rungs"][2:])


@pytest.mark.slow
def test_text_report_has_the_four_parts_and_rung_times():
    done = check("check_fixtures.broken_library:chk_lib::wrong_shape", "--skip", "npugraph_ex")
    assert done.returncode == 1
    out = done.stdout
    for part in ("layer: dynamo-fx - fake-wrong-shape", "evidence:", "likely root causes:", "next minimal action:",
                 "opcheck test: test_faketensor", "versions: torch"):
        assert part in out, out
    assert "\x1b[" not in out  # no colour when stdout is not a terminal
    assert any(line.strip().startswith("opcheck") and "fail" in line and line.split()[2].endswith("s")
               for line in out.splitlines())


@pytest.mark.slow
def test_a_crash_and_a_hang_are_diagnoses_and_the_next_op_still_runs():
    # the rungs after eager skipped too: with npugraph_ex fetched, capture's first compile on a busy machine could
    # take the 4 s that the hang is given
    fast = [arg for rung in ("opcheck", "aot_eager", "npugraph_ex", "fusion", "capture") for arg in ("--skip", rung)]
    done = check("--json", "--timeout", "4", *fast, "check_fixtures.crash")
    found = reports(done)
    assert done.returncode == 1
    crash, fine, hang = found["chk_crash::abort"], found["chk_crash::fine"], found["chk_crash::hang"]
    assert crash["verdict"]["signature"] == "worker-crash" and crash["verdict"]["layer"] == "eager"
    assert "SIGABRT" in crash["rungs"][2]["reason"]
    assert fine["verdict"] is None
    assert hang["verdict"]["signature"] == "worker-timeout" and hang["verdict"]["layer"] == "eager"


def test_the_timeout_clock_starts_once_the_worker_has_started(tmp_path):
    """--timeout bounds what the target's code does, not the worker's start: a start longer than it is no hang, and
    (the twin) a step after the start longer than it is one."""
    from opgen.check.command import _follow

    slow_start, slow_step = worker_started_then(0), worker_started_then(30)  # at once: the waits overlap
    with (tmp_path / "stderr.txt").open("w+") as stderr:
        assert _follow(slow_start, stderr, 1.0, [], []) == {"done": True}
        state = _follow(slow_step, stderr, 1.0, [], [])
    assert state["failure"]["signature"] == "worker-timeout" and "after 1 s" in state["failure"]["reason"], state


@pytest.mark.slow
def test_inputs_file_and_derivation(tmp_path):
    module = tmp_path / "needs_inputs.py"
    module.write_text(
        "import torch\n"
        "@torch.library.custom_op('chk_in::pick', mutates_args=())\n"
        "def pick(x: torch.Tensor, mode: str) -> torch.Tensor:\n"
        "    return x * 2 if mode == 'double' else x.clone()\n"
        "@pick.register_fake\n"
        "def _(x, mode):\n"
        "    return torch.empty_like(x)\n")
    target = "needs_inputs:chk_in::pick"
    skip = ("--skip", "aot_eager", "--skip", "npugraph_ex")
    done = check(target, *skip, cwd=tmp_path)
    assert done.returncode == 2
    assert "no inputs" in done.stderr and "--inputs FILE" in done.stderr and not done.stdout
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("- {x: {shape: [2, 3], dtype: float16}, mode: double}\n")
    done = check(target, *skip, "--inputs", str(inputs), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"pick": [{"x": {"shape": [2], "dtype": "float17"}, "mode": "a"}]}')
    done = check(target, *skip, "--inputs", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and "unknown dtype 'float17'" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("error:") == 1, done.stderr  # one prefix


def test_inputs_as_one_bare_example_for_one_op_and_what_several_ops_need(tmp_path):
    """`--inputs` may be one example (the op's arguments by name) when one op is checked; with several ops, the
    error says that each op's name maps to its list."""
    module = tmp_path / "bare_inputs.py"
    module.write_text(
        "import torch\n"
        "lib = torch.library.Library('chk_bare', 'FRAGMENT')\n"
        "for name in ('a', 'b'):\n"
        "    lib.define(f'{name}(Tensor x, float s) -> Tensor')\n"
        "    lib.impl(name, lambda x, s: x * s, 'CPU')\n"
        "    torch.library.register_fake(f'chk_bare::{name}', lambda x, s: torch.empty_like(x), lib=lib)\n")
    bare = tmp_path / "bare.yaml"
    bare.write_text("x: {shape: [4, 8], dtype: float32}\ns: 2.0\n")
    skip = ("--skip", "static", "--skip", "npugraph_ex", "--json")
    done = check("bare_inputs:chk_bare::a", *skip, "--inputs", str(bare), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["name"]: r["status"] for r in result["rungs"]}["opcheck"] == "pass"
    done = check("bare_inputs", *skip, "--inputs", str(bare), cwd=tmp_path)  # both ops
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "'x' is none of the checked ops" in done.stderr and "map op names (chk_bare::a, chk_bare::b)" in done.stderr
    assert "'x' is an argument: one bare example is only for one checked op" in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    ((), "give at least one TARGET"),
    (("not a target",), "cannot read the target"),
    (("no_such_module_xyz:ns::op",), "cannot import module 'no_such_module_xyz'"),
    (("check_fixtures.good_vllm:ok_vllm::nope",), "no operator 'ok_vllm::nope'"),
    (("--explain", "no-such-signature"), "unknown failure signature"),
])
def test_usage_errors_exit_2_without_traceback(args, message):
    done = check(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr and not done.stdout


def test_explain_prints_a_table_row_and_rule_codes():
    done = check("--explain", "missing-fake")
    assert done.returncode == 0
    assert "layer: dynamo-fx" in done.stdout and "OPG208" in done.stdout and "next action:" in done.stdout
    assert check("--explain", "OPG301").stdout.startswith("OPG301")
    as_json = json.loads(check("--explain", "cpu-sync-in-kernel", "--json").stdout)
    assert as_json["layer"] == "ge-cann" and as_json["rule"] == "OPG307"


def test_explain_and_usage_errors_need_no_torch(tmp_path):
    """The command itself is torch-free: torch runs only in the worker."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch is hidden')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    assert "layer: dynamo-fx" in run_opgen_command("check", "--explain", "missing-fake", env=env).stdout
    done = run_opgen_command("check", "a b", env=env)
    assert done.returncode == 2 and "cannot read the target" in done.stderr
    done = run_opgen_command("check", "some_module:ns::op", env=env)
    assert done.returncode == 2 and "needs torch" in done.stderr


def test_versions():
    done = check("--versions", "--json")
    found = json.loads(done.stdout)
    assert set(found) == {"torch", "torch_npu", "npugraph_ex", "cann", "python", "opgen"}
    assert found["torch"].startswith("2.")


@pytest.mark.slow
def test_a_generated_project_is_a_target_and_npugraph_ex_skips_naming_fetch(tmp_path):
    project = tmp_path / "rms"
    assert opgen("new", str(REPO / "examples" / "rms_norm.yaml"), "-o", str(project)).returncode == 0
    done = check(str(project), "--json", env={"OPGEN_CACHE_DIR": str(tmp_path / "empty-cache")}, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (report,) = reports(done).values()
    assert report["op"] == "myops::rms_norm" and report["verdict"] is None
    rungs = {r["name"]: r for r in report["rungs"]}
    assert rungs["npugraph_ex"]["status"] == "skip"
    assert "run 'opgen npugraph-ex fetch'" in rungs["npugraph_ex"]["reason"]


# --- every row of the failure table is proven ------------------------------------------------------------

# Rows a device or a torch other than this machine's raises: proven on the message as recorded, with its source
RECORDED = json.loads((FIXTURES / "recorded_errors.json").read_text(encoding="utf-8"))
# Rows proven by a test other than the BROKEN sweep -> that test (its source names the row)
PROVEN_ELSEWHERE = {
    "npugraph_ex-private-input-copy": "test_deeper_rungs_and_keep_going",
    "missing-autograd": "test_train_finds_a_missing_backward_and_passes_its_twin",
    "worker-crash": "test_a_crash_and_a_hang_are_diagnoses_and_the_next_op_still_runs",
    "worker-timeout": "test_a_crash_and_a_hang_are_diagnoses_and_the_next_op_still_runs",
    "backend-compile-failed": "test_backend_compile_failed_is_proven_on_torchs_own_exception",
    "npugraph_ex-compile-failed": "test_backend_compile_failed_is_proven_on_torchs_own_exception",
    "capture-frozen-value": "test_the_capture_rung_classifies_planted_kernels_and_passes_their_twins",
    "capture-static-output": "test_the_capture_rung_classifies_planted_kernels_and_passes_their_twins",
    "capture-recapture": "test_the_capture_rung_classifies_planted_kernels_and_passes_their_twins",
    "fusion-not-fired": "test_the_fusion_rung_says_whether_each_pattern_fires_and_names_planted_bugs",
    "fusion-partial": "test_the_fusion_rung_says_whether_each_pattern_fires_and_names_planted_bugs",
    "fusion-wrong-pattern": "test_the_fusion_rung_says_whether_each_pattern_fires_and_names_planted_bugs",
    "fusion-applies-too-widely": "test_the_fusion_rung_says_whether_each_pattern_fires_and_names_planted_bugs",
    # the feature rungs, on planted projects generated there (module.test)
    "stream-misuse": f"{FEATURE_TESTS}.test_opgen_check_runs_the_feature_rungs_and_names_each_planted_bug",
    "compile-cache-op-not-registered": f"{FEATURE_TESTS}.test_opgen_check_runs_the_feature_rungs_and_names_each_planted_bug",
    "compile-cache-stale": f"{FEATURE_TESTS}.test_opgen_check_runs_the_feature_rungs_and_names_each_planted_bug",
    "compile-cache-not-loaded": f"{FEATURE_TESTS}.test_opgen_check_runs_the_feature_rungs_and_names_each_planted_bug",
    "capture-limit": f"{FEATURE_TESTS}.test_opgen_check_runs_the_feature_rungs_and_names_each_planted_bug",
    "fusion-changes-layout": "test_the_fusion_rung_says_whether_each_pattern_fires_and_names_planted_bugs",
    "fake-returns-input": "test_an_undeclared_write_gets_its_schema_line_and_a_fake_returning_an_input_is_blamed",
    "fake-output-count": "test_an_undeclared_write_gets_its_schema_line_and_a_fake_returning_an_input_is_blamed",
    "derived-inputs-refused": "test_inputs_made_up_that_the_op_refuses_are_the_suspect_and_real_ones_pass",
}
# Rows without any proof, and why none can be had here. Keep this empty where possible.
UNPROVEN = {
    "npugraph_ex-no-graph": "named by the worker when npugraph_ex compiles no graph; the rung always calls the op, "
                            "so Dynamo always hands npugraph_ex a graph (even an empty one: a decomposed or "
                            "eliminated op is npugraph_ex-op-eliminated), and the stand-in never falls back",
    "compile-cache-not-saved": "named when npugraph_ex's cache_compile writes no file: it skips the cache when "
                               "Dynamo's code cannot be serialized with marshal or a parameter has no source; the "
                               "rung's module holds no parameter and calls one op, whose code always serializes",
}


def test_every_table_row_has_a_planted_op_or_a_recorded_message():
    """A row added to opgen/check/signatures.py without a planted op (BROKEN, or a test named in
    PROVEN_ELSEWHERE) or a recorded message (fixtures/check/recorded_errors.json) fails here."""
    from opgen.check.signatures import TABLE

    ids = {row.id for row in TABLE}
    planted = {signature for _layer, signature, _rule in BROKEN.values() if signature}
    recorded = {case["signature"] for case in RECORDED}
    for signature, test_name in PROVEN_ELSEWHERE.items():
        module, _, name = test_name.rpartition(".")
        test = getattr(importlib.import_module(module), name) if module else globals()[test_name]
        assert f'"{signature}"' in inspect.getsource(test), (signature, test_name)
    proven = planted | recorded | set(PROVEN_ELSEWHERE)
    assert proven | set(UNPROVEN) <= ids, "proof for a row the table no longer has"
    assert not proven & set(UNPROVEN), "a proven row is still listed as unproven"
    assert ids - proven - set(UNPROVEN) == set(), "rows with neither a planted op nor a recorded message"


@pytest.mark.parametrize("case", RECORDED, ids=[case["signature"] for case in RECORDED])
def test_recorded_messages_match_their_row_and_look_alikes_do_not(case):
    """Proven only on recorded text (the fixture says why and where it was recorded): the message as torch or
    torch_npu/CANN print it is classified to its row, and a look-alike message to another row (or none)."""
    assert case["source"] and case["why_recorded"]
    row = classify(case["rung"], {"type": case["type"], "message": case["message"]})
    assert row is not None and row.id == case["signature"], row
    alike = case["look_alike"]
    assert alike["source"]
    alike_error = {"type": alike["type"], "message": alike["message"]}
    assert not BY_ID[case["signature"]].matches(case["rung"], alike_error)
    other = classify(case["rung"], alike_error)
    assert (other.id if other else None) == alike["expected"]


@pytest.mark.slow
def test_backend_compile_failed_is_proven_on_torchs_own_exception():
    """No planted op reaches "backend-compile-failed": the opcheck rung runs AOTAutograd first (and reports the
    exception inside), and Dynamo's own fake run catches what is left. The row is proven on the exception
    torch.compile raises when its backend fails, as the worker records it; its look-alikes are the same
    complaint raised by the op itself, and the same exception at a rung where no backend runs. At the
    npugraph_ex rung the same exception is npugraph_ex's backend failing: "npugraph_ex-compile-failed"
    (layer npugraph_ex), unless it is the data-dependent size npugraph_ex-dynamic-output knows (chk_lib::positive
    raises that one for real)."""
    script = (
        "import json, torch\n"
        "from opgen.check.worker import _error_info\n"
        "def failing(gm, example_inputs):\n"
        "    raise RuntimeError('the backend complains')\n"
        "try:\n"
        "    torch.compile(lambda x: x + 1, backend=failing, fullgraph=True)(torch.ones(2))\n"
        "except Exception as error:\n"
        "    print(json.dumps(_error_info(error)))\n")
    done = run_python(["-c", script], cwd=REPO, timeout=300)
    error = json.loads(done.stdout)
    assert error["type"] == "torch._dynamo.exc.BackendCompilerFailed", error
    assert classify("aot_eager", error).id == "backend-compile-failed"
    assert classify("aot_eager", {"type": "RuntimeError", "message": "the backend complains"}) is None
    assert classify("eager", error) is None
    assert classify("npugraph_ex", error).id == "npugraph_ex-compile-failed"
    assert BY_ID["npugraph_ex-compile-failed"].layer == "npugraph_ex"
    dynamic = {**error, "message": error["message"].replace(
        "the backend complains", "'>=' not supported between instances of 'ValuePack' and 'int'")}
    assert classify("npugraph_ex", dynamic).id == "npugraph_ex-dynamic-output"


def _fused_project(root: Path, example: str, namespace: str, edit_spec=None, edit_patterns=None) -> Path:
    """An example with `fusion:` generated under its own namespace (one worker imports them all), its spec or its
    generated patterns.py changed by a planted bug."""
    text = (REPO / "examples" / f"{example}.yaml").read_text(encoding="utf-8")
    old = next(line for line in text.splitlines() if line.startswith("namespace: "))
    spec = root / f"{namespace}.yaml"
    spec.write_text((edit_spec or (lambda t: t))(text.replace(old, f"namespace: {namespace}")), encoding="utf-8")
    done = run_opgen_command("new", str(spec), "-o", str(root / namespace))
    assert done.returncode == 0, done.stderr
    if edit_patterns:
        patterns = root / namespace / namespace / "patterns.py"
        before = patterns.read_text(encoding="utf-8")
        after = edit_patterns(before)
        assert after != before
        patterns.write_text(after, encoding="utf-8")
    return root / namespace


@pytest.mark.slow
@pytest.mark.npugraph_ex  # both states
def test_the_fusion_rung_says_whether_each_pattern_fires_and_names_planted_bugs(tmp_path, cache_env):
    """The generated fusions of the fused examples fire on their composites (under npugraph_ex too when it is
    fetched); of rms_norm's two forms, the rung runs each (its Llama form fires, its planted Olmo2 form is named). Planted: patterns.py's search reducing another dim than the model's composite
    ("fusion-not-fired"), an Olmo2-form search covering all but the final cast ("fusion-partial"), a spec pattern
    doubling gamma ("fusion-wrong-pattern"), kv_cache_update without its `when:` (int32 slots, which the kernel
    refuses: "fusion-applies-too-widely") and rotary's output declared contiguous where the composite keeps the
    layout of a transposed q ("fusion-changes-layout")."""
    other_dim = (
        "def _add_rms_norm_llama_search(x1, x2, gamma, epsilon):\n"
        "    x = x1 + x2\n"
        "    hidden_states = x.to(torch.float32)\n"
        "    rstd = torch.rsqrt(hidden_states.pow(2).mean(1, keepdim=True) + epsilon)\n"
        "    return gamma * (hidden_states * rstd).to(x.dtype), rstd, x\n\n\n"
        "def _add_rms_norm_llama_replacement(")
    partial = (
        "def _rms_norm_olmo2_search(x, gamma, epsilon):\n"
        "    hidden_states = x.to(torch.float32)\n"
        "    rstd = torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + epsilon)\n"
        "    return gamma * (hidden_states * rstd), rstd\n\n\n"
        "def _rms_norm_olmo2_replacement(x, gamma, epsilon):\n"
        "    y, rstd = torch.ops.fz_partial.rms_norm.default(x, gamma, epsilon)\n"
        "    return y.float(), rstd\n\n\n"
        "# The dtypes")
    projects = {
        "fz_good": _fused_project(tmp_path, "add_rms_norm", "fz_good"),
        "fz_cache": _fused_project(tmp_path, "kv_cache_update", "fz_cache"),
        "fz_dim": _fused_project(tmp_path, "add_rms_norm", "fz_dim", edit_patterns=lambda t: re.sub(
            r"def _add_rms_norm_llama_search\(.*?def _add_rms_norm_llama_replacement\(", lambda _: other_dim, t, flags=re.DOTALL)),
        "fz_partial": _fused_project(tmp_path, "rms_norm", "fz_partial", edit_patterns=lambda t: re.sub(
            r"def _rms_norm_olmo2_search\(.*?# The dtypes(?= of the floating inputs in each trace of "
            r"ops\[0\]\.fusion\.forms\[1\])", lambda _: partial, t, flags=re.DOTALL)),
        "fz_wrong": _fused_project(tmp_path, "add_rms_norm", "fz_wrong", edit_spec=lambda t: t.replace(
            "return gamma * hidden_states.to(input_dtype), rstd, x",
            "return 2 * gamma * hidden_states.to(input_dtype), rstd, x")),
        "fz_wide": _fused_project(tmp_path, "kv_cache_update", "fz_wide", edit_spec=lambda t: t.replace(
            '      when: ["slot_mapping.dtype == int64"]', "")),
        "fz_layout": _fused_project(tmp_path, "rotary", "fz_layout", edit_spec=lambda t: t.replace(
            "      out0: {like: x}", '      out0: {shape: "x.shape", dtype: x}')),
    }
    done = check("--json", "--skip", "static", *map(str, projects.values()), env=cache_env, timeout=900)
    found = {op.split("::")[0]: report for op, report in reports(done).items()}
    assert set(found) == set(projects), done.stderr[-3000:]
    fusion = {name: next(r for r in report["rungs"] if r["name"] == "fusion") for name, report in found.items()}
    routes = "npugraph_ex and inductor" if cache_env.get("npugraph_ex") != "absent" else "inductor"
    for name in ("fz_good", "fz_cache"):
        assert found[name]["verdict"] is None, found[name]["verdict"]
        assert fusion[name]["reason"].startswith("ops[0].fusion ") and (
            f"fires on its composite under {routes}" in fusion[name]["reason"])
    planted = {"fz_dim": ("performance", "fusion-not-fired", "ops[0].fusion.forms[0] in opgen.yaml did not fire under"),
               "fz_partial": ("performance", "fusion-partial", "ops[0].fusion.forms[1] under"),
               "fz_layout": ("precision", "fusion-changes-layout", ("ops[0].fusion.forms[0] would replace its composite "
                             "by fz_layout::rotary on ops[0].examples[0]")),
               "fz_wrong": ("precision", "fusion-wrong-pattern", ("ops[0].fusion.forms[0] in opgen.yaml: its composite is not "
                            "what fz_wrong::add_rms_norm computes")),
               "fz_wide": ("precision", "fusion-applies-too-widely", ("which the CPU kernel of fz_wide.kv_cache_update."
                           "default refuses (RuntimeError: index_copy_(): Expected a long tensor"))}
    for name, (layer, signature, text) in planted.items():
        verdict = found[name]["verdict"]
        assert (verdict["layer"], verdict["signature"]) == (layer, signature), (name, verdict)
        assert fusion[name]["status"] == "fail" and text in verdict["evidence"], (name, verdict["evidence"])
    assert done.returncode == 1


UP_TO_OPCHECK = [arg for rung in ("static", "aot_eager", "npugraph_ex", "fusion", "capture") for arg in ("--skip", rung)]
# broken_writes.py op -> (signature, the next action's key text)
WRITES = {
    "chk_wr::fill_cache": ("undeclared-mutation", ("`fill_cache(Tensor key, Tensor(a!) key_cache, Tensor(b!) "
                                                   "value_cache) -> ()`")),
    "chk_wr::scale": ("undeclared-mutation", "`scale(Tensor(a!) x, float s) -> ()`"),  # torch says "aliasing"
    "chk_wr::fake_alias": ("fake-returns-input", "fix the fake, not the kernel"),
    "chk_wr::optional_out": ("fake-output-count", "return None from the fake exactly where the kernel does"),
}


def test_an_undeclared_write_gets_its_schema_line_and_a_fake_returning_an_input_is_blamed():
    """A kernel writing arguments it does not declare (returning one of them or not) is told the schema line that
    declares them, which its twin in good_writes.py uses and passes with; a fake returning its input is the fake's
    fault ("fake-returns-input"), not the kernel's ("view-return"); a `Tensor?` return the fake leaves None where the
    kernel returns a tensor is the fake's ("fake-output-count"), and its twin, deciding it as the kernel does, passes
    (torch takes `Tensor?` returns: Library.define, opcheck and Dynamo)."""
    # the planted ops and their twins in one run (one worker): each op's report is its own
    done = check("--json", *UP_TO_OPCHECK, "check_fixtures.broken_writes", "check_fixtures.broken_custom_op:"
                 "chk_cop::undeclared", "check_fixtures.good_writes")
    assert done.returncode == 1, done.stderr
    found = reports(done)
    for op, (signature, action) in WRITES.items():
        verdict = found[op]["verdict"]
        assert (verdict["signature"], verdict["layer"]) == (signature, "dynamo-fx"), (op, verdict)
        assert action in verdict["next_action"] and ".clone()" not in verdict["next_action"], (op, verdict)
    assert "mutates_args=['y']" in found["chk_cop::undeclared"]["verdict"]["next_action"]  # a custom_op
    twins = {op: report for op, report in found.items() if op.startswith("ok_wr::")}
    assert {op.split("::")[1] for op in twins} == {op.split("::")[1] for op in WRITES}
    assert all(report["verdict"] is None for report in twins.values()), twins


def test_a_module_target_checks_its_own_ops_skips_what_it_cannot_run_and_shares_an_inputs_file(tmp_path):
    """`opgen check MODULE` on a package that imports torch.distributed.tensor (torch registers `_dtensor::...`
    during the import) and defines its ops through a helper outside it: its own two ops are checked, torch's are
    left out (listed with -v); the op with a ScalarType argument is skipped with the reason while the other runs,
    and runs once --inputs gives its arguments, from a file that another target of the run shares and whose key for
    no checked op is left out."""
    skip = [*UP_TO_OPCHECK[2:], "--skip", "static"]  # static too: only what the inputs change is looked at
    # a fresh worker, as users get: a warm fork has imported torch.distributed.tensor before the package does
    fresh = {forked_python.FRESH: "1"}
    done = check("--json", "-v", *skip, "check_fixtures.inference_pkg", env=fresh)
    assert done.returncode == 0, done.stdout + done.stderr
    found = reports(done)
    assert set(found) == {"chk_pkg::rms", "chk_pkg::cast"}
    status = {op: {r["name"]: (r["status"], r["reason"]) for r in report["rungs"]} for op, report in found.items()}
    assert status["chk_pkg::rms"]["opcheck"][0] == "pass"
    assert status["chk_pkg::cast"]["eager"][0] == "skip" and "dtype: ScalarType" in status["chk_pkg::cast"]["eager"][1]
    assert "inference_pkg/layers.py" in status["chk_pkg::rms"]["import"][1]  # the file that defined it
    assert "_dtensor::mesh_get_process_group" in done.stderr and "left out" in done.stderr
    text = check(*skip, "check_fixtures.inference_pkg")
    assert "(1 not run: no inputs" in text.stdout and "_dtensor" not in text.stdout + text.stderr  # -v only
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("chk_pkg::cast:\n  - {x: {shape: [2, 3], dtype: float32}, dtype: float16}\n"
                      "other_pkg::thing:\n  - {y: {shape: [2], dtype: float32}}\n")
    # two targets in one run (one worker) share the file; the key naming none of their ops is left out
    done = check("--json", "-v", *skip, "--inputs", str(inputs), "check_fixtures.inference_pkg",
                 "check_fixtures.good_writes:ok_wr::scale")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no checked op named" in done.stderr and "other_pkg::thing: left out" in done.stderr
    assert set(reports(done)) == {"chk_pkg::rms", "chk_pkg::cast", "ok_wr::scale"}
    for report in reports(done).values():
        assert all(r["status"] == "pass" for r in report["rungs"] if r["name"] in ("eager", "opcheck")), report
    # an op named by its target still stops with exit code 2 when nothing can be made up for it
    done = check(*skip, "check_fixtures.inference_pkg:chk_pkg::cast")
    assert done.returncode == 2 and "no inputs" in done.stderr and "--inputs FILE" in done.stderr


INT8_INPUTS = """\
chk_in::int8_rows:
  - {A: {shape: [4, 8], dtype: int8}}
chk_in::int8_rows.out:
  - {A: {shape: [4, 8], dtype: int8}, out: {shape: [4], dtype: int32}}
"""


def test_inputs_made_up_that_the_op_refuses_are_the_suspect_and_real_ones_pass(tmp_path):
    """Found on bitsandbytes 0.50.2 (issue 38): its int8 ops raise their own ValueError on the float32 tensors opgen
    makes up from a schema, which was an unclassified failure blaming the op; now it is "derived-inputs-refused",
    naming the made-up inputs and asking for --inputs. Its `.out` overloads declare `Tensor! out`, which torch prints
    `Tensor($0! -> ) out`: opgen could not parse that, so the static rung and the inputs were skipped with the
    garbled schema; now both run. The twin: the same ops with int8 inputs pass, from a file whose key
    `chk_in::int8_rows` named the `.out` overload too (which then lacked its `out`): a key names the op it names."""
    past_opcheck = [arg for rung in ("aot_eager", "npugraph_ex", "fusion", "capture") for arg in ("--skip", rung)]
    done = check("--json", *past_opcheck, "check_fixtures.typed_inputs")
    assert done.returncode == 1, done.stderr
    found = reports(done)
    for op in ("chk_in::int8_rows", "chk_in::int8_rows.out"):
        verdict, rungs = found[op]["verdict"], {r["name"]: r for r in found[op]["rungs"]}
        assert (verdict["signature"], verdict["layer"]) == ("derived-inputs-refused", "eager"), (op, verdict)
        assert "A must be int8" in verdict["evidence"] and "A: float32[" in verdict["evidence"], verdict
        assert "--inputs FILE" in verdict["next_action"]
        assert rungs["static"]["status"] == "pass" and "$0" not in json.dumps(found[op]), found[op]
    inputs = tmp_path / "int8.yaml"
    inputs.write_text(INT8_INPUTS, encoding="utf-8")
    twins = check("--json", *past_opcheck, "--inputs", str(inputs), "check_fixtures.typed_inputs")
    assert twins.returncode == 0, twins.stdout + twins.stderr
