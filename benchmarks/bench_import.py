"""`opgen import` on real packages: the share of ops whose semantics are derived, the share whose generated tests
(adopt mode) run, and the defects found.

Packages (their code is downloaded into the benchmark cache, never committed):
  vllm_ascend  vllm-ascend 0.23.0's Python (`bench_lint_corpus.tree_of`: the .py files of its wheel); torch_npu, vllm
               and its NPU stack are stubbed (benchmarks/import_stubs/sitecustomize.py, with vLLM's real
               `direct_register_custom_op`), so its ops register on CPU with their fakes; kernels are NPU-only.
  bitsandbytes bitsandbytes 0.50.2's wheel, installed with --no-deps into the cache: CPU kernels and fakes.

Per package: `opgen import` (timed; baseline `python -c "import torch"` in the same run), then `opgen new` of the
spec in adopt mode and its registration, graph-entry, semantics and opcheck tests. An op's tests "run" when at least
one of them passed or failed (not skipped, not an error at collection, not "Could not run" on CPU tensors: an
NPU-only kernel). Defects: import-time lines blaming the fake
(`likelier: fake bug`, a fake returning its input, a fake raising where the kernel runs) and generated tests failing.

    python benchmarks/bench_import.py [--offline]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from bench_lint_corpus import Offline, tree_of
from tools import BENCH_CACHE, cached_wheel

ROOT = Path(__file__).resolve().parents[1]
STUBS = ROOT / "benchmarks" / "import_stubs"
VLLM_ASCEND_STUBS = "torch_npu,vllm,triton,msprobe,mooncake,torchair,acl,transformers,regex"
SELECT = "is_registered or enters_graph or follows_the_semantics or opcheck"


def vllm_ascend(offline: bool, shim: Path) -> tuple[str, dict]:
    tree = tree_of("vllm_ascend", "vllm-ascend==0.23.0", offline)
    (shim / "vllm_ascend_ops.py").write_text("import vllm_ascend.ops  # noqa: F401\n", encoding="utf-8")
    env = {"PYTHONPATH": os.pathsep.join([str(STUBS), str(shim), str(tree)]), "OPGEN_BENCH_STUBS": VLLM_ASCEND_STUBS,
           "OPGEN_BENCH_VERSION_VLLM": "0.23.0"}
    return "vllm_ascend.ops", env


def bitsandbytes(offline: bool, _shim: Path) -> tuple[str, dict]:
    site = BENCH_CACHE / "site" / "bitsandbytes-0.50.2"
    if not (site / "bitsandbytes").is_dir():
        wheel, reason = cached_wheel("bitsandbytes==0.50.2", offline=offline)
        if wheel is None:
            raise Offline(reason)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       check=True, capture_output=True)
    return "bitsandbytes", {"PYTHONPATH": str(site)}


PACKAGES = {"vllm_ascend": vllm_ascend, "bitsandbytes": bitsandbytes}


def measure(name: str, module: str, env: dict, tmp: Path) -> dict:
    full_env = {**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "opgen", "import", module, "-o", str(tmp / "spec")], env=full_env,
                          capture_output=True, text=True, check=False, timeout=1800)
    seconds = time.perf_counter() - start
    if done.returncode == 2:
        raise RuntimeError(done.stderr)
    spec_path = next((tmp / "spec").glob("*.yaml"))
    from opgen.spec.load import load_spec

    text = spec_path.read_text(encoding="utf-8")
    if "\nadopt:" not in text:  # a dotted module: a shim module of one name imports it
        text = text.replace("\nstyle:", f"\nadopt: {module.replace('.', '_')}\nstyle:", 1)
        spec_path.write_text(text, encoding="utf-8")
    spec = load_spec(str(spec_path))
    left_out = len(re.findall(r"^error: .*left out", done.stderr, re.MULTILINE))
    found = len(spec.ops) + left_out
    derived = sum(1 for op in spec.ops if not op.missing_semantics)
    blamed = {line.split(": ")[1] if line.count(": ") > 1 else line for line in done.stderr.splitlines()
              if "likelier: fake bug" in line or "returns an input tensor itself" in line
              or "the fake raises" in line}
    ran, failed = run_tests(spec_path, tmp / "project", full_env)
    return {"package": name, "ops": found, "derived": derived, "left_out": left_out, "tests_ran": len(ran),
            "failed_tests": failed, "fake_defects": len(blamed), "seconds": seconds}


def run_tests(spec_path: Path, project: Path, env: dict) -> tuple[set, int]:
    made = subprocess.run([sys.executable, "-m", "opgen", "new", str(spec_path), "-o", str(project)], env=env,
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        print(made.stderr, file=sys.stderr)
        return set(), 0
    junit = project / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", str(project / "tests"), "-q", "-p", "no:cacheprovider", "-k",
                    SELECT, f"--junitxml={junit}"], env=env, cwd=project, capture_output=True, text=True, check=False,
                   timeout=3600)
    ran, failed = set(), 0
    if not junit.is_file():
        return ran, failed
    for case in ET.parse(junit).iter("testcase"):
        outcome = "skipped" if case.find("skipped") is not None else "error" if case.find("error") is not None \
            else "failed" if case.find("failure") is not None else "passed"
        op = re.sub(r"_(is_registered|enters_graph.*|kernel_follows.*|fake_follows.*|opcheck)$", "", case.get("name"))
        message = (case.find("failure").get("message") or "") if outcome == "failed" else ""
        if "Could not run" in message:  # no kernel for CPU tensors (an NPU-only kernel): the test could not run it
            continue
        if outcome in ("passed", "failed"):
            ran.add(op.removeprefix("test_"))
        failed += outcome == "failed"
    return ran, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="use the benchmark cache only")
    parser.add_argument("--package", choices=sorted(PACKAGES), action="append", help="only this package (repeatable)")
    args = parser.parse_args(argv)
    floor_start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
    floor = time.perf_counter() - floor_start
    status = 0
    for name in args.package or sorted(PACKAGES):
        with tempfile.TemporaryDirectory(prefix=f"opgen-bench-import-{name}-") as tmp:
            try:
                module, env = PACKAGES[name](args.offline, Path(tmp))
                row = measure(name, module, env, Path(tmp))
            except Offline as offline:
                print(f"{name}: skipped ({offline})")
                continue
            except (RuntimeError, StopIteration) as error:
                print(f"{name}: opgen import failed: {str(error)[-500:]}")
                status = 1
                continue
        ops = row["ops"] or 1
        print(f"{name}: {row['ops']} ops, semantics derived for {row['derived']} ({row['derived'] / ops:.0%}), "
              f"generated tests run for {row['tests_ran']} ({row['tests_ran'] / ops:.0%}), {row['left_out']} left out; "
              f"defects: {row['fake_defects']} fakes blamed at import, {row['failed_tests']} generated tests failing; "
              f"import {row['seconds']:.1f} s (baseline import torch {floor:.1f} s, {row['seconds'] / floor:.1f}x)")
    return status


if __name__ == "__main__":
    sys.exit(main())
