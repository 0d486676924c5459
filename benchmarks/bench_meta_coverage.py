"""opgen meta-coverage on the torch-npu 2.13.0 wheel: its merged custom-op YAML and its Meta files.

Prints how many `custom:` ops have no Meta/fake registration and the wall time of the whole command
(`python -m opgen meta-coverage ... --json`, cold process), next to a baseline measured in the same run:
a process that only loads the same YAML with PyYAML's C loader and parses the Meta files with ast.

With `--op-plugin ROOT` (an op-plugin checkout, whose YAML still has its gen_opapi blocks) it also
runs `--emit` there, with the checkout's Meta file and the wheel's _fake_registrations.py, and checks
every emitted Meta function on CPU: its parameters equal the schema's (torch._C.parse_schema), and
called through the dispatcher on a scratch copy of the schema with meta tensors it returns one meta
tensor per return.

    python benchmarks/bench_meta_coverage.py [--wheel PATH] [--runs 3] [--op-plugin ROOT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from tools import skipped, torch_npu_wheel

ROOT = Path(__file__).resolve().parents[1]
YAML = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
METAS = ("torch_npu/op_plugin/meta/_meta_registrations.py", "torch_npu/op_plugin/meta/_fake_registrations.py")
BASELINE = """
import ast, sys, yaml
yaml.load(open(sys.argv[1]).read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
for path in sys.argv[2:]:
    ast.parse(open(path).read())
"""


def timed(command: list[str], runs: int) -> tuple[float, subprocess.CompletedProcess]:
    times, done = [], None
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times), done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", default=None, help="default: $OPGEN_TORCH_NPU_WHEEL, else downloaded with pip")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--op-plugin", metavar="ROOT", help="an op-plugin checkout: also check --emit there")
    args = parser.parse_args()
    if args.wheel is None:
        wheel, reason = torch_npu_wheel()
        if wheel is None:
            skipped("meta_coverage", reason)
            return 0
        args.wheel = str(wheel)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(args.wheel) as wheel:
            for name in (YAML, *METAS):
                wheel.extract(name, tmp)
        files = [str(Path(tmp) / name) for name in (YAML, *METAS)]
        meta_args = [part for path in files[1:] for part in ("--meta", path)]
        command = [sys.executable, "-m", "opgen", "meta-coverage", files[0], *meta_args, "--json"]
        seconds, done = timed(command, args.runs)
        if done.returncode not in (0, 1):
            print(done.stderr, file=sys.stderr)
            return 2
        report = json.loads(done.stdout)
        baseline, _ = timed([sys.executable, "-c", BASELINE, *files], args.runs)
    print(f"meta_coverage_missing: {len(report['missing'])} of {report['total']} custom ops without Meta/fake "
          f"({len(report['emittable'])} emittable; the wheel's merged YAML has no gen_opapi blocks)")
    print(f"meta_coverage_time: {seconds:.3f} s (baseline: {baseline:.3f} s for yaml C loader + ast only, "
          f"ratio {seconds / baseline:.2f}x)")
    if args.op_plugin:
        return check_emit(Path(args.op_plugin), args.wheel)
    return 0


def check_emit(root: Path, wheel_path: str) -> int:
    import ast
    import inspect

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel_path) as wheel:
            fake = wheel.extract(METAS[1], tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        base = [sys.executable, "-m", "opgen", "meta-coverage", str(root), "--meta",
                str(root / "op_plugin/python/meta/_meta_registrations.py"), "--meta", fake]
        report = json.loads(subprocess.run([*base, "--json"], capture_output=True, text=True, env=env,
                                           check=False).stdout)
        code = subprocess.run([*base, "--emit"], capture_output=True, text=True, env=env, check=False).stdout
    import yaml

    funcs = {e["func"].split("(")[0]: e["func"] for e in yaml.safe_load(
        (root / "op_plugin/config/op_plugin_functions.yaml").read_text())["custom"] if isinstance(e, dict)}
    checked, libraries = 0, []
    for number, node in enumerate(n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)):
        name = node.decorator_list[0].args[1].value
        node.decorator_list = []
        scope = {"torch": torch}
        exec(compile(ast.Module(body=[node], type_ignores=[]), "<emitted>", "exec"), scope)  # noqa: S102
        function, schema = scope[node.name], torch._C.parse_schema(funcs[name])
        params = list(inspect.signature(function).parameters.values())
        assert [p.name for p in params] == [a.name for a in schema.arguments], name
        for param, arg in zip(params, schema.arguments):
            if arg.has_default_value():
                assert param.default == arg.default_value, (name, arg.name)
        namespace = f"opgen_bench_emit_{number}"
        lib = torch.library.Library(namespace, "FRAGMENT")
        libraries.append(lib)
        lib.define(funcs[name])
        lib.impl(name, function, "Meta")
        call = [_value(a, torch) for a in schema.arguments if not a.kwarg_only]
        result = getattr(getattr(torch.ops, namespace), name)(*call)
        outputs = result if isinstance(result, tuple) else (result,)
        assert len(outputs) == len(schema.returns) and all(o.device.type == "meta" for o in outputs), name
        checked += 1
    print(f"meta_coverage_emit: {len(report['missing'])} of {report['total']} missing in {root.name}; "
          f"{len(report['emittable'])} emitted, {checked} checked on CPU (signature == schema, meta outputs)")
    return 0 if checked == len(report["emittable"]) else 1


def _value(arg, torch):
    if isinstance(arg.type, torch.OptionalType):
        return None
    kind = str(arg.type)
    if kind == "Tensor":
        return torch.empty(2, 3, 4, dtype=torch.float16, device="meta")
    return {"int": 1, "SymInt": 1, "float": 1.0, "bool": False, "str": "x"}.get(kind, [1])


if __name__ == "__main__":
    sys.exit(main())
