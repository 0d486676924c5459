"""opgen lint on the registration code of public packages: precision per rule, and speed next to ruff.

The corpus is the Python files of pinned releases of packages that register custom ops. Wheels (or
sdists) are downloaded with `pip download --no-deps` into a cache outside the repository
(OPGEN_BENCH_CACHE, default ~/.cache/opgen-bench); only their .py files are extracted; torch is read
from its installed site-packages directory. Nothing from them is committed.

benchmarks/lint_verdicts.yaml classifies every finding: key `package/path:line:code`, value
`{verdict: true|false|debatable, reason: ...}`. Precision counts only `true` as a hit (debatable and
false both count against it). A finding with no verdict, a crash, a classified *true* finding opgen
no longer emits (a lost catch), or a run over all packages together whose findings are not exactly the
union of each package's alone fails the run.

    python benchmarks/bench_lint_corpus.py [--offline] [--only PKG] [--runs 3] [--dump]

--dump prints the unclassified findings as YAML stubs to paste into the verdict file.
Exit 0 on success, 1 on a failure above, 0 with a "skipped" line when the corpus cannot be fetched.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

from tools import BENCH_CACHE, cached_wheel, torch_npu_wheel

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = Path(os.environ.get("OPGEN_BENCH_VERDICTS", ROOT / "benchmarks" / "lint_verdicts.yaml"))
CACHE = BENCH_CACHE

# (name, pip requirement or None). Chosen for custom-op registration code. vllm's wheel is 336 MB
# (3,200 .py files, 48 MB of them); vllm-ascend 0.23.0 is the last release with a cp311 x86_64 wheel
# (0.23.0.post1 is an sdist that needs a build).
PACKAGES = (
    ("torch", None),  # the installed torch 2.13.0
    ("torch_npu", None),  # $OPGEN_TORCH_NPU_WHEEL, else torch-npu 2.13.0 downloaded once
    ("sglang", "sglang==0.5.23"),
    ("torchao", "torchao==0.18.0"),
    ("xformers", "xformers==0.0.35"),
    ("flashinfer", "flashinfer-python==0.7.4"),
    ("bitsandbytes", "bitsandbytes==0.50.2"),
    ("liger_kernel", "liger-kernel==0.8.5"),
    ("unsloth", "unsloth==2026.10.9"),
    ("deepspeed", "deepspeed==0.19.8"),
    ("vllm", "vllm==0.33.0"),  # the newest release (checked with `pip index versions vllm`)
    ("vllm_ascend", "vllm-ascend==0.23.0"),
    # Added for issue 22: code the rules were never tuned on (an edge-runtime exporter, a recommender
    # library and its kernels, a mixed-precision training library, XLA/TPU and TensorRT bridges, kernel
    # and quantization collections, domain libraries whose ops are defined in C++ with Python fakes).
    ("executorch", "executorch==1.5.1"),
    ("torchrec", "torchrec==1.9.2"),
    ("fbgemm_gpu", "fbgemm-gpu-cpu==1.9.0"),
    ("transformer_engine", "transformer-engine==2.20.2"),
    ("torch_xla", "torch-xla==2.9.0"),
    ("torch_tensorrt", "torch-tensorrt==2.14.0"),
    ("optimum_quanto", "optimum-quanto==0.2.7"),
    ("torchvision", "torchvision==0.29.1"),
    ("torchcodec", "torchcodec==0.17.0"),
    ("gemlite", "gemlite==0.6.0.post2"),
    ("hqq", "hqq==0.2.8.post1"),
    ("fla", "fla-core==0.6.0"),
    # Added for issue 28: registration code in forms the rules had not read (API aliases, the call form of
    # custom_op, tags=, host handles passed between ops): a diffusion library, a training platform, kernel
    # collections, a PyTorch compiler, and two CUDA-kernel packages (sdists: only their .py files are read)
    ("diffusers", "diffusers==0.42.1"),
    ("torchtitan", "torchtitan==0.3.0"),
    ("quack", "quack-kernels==0.6.5"),
    ("thunder", "lightning-thunder==0.2.6"),
    ("flash_attn", "flash-attn==2.8.3.post2"),
    ("causal_conv1d", "causal-conv1d==1.7.0"),
    # Added for issue 36: the older registration APIs torch 2.13 still runs (torch._custom_op.impl.custom_op with
    # .impl() / .impl_abstract(), torch._custom_ops through a wrapper): an Ascend inference extension
    ("dlinfer", "dlinfer-ascend==0.2.7"),
)
# Wheels published for one platform only, fetched as that platform's binary (only their .py files are read)
PLATFORM_WHEELS = {"dlinfer-ascend==0.2.7": ("manylinux2014_aarch64", "3.10")}
# Downloading an sdist makes pip read its metadata: with the installed torch (no isolated build env, which
# would fetch a CUDA torch) and without compiling the CUDA extensions.
SDIST_ENV = {"PIP_NO_BUILD_ISOLATION": "0", "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE",
             "CAUSAL_CONV1D_SKIP_CUDA_BUILD": "TRUE"}
SOURCES = (".py", ".yaml", ".yml")  # what is extracted: the Python code and the op YAML files
EXTRACTED = ".opgen-extracted-v2"  # marks a tree extracted with SOURCES (older trees held .py only)
TORCH_VERSION = "2.13.0"
PRECISION_TARGET, RULE_TARGET, SPEED_TARGET = 0.90, 0.80, 0.5  # speed: issue 36's goal, ruff E9's time


class Offline(Exception):
    pass


def _extract(archive: Path, tree: Path) -> None:
    """Only the .py files, into `tree` (written to a temporary name first: an interrupted run leaves none)."""
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.endswith(SOURCES) and ".." not in name.split("/"):
                    target = partial / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
    else:
        with tarfile.open(archive) as t:
            for member in t.getmembers():
                if member.isfile() and member.name.endswith(SOURCES) and ".." not in member.name.split("/"):
                    target = partial / member.name.split("/", 1)[-1]  # drop the sdist's top directory
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(t.extractfile(member).read())
    partial.mkdir(parents=True, exist_ok=True)
    (partial / EXTRACTED).write_text("")
    partial.rename(tree)


def tree_of(name: str, requirement: str | None, offline: bool) -> Path:
    if name == "torch":
        import torch

        if not torch.__version__.startswith(TORCH_VERSION):
            raise Offline(f"torch {torch.__version__} installed, the verdicts are for {TORCH_VERSION}")
        return Path(importlib.util.find_spec("torch").origin).parent
    tree = CACHE / "trees" / (requirement.replace("==", "-") if requirement else name)
    if tree.is_dir() and (tree / EXTRACTED).is_file():
        return tree
    shutil.rmtree(tree, ignore_errors=True)  # extracted by an older version of this script
    if requirement in PLATFORM_WHEELS and not offline:
        _platform_wheel(requirement, *PLATFORM_WHEELS[requirement])
    if name == "torch_npu":
        archive, reason = torch_npu_wheel(offline=offline)
    else:
        archive, reason = cached_wheel(requirement, offline=offline)
    if archive is None:
        raise Offline(reason)
    tree.parent.mkdir(parents=True, exist_ok=True)
    _extract(archive, tree)
    return tree


def _platform_wheel(requirement: str, platform: str, python: str) -> None:
    """Download `requirement`'s wheel for another platform into the cache `cached_wheel` reads (once)."""
    wheels = CACHE / "wheels"
    name, version = requirement.split("==")
    if any(p.name.lower().startswith(f"{name.replace('-', '_')}_{version}") for p in wheels.glob("*")):
        return
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--only-binary=:all:", "--platform",
                    platform, "--python-version", python, requirement, "-d", str(wheels)],
                   capture_output=True, text=True, check=False, timeout=600)


