"""Mutation suite: bugs planted in generated projects must each fail at least one generated test, with a
message that names the spec field or the file to fix.

Every example used is generated once per style with the real CLI; each mutant is a copy under its own
namespace/package (`m07_attn_ops`), with one edit to a file the user owns (a kernel), to the generated
ops.py (a hand edit of the fake) or to the spec (then generated from it). Mutants alternate between the
two styles (consecutive mutants of a kind land in different styles) and one untouched control per example
must fail nothing but the TODO-fake tests; all projects run in ONE pytest subprocess (about 30 projects per style).
Each mutant's project runs only the generated tests that catch it (`caught_by`; every tier is proven on correct
projects by tests/test_examples.py, and a catch by a subset is a catch by the whole), each control the same tests
as its example's mutants. The table mutant -> caught by is printed (`pytest -s` shows it).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest
from forked_python import run_pytest
from new_helpers import PYTEST_PLUGINS_OFF, REPO, STYLES, opgen_in_one_process, pythonpath

from opgen.npugraph_ex import loader

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Mutant:
    name: str  # the kind of bug
    example: str  # examples/<example>.yaml
    file: str  # "kernel" (kernels/<stem>_cpu.py), "ops" (the generated ops.py) or "spec" (opgen.yaml)
    old: str
    new: str
    names: tuple[str, ...]  # a caught-by message must contain one of these (spec field or file)
    style: str | None = None  # only for this style (else the styles alternate)
    # the generated tests (tiers) that catch it: only these run in its project (the others, proven on correct projects
    # by tests/test_examples.py, would add minutes and catch nothing more); one must fail naming the fix
    caught_by: tuple[str, ...] = ()


KERNEL = "kernels/"
MUTANTS = (
    # wrong values (only `expect:` can tell: compiled == eager and opcheck compare the kernel with itself)
    Mutant("wrong value: y - bias", "bias_act", "kernel", "y = y + bias", "y = y - bias", ("expect.out0",),
           caught_by=("matches_expected_values",)),
    Mutant("wrong value: residual ignored", "bias_act", "kernel", "y = y + residual", "y = y", ("expect.out0",),
           caught_by=("matches_expected_values",)),
    Mutant("wrong value: mean |x| for mean x^2", "rms_norm", "kernel", "xf.pow(2).mean", "xf.abs().mean",
           ("expect.y", "expect.rstd"), caught_by=("matches_expected_values",)),
    Mutant("wrong value: returns x1 for x1 + x2", "add_rms_norm", "kernel", ", x.contiguous()", ", x1.contiguous()",
           ("expect.x", KERNEL),  # custom_op refuses a returned input: the kernel file is named
           caught_by=("matches_expected_values", "kernel_follows_the_semantics")),
    Mutant("wrong value: scale applied twice", "stack_scaled", "kernel", "* scale", "* scale * scale",
           ("expect.out0",), caught_by=("matches_expected_values",)),
    Mutant("wrong value: amax without abs", "kv_cache_update", "kernel", "key.abs().amax", "key.amax",
           ("expect.key_amax",), caught_by=("matches_expected_values",)),
    Mutant("wrong value: alpha dropped", "scaled_add_out", "kernel", "alpha=alpha, out=out", "out=out",
           ("expect.out",), caught_by=("matches_expected_values",)),
    Mutant("wrong value: smallest rows", "todo_semantics", "kernel", "topk(k)", "topk(k, largest=False)",
           ("expect.out0",), caught_by=("matches_expected_values",)),
    Mutant("wrong value: index off by one", "nonzero_rows", "kernel", "keep.nonzero().flatten().contiguous()",
           "(keep.nonzero().flatten() + 1).contiguous()", ("expect.index",), caught_by=("matches_expected_values",)),
    Mutant("wrong value: add for multiply", "scale_inplace", "kernel", "x.mul_(s)", "x.add_(s)", ("expect.x",),
           caught_by=("matches_expected_values",)),
    Mutant("wrong value: rows swapped", "kv_cache_update", "kernel", "index_copy_(0, slot_mapping, key)",
           "index_copy_(0, slot_mapping.flip(0), key)", ("expect.key_cache",), caught_by=("matches_expected_values",)),
    # missing or partial writes
    Mutant("missing write: value_cache", "kv_cache_update", "kernel",
           "    value_cache.index_copy_(0, slot_mapping, value)\n", "", ("'value_cache' (schema argument 1)",),
           caught_by=("writes_what_the_schema_says",)),
    Mutant("partial write: first token only", "kv_cache_update", "kernel", "index_copy_(0, slot_mapping, key)",
           "index_copy_(0, slot_mapping[:1], key[:1])", ("expect.key_cache.rows",),
           caught_by=("matches_expected_values",)),
    Mutant("missing write: writes a copy", "scatter_update", "kernel", "cache.index_copy_(", "cache.clone().index_copy_(",
           ("'cache' (schema argument 0)",), caught_by=("writes_what_the_schema_says",)),
    Mutant("partial write: one row", "scatter_update", "kernel", "cache.index_copy_(0, indices, updates)",
           "cache.index_copy_(0, indices[:1], updates[:1])", ("expect.cache.rows",),
           caught_by=("matches_expected_values",)),
    Mutant("missing write: out= returned fresh", "scaled_add_out", "kernel", "torch.add(x, y, alpha=alpha, out=out)\n"
           "    return out", "return torch.add(x, y, alpha=alpha)", ("schema argument keyword 'out'", "expect.out", KERNEL),
           caught_by=("matches_expected_values", "writes_what_the_schema_says")),
    Mutant("missing write: in-place op returns a new tensor", "scale_inplace", "kernel", "x.mul_(s)\n    return x",
           "return x * s", ("'x' (schema argument 0)",), caught_by=("writes_what_the_schema_says",)),
    # wrong device / shape / dtype / bounds in the fake (a hand edit of the generated ops.py)
    Mutant("fake on the wrong device", "rms_norm", "ops", "dtype=torch.float32, device=x.device)",
           "dtype=torch.float32)", ("ops[0].outputs.rstd",), caught_by=("enters_graph_with_fake_tensors",)),
    Mutant("fake on the wrong device (2nd output)", "kv_cache_update", "ops", "device=key_cache.device", "device='cpu'",
           ("ops[0].outputs.key_amax",), caught_by=("enters_graph_with_fake_tensors",)),
    Mutant("fake dtype wrong", "rms_norm", "ops", "dtype=torch.float32, device=x.device",
           "dtype=x.dtype, device=x.device", ("ops[0].outputs.rstd.dtype",),
           caught_by=("enters_graph_with_fake_tensors", "kernel_follows_the_semantics")),
    Mutant("fake shape wrong", "stack_scaled", "ops", "[len(xs), *xs[0].shape]", "[*xs[0].shape]",
           ("ops[0].outputs.out0.shape",),
           caught_by=("enters_graph_with_fake_tensors", "kernel_follows_the_semantics")),
    Mutant("missing bound: torch._check removed", "nonzero_rows", "ops", "    torch._check(_n0 <= x.shape[0])\n", "",
           ("ops[0].outputs",), caught_by=("enters_graph_with_fake_tensors",)),
    Mutant("fake specialises a size", "stack_scaled", "ops", "[len(xs), *xs[0].shape]",
           "[len(xs), *[int(n) for n in xs[0].shape]]", ("ops[0].outputs",),
           caught_by=("compiles_once_for_two_sizes",)),
    Mutant("fake drops the input's layout (like: x)", "rms_norm", "ops", "y = torch.empty_like(x)",
           "y = torch.empty(x.shape, dtype=x.dtype, device=x.device)", ("ops[0].outputs",),
           caught_by=("fusion_keeps_layouts", "non_contiguous_inputs")),
    # a fusion whose composite is not the op (compiled models would change results), or that would replace it on
    # inputs the kernel refuses
    Mutant("fusion: the pattern doubles gamma", "add_rms_norm", "spec",
           "return gamma * hidden_states.to(input_dtype), rstd, x",
           "return 2 * gamma * hidden_states.to(input_dtype), rstd, x", ("ops[0].fusion.forms[0] in opgen.yaml",),
           caught_by=("fusion_composite_is_the_op",)),
    Mutant("fusion: its when: left out", "kv_cache_update", "spec", 'when: ["slot_mapping.dtype == int64"]',
           "targets: [npugraph_ex, inductor]", ("ops[0].fusion.when in opgen.yaml",),
           caught_by=("fusion_composite_is_the_op",)),
    # a wrong rule in the spec (fake and tier 1 agree with it; the kernel does not)
    Mutant("spec shape rule wrong", "rms_norm", "spec", '+ [1] * gamma.dim()"', '"', ("ops[0].outputs.rstd.shape",),
           caught_by=("kernel_follows_the_semantics",)),
    Mutant("spec dtype rule wrong", "add_rms_norm", "spec", "gamma.dim()\", dtype: float32}",
           "gamma.dim()\", dtype: x1.dtype}",
           ("ops[0].outputs.rstd.dtype",), caught_by=("kernel_follows_the_semantics",)),
    Mutant("kernel dtype wrong", "rms_norm", "kernel", "y = (gamma * (xf * rstd).to(x.dtype)).to(x.dtype)",
           "y = gamma * (xf * rstd)", ("ops[0].outputs.y.dtype",), caught_by=("kernel_follows_the_semantics",)),
    # undeclared / over-declared mutation
    Mutant("undeclared mutation of x", "bias_act", "kernel", "y = alpha * x", "y = x.mul_(alpha).clone()",
           ("does not mark it written: declare it `Tensor(a!) x`",), caught_by=("writes_what_the_schema_says",)),
    Mutant("undeclared mutation of x1", "add_rms_norm", "kernel", "x = x1 + x2", "x = x1.add_(x2)",
           ("does not mark it written: declare it `Tensor(a!) x1`",), caught_by=("writes_what_the_schema_says",)),
    Mutant("over-declared mutation", "kv_cache_update", "spec", "Tensor key,", "Tensor(c!) key,",
           ("'key' (schema argument 2)",), caught_by=("writes_what_the_schema_says",)),
    Mutant("over-declared mutation (2)", "bias_act", "spec", "bias_act(Tensor x,", "bias_act(Tensor(a!) x,",
           ("'x' (schema argument 0)",), caught_by=("writes_what_the_schema_says",)),
    # aliasing returns and views
    Mutant("aliasing return: the input itself", "bias_act", "kernel", "    return y", "    return x",
           ("expect.out0", KERNEL),
           caught_by=("matches_expected_values", "writes_what_the_schema_says")),
    Mutant("aliasing return: a view of the input", "todo_semantics", "kernel", "x[index].clone()", "x[:k]",
           ("expect.out0", KERNEL),  # custom_op refuses a returned view of an input: the kernel file is named
           caught_by=("matches_expected_values", "matches_the_reference")),
    Mutant("view: in-place op returns a view", "scale_inplace", "kernel", "    return x", "    return x.view(x.shape)",
           ("is not argument", KERNEL),
           caught_by=("matches_expected_values", "writes_what_the_schema_says")),
    Mutant("view: stacked rows share memory with an input", "stack_scaled", "kernel",
           "return (torch.stack(xs) * scale)", "return (xs[0].expand(len(xs), *xs[0].shape) * scale)",
           ("expect.out0",), caught_by=("matches_expected_values",)),
    # registration: the same tags in both styles (custom_op adds pt2_compliant_tag itself)
    Mutant("registration without pt2_compliant_tag", "rms_norm", "ops", "tags=(torch.Tag.pt2_compliant_tag,)",
           "tags=()", ("ops.py",), style="library", caught_by=("is_registered",)),
    Mutant("no NPU kernel registered", "bias_act", "ops", "bias_act.register_kernel(NPU_DEVICE, bias_act_npu)\n",
           "", ("ops.py registers no NPU kernel",), style="custom_op", caught_by=("is_registered",)),
    # the registered schema is not the spec's (only the schema tier sees these: every call still works)
    Mutant("schema=: custom_op infers SymInt for int", "todo_semantics", "ops",
           '    schema="(Tensor x, int k) -> Tensor",\n', "", ("ops[0].schema in opgen.yaml",), style="custom_op",
           caught_by=("is_registered",)),
    Mutant("schema: a default added by hand", "scale_inplace", "ops", '"scale_(Tensor(a!) x, float s) -> Tensor(a!)"',
           '"scale_(Tensor(a!) x, float s=1.0) -> Tensor(a!)"', ("ops[0].schema in opgen.yaml",), style="library",
           caught_by=("is_registered",)),
    # drift: your kernel no longer takes the schema's arguments
    Mutant("kernel signature drifted", "scatter_update", "kernel", "indices: torch.Tensor", "index: torch.Tensor",
           ("scatter_update__cpu.py: def scatter_update__cpu(cache, index, updates) no longer matches ops[0].schema",),
           caught_by=("is_registered",)),
    # strides: the kernel returns another layout than the fake
    Mutant("wrong strides: transposed output", "bias_act", "kernel", "    return y",
           "    return y.t().contiguous().t() if y.dim() == 2 else y", (KERNEL,),
           caught_by=("non_contiguous_inputs", "opcheck")),
    # right only on the examples: the spec's `reference:` is the oracle, on swept dtypes, seeds, defaults and sizes
    Mutant("dtype: math in float16 (its example's dtype)", "rms_norm", "kernel",
           "xf = x.to(torch.promote_types(x.dtype, torch.float32))", "xf = x.to(torch.float16)",
           ("ops[0].reference", "expect.y"), caught_by=("matches_expected_values", "matches_the_reference")),
    Mutant("default ignored: epsilon fixed at 1e-6", "rms_norm", "kernel", "keepdim=True) + epsilon)",
           "keepdim=True) + 1e-06)", ("ops[0].reference",), caught_by=("matches_the_reference",)),
    Mutant("heads: only the first head written", "kv_cache_update", "kernel", "key_cache.index_copy_(0, slot_mapping, key)",
           "key_cache[:, :1].index_copy_(0, slot_mapping, key[:, :1])", ("ops[0].reference",),
           caught_by=("matches_the_reference",)),
    Mutant("sizes: an odd tail dropped", "bias_act", "kernel", "    y = alpha * x\n",
           "    y = alpha * x\n    y[..., (y.shape[-1] // 2) * 2:] = 0  # pairs of columns: an odd last one is lost\n",
           ("ops[0].reference",), caught_by=("matches_the_reference",)),
    Mutant("stale: a result cached by shape", "stack_scaled", "kernel", "    return (torch.stack(xs) * scale).contiguous()",
           "    cache = globals().setdefault('_CACHE', {})\n    key = (len(xs), tuple(xs[0].shape), xs[0].dtype, scale)\n"
           "    if key not in cache:\n        cache[key] = (torch.stack(xs) * scale).contiguous()\n"
           "    return cache[key].clone()", ("ops[0].reference",), caught_by=("matches_the_reference",)),
    Mutant("dtype: cache rows written through bfloat16", "scatter_update", "kernel",
           "cache.index_copy_(0, indices, updates)", "cache.index_copy_(0, indices, updates.bfloat16().to(cache.dtype))",
           ("ops[0].reference",), caught_by=("matches_the_reference",)),
    Mutant("workspace: returns a module-level buffer", "bias_act", "kernel", "    return y",
           "    out = globals().setdefault('_WORKSPACE', {}).setdefault((y.shape, y.dtype), torch.empty_like(y))\n"
           "    return out.copy_(y)", ("changed during later calls",), caught_by=("matches_the_reference",)),
    # written arguments: all of each, in its own memory; no other argument written, even and back
    Mutant("strict writes: the neighbouring slot written too", "scatter_update", "kernel",
           "cache.index_copy_(0, indices, updates)",
           "cache.index_copy_(0, indices, updates)\n    cache.index_copy_(0, (indices + 1) % cache.shape[0], updates)",
           ("argument 'cache' (written)",), caught_by=("matches_the_reference",)),
    Mutant("strict writes: the whole cache cleared first", "kv_cache_update", "kernel",
           "    key_cache.index_copy_(", "    key_cache.zero_()\n    key_cache.index_copy_(",
           ("argument 'key_cache' (written)",), caught_by=("fusion_composite_is_the_op", "matches_the_reference")),
    Mutant("strict writes: an input written and restored", "kv_cache_update", "kernel",
           "    key_cache.index_copy_(", "    key.mul_(2).div_(2)\n    key_cache.index_copy_(",
           ("does not mark it written: declare it `Tensor(a!) key`",), caught_by=("writes_what_the_schema_says",)),
    Mutant("strict writes: the buffer's storage swapped", "scatter_update", "kernel",
           "cache.index_copy_(0, indices, updates)", "cache.set_(cache.clone().index_copy_(0, indices, updates))",
           ("swapped the memory of 'cache'",), caught_by=("writes_what_the_schema_says",)),
    # layouts: compared with the result on contiguous inputs
    Mutant("layout: reads the input in storage order", "rms_norm", "kernel",
           "xf = x.to(torch.promote_types(x.dtype, torch.float32))",
           "xf = torch.as_strided(x, x.shape, x.contiguous().stride()).to(torch.promote_types(x.dtype, torch.float32))",
           ("gives other values for transposed inputs",), caught_by=("non_contiguous_inputs",)),
)

EXAMPLES_USED = sorted({m.example for m in MUTANTS})
# the TODO fake fails the npugraph_ex-on-CPU tiers too, where they run (the cache is fetched)
NPUGRAPH_EX_TODO = ({"test_top_rows_npugraph_ex_compiles_on_cpu", "test_top_rows_npugraph_ex_capture_replay_on_cpu"}
                    if loader().unavailable() is None else set())


def rename(project: Path, old: str, new: str) -> None:
    """The project under another namespace/package (namespace == package in the examples)."""
    for path in sorted(project.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_file() and path.suffix in (".py", ".yaml", ".toml", ".md"):
            path.write_text(re.sub(rf"\b{old}\b", new, path.read_text(encoding="utf-8")), encoding="utf-8")
        if path.name == old:
            path.rename(path.with_name(new))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"mutation does not apply to {path}: {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def namespace_of(spec_text: str) -> str:
    return re.search(r"^namespace: (\w+)", spec_text, re.MULTILINE).group(1)


def style_of(number: int, mutant: Mutant) -> str:
    return mutant.style or STYLES[number % 2]


def control_style(number: int) -> str:
    return STYLES[number % 2]


def build(root: Path, style: str) -> dict[str, Path]:
    """Every mutant of `style` as a project under `root`, and the untouched controls of that style (each example's
    control is in one style). The suite runs once per style, one pytest-xdist worker each (about 30 projects): only
    that style's projects are generated."""
    mutants = {number: mutant for number, mutant in enumerate(MUTANTS) if style_of(number, mutant) == style}
    controls = [example for number, example in enumerate(EXAMPLES_USED) if control_style(number) == style]
    base = {example: root / f"control_{style}_{example}"
            for example in sorted({m.example for m in mutants.values() if m.file != "spec"} | set(controls))}
    generations = [["new", str(REPO / "examples" / f"{example}.yaml"), "-o", str(project), "--style", style]
                   for example, project in base.items()]
    projects, edits = {}, []
    for number, mutant in mutants.items():
        text = (REPO / "examples" / f"{mutant.example}.yaml").read_text(encoding="utf-8")
        namespace = namespace_of(text)
        new_namespace = f"m{number:02d}_{namespace}"
        project = root / f"m{number:02d}_{mutant.example}"
        if mutant.file == "spec":
            spec = root / f"m{number:02d}.yaml"
            assert text.count(mutant.old) == 1, f"mutation does not apply to the spec: {mutant.old!r}"
            spec.write_text(text.replace(mutant.old, mutant.new).replace(f"namespace: {namespace}",
                                                                         f"namespace: {new_namespace}"),
                            encoding="utf-8")
            generations.append(["new", str(spec), "-o", str(project), "--style", style])
        else:
            edits.append((mutant, project, namespace, new_namespace))
        projects[mutant.name] = project
    # one process generates every project of the style: a process per `opgen new` cost a start and opgen's imports
    # each, a third of this test's CPU (tests/test_examples.py proves that one process writes what separate ones do)
    assert opgen_in_one_process(*generations) == [0] * len(generations)
    for mutant, project, namespace, new_namespace in edits:
        shutil.copytree(base[mutant.example], project)
        rename(project, namespace, new_namespace)
        package = project / new_namespace
        target = package / "ops.py" if mutant.file == "ops" else next((package / "kernels").glob("*_cpu.py"))
        edit(target, mutant.old, mutant.new)
    for example in controls:
        projects[f"control: {example}"] = base[example]
    return projects