def python_files(tree: Path) -> int:
    return sum(1 for p in tree.rglob("*.py") if "__pycache__" not in p.parts)


def opgen_command(*paths: str, cache: bool = False) -> list[str]:
    # -P: a tree may be the working directory, and must not shadow the standard library (torch/types.py)
    return [sys.executable, "-P", "-m", "opgen", "lint", "--exit-zero", "--output-format", "json",
            *([] if cache else ["--no-cache"]), *paths]


def run_opgen(tree: Path) -> tuple[list[dict], list[str], float]:
    """One package, linted as its own project (what a user runs): the findings."""
    start = time.perf_counter()
    done = subprocess.run(opgen_command("."), cwd=tree, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.perf_counter() - start
    crashes = [line for line in done.stderr.splitlines() if line.startswith("error:") or "Traceback" in line]
    if done.returncode not in (0, 1) and not crashes:
        crashes.append(f"exit {done.returncode}: {done.stderr.strip()[-500:]}")
    try:
        findings = json.loads(done.stdout or "[]")
    except json.JSONDecodeError:
        findings = []
        crashes.append(f"unreadable output: {done.stdout[:200]!r}")
    return findings, crashes, elapsed


def run_together(trees: dict[str, Path]) -> set[str]:
    """Every package in one run (a monorepo, or a pre-commit run over several): the keys of its findings,
    which must be exactly the union of the packages' findings alone (rule state is per op, never per run)."""
    done = subprocess.run(opgen_command(*(str(t) for t in trees.values())), cwd=CACHE, capture_output=True,
                          text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    keys = set()
    for finding in json.loads(done.stdout or "[]"):
        path = (CACHE / finding["filename"]).resolve()
        for name, tree in trees.items():
            if path.is_relative_to(tree.resolve()):
                keys.add(f"{name}/{path.relative_to(tree.resolve()).as_posix()}:{finding['location']['row']}:"
                         f"{finding['code']}")
    return keys


def ruff_command() -> list[str]:
    near = Path(sys.executable).with_name("ruff")
    return [str(near)] if near.is_file() else [sys.executable, "-m", "ruff"]


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=CACHE, capture_output=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def speed(trees: list[Path], runs: int) -> dict[str, float]:
    """Median wall time of one run of each tool over all trees together (one process each), interleaved so that
    a change in machine load hits both alike: opgen lint without its cache next to ruff without its cache
    (`cold`), and each reusing its cache from an untimed first run (`warm`; opgen's in a scratch
    OPGEN_CACHE_DIR). opgen's modules are compiled first, as an installed opgen's are (a PYTHONDONTWRITEBYTECODE
    environment would otherwise compile them in every timed run)."""
    import compileall
    import tempfile

    compileall.compile_dir(str(ROOT / "opgen"), quiet=1)
    paths = [str(t) for t in trees]
    ruff = [*ruff_command(), "check", "--exit-zero", "-q", "--select", "E9", "--isolated"]
    commands = {"opgen_cold": opgen_command(*paths), "ruff_cold": [*ruff, "--no-cache", *paths],
                "opgen_warm": opgen_command(*paths, cache=True), "ruff_warm": [*ruff, *paths]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["OPGEN_CACHE_DIR"] = scratch
        try:
            timed(commands["opgen_warm"])
            timed(commands["ruff_warm"])
            for _ in range(runs):
                for name, command in commands.items():
                    times[name].append(timed(command))
        finally:
            del os.environ["OPGEN_CACHE_DIR"]
    return {name: statistics.median(values) for name, values in times.items()}


def load_verdicts() -> dict[str, dict]:
    import yaml

    data = yaml.safe_load(VERDICTS.read_text(encoding="utf-8")) if VERDICTS.is_file() else None
    return data or {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="use only what is in the cache")
    parser.add_argument("--only", action="append", default=[], metavar="PKG")
    parser.add_argument("--runs", type=int, default=3, help="timed runs over all trees (median)")
    parser.add_argument("--dump", action="store_true", help="print unclassified findings as verdict stubs")
    args = parser.parse_args(argv)
    for key, value in SDIST_ENV.items():
        os.environ.setdefault(key, value)

    trees: dict[str, Path] = {}
    for name, requirement in PACKAGES:
        if args.only and name not in args.only:
            continue
        try:
            trees[name] = tree_of(name, requirement, args.offline)
        except (Offline, OSError, subprocess.TimeoutExpired) as error:
            print(f"skipped: corpus unavailable ({name}: {error})")
            return 0

    verdicts = load_verdicts()
    emitted: dict[str, dict] = {}
    crashes: list[str] = []
    files = 0
    for name, tree in trees.items():
        count = python_files(tree)
        files += count
        findings, crashed, elapsed = run_opgen(tree)
        crashes += [f"{name}: {c}" for c in crashed]
        for finding in findings:
            key = f"{name}/{finding['filename'].removeprefix('./')}:{finding['location']['row']}:{finding['code']}"
            emitted[key] = finding
        print(f"{name:14} {count:6} files, {len(findings):3} findings ({elapsed:.2f} s)")
    together = run_together(trees)
    not_union = sorted(together ^ set(emitted))
    times = speed(list(trees.values()), args.runs)

    per_rule: dict[str, Counter] = defaultdict(Counter)
    unclassified = []
    for key, finding in sorted(emitted.items()):
        verdict = verdicts.get(key, {}).get("verdict")
        if verdict not in ("true", "false", "debatable"):
            unclassified.append((key, finding))
            verdict = "unclassified"
        per_rule[finding["code"]][verdict] += 1
    in_scope = {k for k in verdicts if k.split("/", 1)[0] in trees}
    lost = sorted(k for k in in_scope if k not in emitted and verdicts[k].get("verdict") == "true")

    print(f"\n{'rule':8} {'findings':>8} {'true':>5} {'debat.':>6} {'false':>5} {'precision':>9}")
    low_rules = []
    for code in sorted(per_rule):
        c = per_rule[code]
        total = sum(c.values())
        precision = c["true"] / total
        if precision < RULE_TARGET:
            low_rules.append(code)
        print(f"{code:8} {total:8} {c['true']:5} {c['debatable']:6} {c['false']:5} {precision:9.0%}"
              + (f"  ({c['unclassified']} unclassified)" if c["unclassified"] else ""))
    total = sum(sum(c.values()) for c in per_rule.values())
    true = sum(c["true"] for c in per_rule.values())
    overall = true / total if total else 1.0
    print(f"{'all':8} {total:8} {true:5} {sum(c['debatable'] for c in per_rule.values()):6} "
          f"{sum(c['false'] for c in per_rule.values()):5} {overall:9.0%}")
    print(f"precision: {overall:.0%} (target >= {PRECISION_TARGET:.0%}: "
          f"{'met' if overall >= PRECISION_TARGET else 'MISSED'}); rules below {RULE_TARGET:.0%}: "
          f"{', '.join(low_rules) or 'none'}")
    for run in ("cold", "warm"):
        opgen_s, ruff_s = times[f"opgen_{run}"], times[f"ruff_{run}"]
        ratio = opgen_s / ruff_s if ruff_s else float("inf")
        print(f"opgen lint ({run}): {files / opgen_s:.0f} files/s over {files} files, {opgen_s:.2f} s (baseline: "
              f"ruff check --select E9 ({run}) {ruff_s:.2f} s, {files / ruff_s:.0f} files/s, ratio {ratio:.2f}x, "
              f"target <= {SPEED_TARGET}x: {'met' if ratio <= SPEED_TARGET else 'MISSED'})")
    print(f"opgen lint with its cache next to ruff without its cache: "
          f"{times['opgen_warm'] / times['ruff_cold']:.2f}x")
    print(f"crashes: {len(crashes)}")
    for crash in crashes:
        print(f"  {crash}")
    print(f"linted together: {len(together)} findings, {'the union of each package alone' if not not_union else 'NOT the union'}")
    for key in not_union:
        print(f"  {'only together' if key in together else 'only alone'}: {key}")
    if lost:
        print(f"lost true findings (classified true, no longer emitted): {len(lost)}")
        for key in lost:
            print(f"  {key}: {verdicts[key].get('reason', '')}")
    if unclassified:
        print(f"unclassified findings: {len(unclassified)} (classify them in {VERDICTS})")
        for key, finding in unclassified:
            if args.dump:
                print(f"{json.dumps(key)}:\n  verdict: ?\n  reason: {json.dumps(finding['message'])}")
            else:
                print(f"  {key}: {finding['message']}")
    return 1 if unclassified or crashes or lost or not_union else 0


if __name__ == "__main__":
    sys.exit(main())