def tiers_to_run(name: str) -> tuple[str, ...]:
    """The generated tests a project runs: a mutant's `caught_by`; an example's control, those of every mutant of that
    example (the correct twin of each catch: it must not fail them)."""
    if name.startswith("control: "):
        example = name.removeprefix("control: ")
        return tuple(sorted({tier for m in MUTANTS if m.example == example for tier in m.caught_by}))
    return next(m.caught_by for m in MUTANTS if m.name == name)


def run_all(projects: dict[str, Path], root: Path) -> dict[str, dict[str, str]]:
    """One pytest process over every project, each running only its tiers (`tiers_to_run`): {project directory name:
    {test name: failure text or ''}}."""
    junit = root / "junit.xml"
    env = {**os.environ, "PYTHONPATH": pythonpath(projects.values())}
    # -k matches a test's folder names too: each project's clause names its folder, then its tiers
    select = " or ".join(f"({project.name} and ({' or '.join(tiers_to_run(name))}))"
                         for name, project in projects.items())
    arguments = ["-q", *PYTEST_PLUGINS_OFF, "--import-mode=importlib", "-c", os.devnull, f"--rootdir={root}",
                 f"--junitxml={junit}", "-k", select, *[str(p / "tests") for p in projects.values()]]
    run_pytest(arguments, env=env, timeout=1200, cwd=root)
    results: dict[str, dict[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        project = case.get("classname").split(".")[0]
        text = ""
        for child in case:
            if child.tag in ("failure", "error"):
                text = child.get("message") or "failed"  # the exception's message, not the traceback's source
        results.setdefault(project, {})[case.get("name")] = text
    return results


@pytest.mark.parametrize("style", STYLES)
def test_every_planted_bug_fails_a_generated_test_naming_what_to_fix(tmp_path, style):
    assert all(mutant.caught_by for mutant in MUTANTS), "a mutant names no generated test that catches it"
    projects = build(tmp_path, style)
    results = run_all(projects, tmp_path)
    rows, escaped = [], []
    mutants = [mutant for mutant in MUTANTS if mutant.name in projects]
    for mutant in mutants:
        tests = results.get(projects[mutant.name].name, {})
        failed = {name: text for name, text in tests.items() if text}
        named = sorted(name for name, text in failed.items() if any(marker in text for marker in mutant.names))
        caught = ", ".join(named) or "NOT CAUGHT: " + str(sorted(failed))
        rows.append(f"{mutant.name:<48} {mutant.example:<15} {caught}")
        if not named:
            escaped.append(mutant.name)
    print(f"\nmutation suite, {style} style: {len(mutants)} of {len(MUTANTS)} mutants, caught by\n" + "\n".join(rows))
    for example in EXAMPLES_USED:
        if f"control: {example}" not in projects:
            continue
        tests = results.get(projects[f"control: {example}"].name, {})
        failed = sorted(name for name, text in tests.items() if text)
        allowed = {"todo_semantics": {"test_top_rows_enters_graph_with_fake_tensors", "test_top_rows_opcheck",
                                      "test_top_rows_compiled_matches_eager", "test_top_rows_non_contiguous_inputs",
                                      "test_top_rows_compiles_once_for_two_sizes"} | NPUGRAPH_EX_TODO}.get(example, set())
        assert tests and set(failed) == allowed & set(tests), f"control {example} ({style}): {failed}"
    assert not escaped, "not caught (or caught without naming the spec field or file):\n" + "\n".join(rows)


def test_the_readme_counts_the_mutants():
    count = re.search(r"`tests/test_mutants.py` plants (\d+) bugs", (REPO / "README.md").read_text(encoding="utf-8"))
    assert count and int(count.group(1)) == len(MUTANTS), (count and count.group(1), len(MUTANTS))
