"""`opgen new --target op_plugin`: op-plugin contributions checked by op-plugin's own code generator.

torchnpugen (extracted from the torch-npu wheel, never installed) must accept every generated
op_plugin_functions.yaml: version filter, schema parsing, functionalization pairing of mutating ops
with their twins, and gen_opapi structured codegen. The C++ sizes/dtypes of opgen's kernels and of
torchnpugen's gen_opapi kernels are evaluated with g++ on the examples' shapes and must agree with
each other and with the generated Meta functions; the generated Meta tests run on CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from forked_python import run_pytest
from new_helpers import REPO, opgen, opgen_in_one_process, snapshot
from op_plugin_helpers import (
    EXAMPLES,
    extract_torchnpugen,
    meta_outputs,
    needs_wheel,
    run_kernels,
    run_torchnpugen,
    struct_source,
)

from opgen.op_plugin import cpp
from opgen.op_plugin.model import plugin_ops
from opgen.spec.load import load_spec, load_spec_text


@pytest.fixture(scope="module")
def torchnpugen(tmp_path_factory) -> Path:
    return extract_torchnpugen(tmp_path_factory.mktemp("wheel"))


def generate(spec: Path | str, out: Path, *extra: str) -> Path:
    done = opgen("new", str(spec), "--target", "op_plugin", "-o", str(out), *extra)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("op_plugin")
    made = {spec.stem: root / spec.stem for spec in EXAMPLES}
    assert opgen_in_one_process(*(["new", str(spec), "--target", "op_plugin", "-o", str(made[spec.stem])]
                                  for spec in EXAMPLES)) == [0] * len(EXAMPLES)  # one process start, not one per spec
    return made


def files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".opgen" not in p.parts)


def test_three_examples_lay_out_files_as_op_plugin_does(generated):
    common = ["codegen/templates/_op_plugin_docs.py", "op_plugin/config/op_plugin_functions.yaml",
              "op_plugin/python/meta/_meta_registrations.py", "opgen.yaml", "test/core_tests/test_fake_tensor.py",
              "test/core_tests/torch_npu_OpApi_schema_all.json", "opgen_checks/pytest.ini"]
    assert files(generated["add_rms_norm"]) == sorted(common + [
        "opgen_checks/test_npu_add_rms_norm_meta.py", "test/test_custom_ops/test_npu_add_rms_norm.py"])
    assert files(generated["rms_norm"]) == sorted(common + [
        "op_plugin/config/derivatives.yaml", "op_plugin/ops/opapi/RmsNormKernelNpuOpApi.cpp",
        "opgen_checks/test_npu_rms_norm_meta.py", "test/test_custom_ops/test_npu_rms_norm.py"])
    assert files(generated["kv_cache_update"]) == sorted(common + [
        "op_plugin/ops/opapi/KvCacheUpdateKernelNpuOpApi.cpp", "opgen_checks/test_npu_kv_cache_update_meta.py",
        "test/test_custom_ops/test_npu_kv_cache_update.py"])
    kernel = (generated["rms_norm"] / "op_plugin/ops/opapi/RmsNormKernelNpuOpApi.cpp").read_text()
    assert "DO_COMPATIBILITY(aclnnRmsNorm, acl_op::npu_rms_norm(self, gamma, epsilon));" in kernel
    assert "DO_COMPATIBILITY" not in (generated["kv_cache_update"] / "op_plugin/ops/opapi/"
                                      "KvCacheUpdateKernelNpuOpApi.cpp").read_text()  # no acl_op fallback declared
    meta = (generated["kv_cache_update"] / "op_plugin/python/meta/_meta_registrations.py").read_text()
    assert 'm = Library("npu", "IMPL", "Meta")' in meta and "register_fake" not in meta
    assert [line for line in meta.splitlines() if line.startswith(("import", "from"))] == [
        "import torch", "from torch.library import Library, impl"]


def test_generated_python_is_ruff_clean_and_parses_and_yaml_loads(generated):
    import ast
    import shutil

    import yaml

    sources = [path for root in generated.values() for path in sorted(root.rglob("*.py"))]
    assert len(sources) == 3 * 5
    for path in sources:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for path in (p for root in generated.values() for p in root.rglob("*.yaml")):
        assert yaml.safe_load(path.read_text(encoding="utf-8")), path
    ruff = shutil.which("ruff") or pytest.fail("ruff is not installed (it is part of the test extra)")
    for extra in ([], ["--extend-select", "E,F"]):
        done = subprocess.run([ruff, "check", "--no-cache", "--line-length", "120", *extra,
                               *map(str, generated.values())], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_opgen_checks_run_the_meta_functions_on_cpu(generated):
    for name, root in generated.items():
        done = run_pytest(["-q", "-rs", "-p", "no:cacheprovider", "opgen_checks"], cwd=root, timeout=600)
        assert done.returncode == 0, f"{name}:\n{done.stdout[-3000:]}"
        assert "3 passed" in done.stdout, f"{name}: the Meta tests did not all run:\n{done.stdout[-2000:]}"


@pytest.mark.slow
def test_generated_meta_test_catches_a_planted_wrong_shape(generated, tmp_path):
    root = generate(REPO / "examples/op_plugin/rms_norm.yaml", tmp_path / "planted")
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    text = meta.read_text()
    assert "*([1] * gamma.dim())" in text
    meta.write_text(text.replace("*([1] * gamma.dim())", "*([1] * (gamma.dim() - 1))"))
    done = run_pytest(["-q", "-p", "no:cacheprovider", "opgen_checks"], cwd=root, timeout=600)
    assert done.returncode == 1 and "test_meta_matches_reference_on_examples" in done.stdout, done.stdout[-2000:]
    assert "test_meta_signature_equals_schema" not in done.stdout
    # a default that differs from the schema's
    meta.write_text(text.replace("def npu_rms_norm_meta(self, gamma, epsilon=1e-06):",
                                 "def npu_rms_norm_meta(self, gamma, epsilon=1e-05):"))
    assert meta.read_text() != text
    done = run_pytest(["-q", "-p", "no:cacheprovider", "opgen_checks"], cwd=root, timeout=600)
    assert done.returncode == 1 and "FAILED" in done.stdout and "test_meta_signature_equals_schema" in done.stdout


@needs_wheel
def test_torchnpugen_accepts_every_example(generated, torchnpugen, tmp_path):
    for name, root in generated.items():
        spec = load_spec(str(REPO / "examples/op_plugin" / f"{name}.yaml"))
        entries = plugin_ops(spec)
        report = run_torchnpugen(torchnpugen, root / "op_plugin/config/op_plugin_functions.yaml", tmp_path / name)
        # version filter for torch 2.13 kept every entry, folded into impl_ns
        kept = {e["func"]: e for e in report["filtered"]["custom"]}
        assert sorted(kept) == sorted(e.func for e in entries), name
        for entry in entries:
            want = "acl_op, op_api" if entry.config.acl_op and entry.twin_of is None else "op_api"
            assert kept[entry.func]["impl_ns"] == want
            # the hand-written kernel's signature is torchgen's declaration
            assert report["signatures"][entry.name] == cpp.signature(entry.schema), entry.name
        # every gen_opapi entry became C++ calling its aclnn function
        gen = [e for e in entries if e.kernel == "gen_opapi"]
        assert sorted(report["gen_opapi"]) == sorted(e.name for e in gen)
        for entry in gen:
            assert f"EXEC_NPU_CMD({entry.aclnn}, " in report["gen_opapi"][entry.name]
        # mutating ops are grouped with their twin and get a functionalization kernel
        for entry in (e for e in entries if e.kind != "functional"):
            group = next(g for g in report["groups"] if entry.name in g["members"].values())
            assert group["members"][entry.kind] == entry.name
            assert group["functionalization_kernels"] >= 1


# a reduction: `reduce()` printed to C++ (a lambda in the gen_opapi YAML too), on every kind of dims
SUM_DIMS = """
namespace: npu
target: op_plugin
ops:
  - schema: "npu_sum_dims(Tensor x, int[]? dim=None, bool keepdim=False) -> Tensor"
    outputs: {out0: {shape: "reduce(x.shape, dim, keepdim)", dtype: x}}
    reference: "return x.sum(dim, keepdim)"
    op_plugin: {kernel: gen_opapi}
    examples:
      - {x: {shape: [2, 3, 4]}, dim: [0, -1], keepdim: true}
      - {x: {shape: [2, 3, 4]}, dim: [1]}
      - {x: {shape: [2, 3, 4]}, dim: [], keepdim: true}
      - {x: {shape: [2, 3, 4]}}
      - {x: {shape: []}, dim: [-1], keepdim: true}
"""


def _variant(example: str, kernel: str) -> str:
    text = SUM_DIMS if example == "sum_dims" else (REPO / "examples/op_plugin" / f"{example}.yaml").read_text()
    for kind in ("gen_opapi", "opapi"):
        text = text.replace(f"kernel: {kind}", f"kernel: {kernel}")
    return text


@needs_wheel
@pytest.mark.parametrize("example", ["add_rms_norm", "rms_norm", "sum_dims"])
def test_kernel_sizes_agree_with_torchnpugen_and_meta(example, torchnpugen, tmp_path):
    """The same op as a hand-template kernel (opapi) and as torchnpugen's gen_opapi kernel: g++ runs both
    allocations on every example; sizes and dtypes must equal each other and the Meta function's."""
    outputs = {}
    for kernel in ("opapi", "gen_opapi"):
        spec_path = tmp_path / f"{kernel}.yaml"
        spec_path.write_text(_variant(example, kernel))
        root = generate(spec_path, tmp_path / kernel)
        spec = load_spec(str(spec_path))
        entry = plugin_ops(spec)[0]
        assert entry.kernel == kernel
        calls = [(entry.name, entry.schema, ex) for ex in entry.source.examples]
        if kernel == "opapi":
            code = next((root / "op_plugin/ops/opapi").glob("*.cpp")).read_text()
            meta = root / "op_plugin/python/meta/_meta_registrations.py"
            outputs["meta"] = [line for ex in entry.source.examples
                               for line in meta_outputs(meta, entry.name, entry.schema, ex)]
        else:
            report = run_torchnpugen(torchnpugen, root / "op_plugin/config/op_plugin_functions.yaml", tmp_path / "tng")
            code = struct_source(report["gen_opapi"][entry.name])
        outputs[kernel] = [line for line in run_kernels(code, calls, tmp_path / f"cc_{kernel}")
                           if not line.startswith("==")]
    assert outputs["opapi"] == outputs["gen_opapi"] == outputs["meta"]
    assert len(outputs["meta"]) == len(entry.outputs) * len(entry.source.examples)


def test_mutating_kernel_and_twin_sizes_agree_with_meta(generated, tmp_path):
    root = generated["kv_cache_update"]
    spec = load_spec(str(REPO / "examples/op_plugin/kv_cache_update.yaml"))
    code = (root / "op_plugin/ops/opapi/KvCacheUpdateKernelNpuOpApi.cpp").read_text()
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    for entry in plugin_ops(spec):
        calls = [(entry.name, entry.schema, ex) for ex in entry.source.examples]
        got = [line for line in run_kernels(code, calls, tmp_path / entry.name) if not line.startswith("==")]
        want = [line for ex in entry.source.examples for line in meta_outputs(meta, entry.name, entry.schema, ex)]
        assert got == want, entry.name
    assert want == ["[4] float32", "[32, 2, 16] float16", "[32, 2, 16] float16"]


ISSUE_21_SPEC = """\
namespace: npu
dtype_codes: {1: int8, 5: float16, 24: float8_e4m3fn}
ops:
  - schema: "npu_sig_list(Tensor[] x, Tensor[] weight, *, int dim=-1, int? dst_type=None) -> Tensor[]"
    let: {last: "weight[0].shape[-1]"}
    outputs:
      out0:
        length: "len(x)"
        shape: "replace_size(x[i].shape, dim, last * 2 if weight[i].dim() == 3 else weight[i].shape[1])"
        dtype: "from_code(dst_type) if dst_type is not None else x[i].dtype"
    op_plugin: {none_values: {dst_type: "-1"}}
    examples:
      - {x: [{shape: [4, 8]}, {shape: [3, 8]}], weight: [{shape: [8, 5]}, {shape: [8, 6]}]}
      - {x: [{shape: [4, 8]}], weight: [{shape: [2, 8, 7]}], dim: 0, dst_type: 24}
      - {x: [{shape: [4, 8, 3], dtype: float16}], weight: [{shape: [8, 5]}], dim: -2, dst_type: 1}
  - schema: "npu_swiglu(Tensor self, int dim=-1) -> Tensor"
    let: {d: "wrap_dim(dim, self)"}
    outputs: {out0: {shape: "replace_size(self.shape, d, self.shape[d] // 2)", dtype: self}}
    op_plugin: {kernel: opapi}
    examples:
      - {self: {shape: [4, 2048]}}
      - {self: {shape: [4, 6, 8]}, dim: 0}
      - {self: {shape: [4, 6, 8]}, dim: -2}
      - {self: {shape: [4, 6, 8]}, dim: 2}
  - schema: "npu_sig_fold(Tensor self, int dim=-1, int k=2) -> Tensor"
    outputs: {out0: {shape: "insert_size(remove_size(self.shape, dim), dim % (self.dim() - 1) if dim < 0 else dim, (dim - 9) // k + 7 + (dim - 9) % k)", dtype: self}}
    op_plugin: {kernel: opapi}
    examples:
      - {self: {shape: [4, 6, 8]}, k: 3}
      - {self: {shape: [4, 6, 8]}, dim: -3, k: 5}
      - {self: {shape: [4, 6, 8]}, dim: 1, k: -3}
"""


def test_issue_21_constructs_agree_between_the_opapi_kernel_and_the_meta_function(tmp_path):
    """A Tensor[] return, `let:`, the dimension helpers, `from_code` and Python's `%`/`//` on negative dims: g++ runs
    the OpApi kernels' allocation on every example and the Meta function must give the same sizes and dtypes."""
    spec_path = tmp_path / "issue21.yaml"
    spec_path.write_text(ISSUE_21_SPEC)
    root = generate(spec_path, tmp_path / "out")
    spec = load_spec(str(spec_path))
    code = "\n".join(path.read_text() for path in sorted((root / "op_plugin/ops/opapi").glob("*.cpp")))
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    got, want = [], []
    for entry in plugin_ops(spec):
        calls = [(entry.name, entry.schema, ex) for ex in entry.source.examples]
        got += [line for line in run_kernels(code, calls, tmp_path / entry.name) if not line.startswith("==")]
        want += [line for ex in entry.source.examples for line in meta_outputs(meta, entry.name, entry.schema, ex)]
    assert got == want
    assert want == ["[4, 5] float32", "[3, 6] float32", "[14, 8] float8_e4m3fn", "[4, 5, 3] int8",
                    "[4, 1024] float32", "[2, 6, 8] float32", "[4, 3, 8] float32", "[4, 6, 4] float32",
                    "[4, 5, 6] float32", "[6, 7, 8] float32", "[4, 7, 8] float32"]


def test_floor_division_is_c10s_helper_and_a_truncating_one_is_caught(tmp_path):
    """A reviewer's comment (issue 38): a Python-style floor-division lambda in C++. `(dim - 9) // k` and `% k` on
    operands of any sign are c10::div_floor_integer (its header included, no lambda); planted in its place, C++'s
    truncating `/` gives other sizes than the Meta function on a negative k, and the harness says so."""
    spec_path = tmp_path / "fold.yaml"
    spec_path.write_text(ISSUE_21_SPEC)
    root = generate(spec_path, tmp_path / "out")
    code = (root / "op_plugin/ops/opapi/SigFoldKernelNpuOpApi.cpp").read_text()
    assert code.startswith("#include <c10/util/generic_math.h>\n", code.index("#include"))
    assert "c10::div_floor_integer(dim - 9, k)" in code and "[](" not in code
    entry = next(e for e in plugin_ops(load_spec(str(spec_path))) if e.name == "npu_sig_fold")
    calls = [(entry.name, entry.schema, ex) for ex in entry.source.examples]
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    want = [line for ex in entry.source.examples for line in meta_outputs(meta, entry.name, entry.schema, ex)]
    good = [line for line in run_kernels(code, calls, tmp_path / "good") if not line.startswith("==")]
    assert good == want
    planted = code.replace("c10::div_floor_integer(dim - 9, k)", "(dim - 9) / k")
    assert planted != code
    assert [line for line in run_kernels(planted, calls, tmp_path / "bad") if not line.startswith("==")] != want


def test_harness_catches_a_planted_size_difference(generated, tmp_path):
    root = generated["rms_norm"]
    spec = load_spec(str(REPO / "examples/op_plugin/rms_norm.yaml"))
    entry = plugin_ops(spec)[0]
    code = (root / "op_plugin/ops/opapi/RmsNormKernelNpuOpApi.cpp").read_text()
    calls = [(entry.name, entry.schema, ex) for ex in entry.source.examples]
    good = run_kernels(code, calls, tmp_path / "good")
    planted = code.replace("static_cast<size_t>(gamma.dim()), 1)", "static_cast<size_t>(gamma.dim()), 2)")
    assert planted != code
    assert run_kernels(planted, calls, tmp_path / "bad") != good


SIGNATURE_SPEC = """\
namespace: npu
ops:
  - schema: "npu_sig_a(Tensor self, Tensor? bias, int[] dims, int k, int? group=None, float alpha=1.0, bool flag=False, str mode='x', ScalarType? dtype=None, Scalar s=1) -> Tensor"
    outputs: {out0: {shape: "self.shape", dtype: "self.dtype"}}
    op_plugin: {kernel: opapi, none_values: {group: "1", dtype: "self.scalar_type()"}}
  - schema: "npu_sig_b.overload(Tensor[] xs, float[] scales, *, SymInt n, int[]? sizes=None) -> (Tensor, Tensor)"
    outputs: {out0: {shape: "xs[0].shape", dtype: "xs[0].dtype"}, out1: {shape: "[n]", dtype: int64}}
    op_plugin: {kernel: opapi, exec: [xs, n, sizes, out0, out1]}
  - schema: "npu_sig_c(Tensor x, Tensor w, int k) -> (Tensor, Tensor)"
    outputs: {out0: {shape: "[x.size(0), w.size(1)]", dtype: float32}, out1: {shape: "[x.size(0) * k]", dtype: "w"}}
    op_plugin:
      kernel: gen_opapi
      aclnn: aclnnSigC
      exec: [w, x, cache_mode, k, out1, out0]
      new_params: {cache_mode: '"Norm"'}
      internal_format_opapi: true
      versions: [v2.5, newest]
  - schema: "npu_sig_d(Tensor[] x, *, Tensor[]? bias=None, SymInt[] sizes=[], Generator? generator=None, bool[2] mask, SymInt? k=None) -> Tensor[]"
    tags: [nondeterministic_seeded]
    outputs: {out0: {length: "len(x)", shape: "x[i].shape", dtype: "x[i]"}}
    op_plugin: {exec: [x, bias, sizes, mask, k, out0], none_values: {k: "0"}}
  - schema: "npu_conv_gen(Tensor x, *, str mode=\\"rint\\", str? layout=None, int? k=None, float? eps=1e-05, ScalarType? out_dtype=None) -> Tensor"
    outputs: {out0: {like: x}}
    op_plugin: {none_values: {k: "0", out_dtype: "at::kFloat"}}
    examples:
      - {x: {shape: [4]}, layout: "BSND"}
"""


@needs_wheel
def test_cpp_signature_printer_matches_torchnpugen_on_many_types(torchnpugen, tmp_path):
    spec_path = tmp_path / "sig.yaml"
    spec_path.write_text(SIGNATURE_SPEC)
    root = generate(spec_path, tmp_path / "out")
    report = run_torchnpugen(torchnpugen, root / "op_plugin/config/op_plugin_functions.yaml", tmp_path / "tng")
    for entry in plugin_ops(load_spec_text(SIGNATURE_SPEC, "sig.yaml")):
        assert report["signatures"][entry.name] == cpp.signature(entry.schema), entry.name
    # gen_opapi with new_params and an aclnn argument order of its own
    generated = report["gen_opapi"]["npu_sig_c"]
    assert 'auto cache_mode = "Norm";' in generated
    assert "EXEC_NPU_CMD(aclnnSigC, w, x, cache_mode, k, out1, out0);" in generated
    kept = {e["func"].split("(")[0]: e for e in report["filtered"]["custom"]}
    assert kept["npu_sig_c"]["internal_format_opapi"] is True
    # the str, optional str, optional int, optional float and optional ScalarType reach aclnn converted (new_params):
    # g++ compiles torchnpugen's kernel against stubs of op-plugin's ConvertType overloads (test_op_plugin_convert.py)
    code = struct_source(report["gen_opapi"]["npu_conv_gen"])
    entry = next(e for e in plugin_ops(load_spec_text(SIGNATURE_SPEC, "sig.yaml")) if e.name == "npu_conv_gen")
    calls = [(entry.name, entry.schema, example) for example in entry.source.examples]
    assert "-- aclnnConvGen: aclTensor* char* char* int64_t double aclDataType aclTensor*" in run_kernels(
        code, calls, tmp_path / "cc", exec_lines=True)
    with pytest.raises(subprocess.CalledProcessError) as failure:  # torchnpugen passing the string_view itself
        run_kernels(code.replace(", mode_ptr,", ", mode,"), calls, tmp_path / "bad")
    assert "EXEC_NPU_CMD would pass this argument to the aclnn C API as it is" in failure.value.stderr


@needs_wheel
def test_a_twin_breaking_the_pairing_rule_silently_loses_functionalization(generated, torchnpugen, tmp_path):
    """Why opgen refuses such a twin: torchnpugen does not complain, it just does not pair the ops, so the
    mutable op gets no functionalization kernel (and fails only later, in graph capture)."""
    fragment = tmp_path / "op_plugin_functions.yaml"
    text = (generated["kv_cache_update"] / "op_plugin/config/op_plugin_functions.yaml").read_text()
    fragment.write_text(text)
    assert run_torchnpugen(torchnpugen, fragment, tmp_path / "good")["groups"] == [
        {"members": {"functional": "npu_kv_cache_update_functional", "mutable": "npu_kv_cache_update"},
         "functionalization_kernels": 1}]
    assert "Tensor slot_mapping) -> (Tensor, Tensor, Tensor)" in text
    fragment.write_text(text.replace("Tensor slot_mapping) -> (Tensor, Tensor, Tensor)",
                                     "Tensor slot_mapping) -> (Tensor, Tensor)"))
    assert run_torchnpugen(torchnpugen, fragment, tmp_path / "bad")["groups"] == []


# --- refusals: clear, located, nothing written --------------------------------------------------------


def refused(tmp_path: Path, text: str) -> str:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    done = opgen("new", str(spec), "--target", "op_plugin", "-o", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()
    return done.stderr


KV = ("npu_kv(Tensor(a!) cache, Tensor key) -> Tensor", {"out0": '{shape: "[key.shape[0]]", dtype: float32}'})


def spec_text(*ops: tuple[str, dict], extra: str = "") -> str:
    lines = ["namespace: npu", "ops:"]
    for schema, outputs in ops:
        lines.append(f'  - schema: "{schema}"')
        if outputs:
            lines.append("    outputs:")
            lines += [f"      {name}: {rule}" for name, rule in outputs.items()]
        lines.append("    examples: [{cache: {shape: [8, 4]}, key: {shape: [2, 4]}}]" if "cache" in schema else "")
    return "\n".join(lines) + "\n" + extra


def test_refuses_a_twin_that_breaks_torchgens_pairing_rule(tmp_path):
    twin = ("npu_kv_functional(Tensor cache, Tensor key) -> Tensor", {"out0": '{shape: "key.shape", dtype: float32}'})
    error = refused(tmp_path, spec_text(KV, twin))
    assert "spec.yaml:7:13: ops[1] 'npu_kv_functional' does not pair with ops[0] 'npu_kv'" in error
    assert "1 mutated argument(s) + 1 non-aliased return(s) of npu_kv = 2 tensor(s)" in error
    assert "npu_kv_functional(Tensor cache, Tensor key) -> (Tensor, Tensor)" in error  # the fix


def test_accepts_a_twin_written_by_hand_that_pairs(tmp_path):
    twin = ("npu_kv_functional(Tensor cache, Tensor key) -> (Tensor, Tensor)",
            {"out0": '{shape: "[key.shape[0]]", dtype: float32}', "out1": '{shape: "cache.shape", dtype: "cache"}'})
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(KV, twin))
    root = generate(spec, tmp_path / "out")
    text = (root / "op_plugin/config/op_plugin_functions.yaml").read_text()
    assert text.count("npu_kv_functional(") == 1


def test_refuses_trailing_underscore_op_that_is_not_in_place(tmp_path):
    error = refused(tmp_path, spec_text(("npu_fill_(Tensor x, Tensor(a!) out) -> ()", {})))
    assert "spec.yaml:3:14: ops[0].schema [OPG103]" in error  # the schema contract already places it
    error = refused(tmp_path, spec_text(("npu_scale_(Tensor(a!) x, float s) -> Tensor(a!)", {}),
                                        extra="    tags: [inplace]\n"))
    assert "spec.yaml:3:13: ops[0].schema: 'npu_scale_' ends in '_', so torchgen pairs it as an in-place op with " \
        "'npu_scale'" in error
    assert "npu_scale_(Tensor(a!) self, ...) -> Tensor(a!)" in error and "drop the trailing '_'" in error


@pytest.mark.slow
def test_in_place_op_gets_its_functional_twin(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(("npu_scale_(Tensor(a!) self, float s) -> Tensor(a!)", {}),
                              extra="    tags: [inplace]\n    examples: [{self: {shape: [4, 8]}, s: 2.0}]\n"
                              "    reference: |\n      self.mul_(s)\n      return self\n"))
    root = generate(spec, tmp_path / "out")
    text = (root / "op_plugin/config/op_plugin_functions.yaml").read_text()
    assert "npu_scale_(Tensor(a!) self, float s) -> Tensor(a!)" in text
    assert "npu_scale(Tensor self, float s) -> Tensor" in text
    kernel = (root / "op_plugin/ops/opapi/ScaleKernelNpuOpApi.cpp").read_text()
    assert "EXEC_NPU_CMD(aclnnInplaceScale, self, s);\n  return self;" in kernel
    assert "at::Tensor self_out = self.clone(at::MemoryFormat::Contiguous);\n  EXEC_NPU_CMD(aclnnInplaceScale, self_out, s);" in kernel
    done = run_pytest(["-q", "-p", "no:cacheprovider", "opgen_checks"], cwd=root, timeout=600)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout[-3000:]


def test_refuses_a_namespace_other_than_npu(tmp_path):
    error = refused(tmp_path, spec_text(KV).replace("namespace: npu", "namespace: myops"))
    assert "spec.yaml:1:12: op-plugin's custom ops live in the 'npu' namespace" in error and "namespace: npu" in error


def test_refuses_a_data_dependent_size_at_its_rule(tmp_path):
    error = refused(tmp_path, spec_text(("npu_rows(Tensor x) -> Tensor",
                                         {"out0": '{shape: "[dynamic(max=x.shape[0])]", dtype: "x"}'})))
    assert "spec.yaml:5:21: ops[0].outputs.out0.shape is data-dependent" in error


def test_an_optional_tensor_return_is_refused_with_a_way_out_and_its_twin_is_written(tmp_path):
    """torch (parse_schema, Library.define, opcheck) and torchgen take `-> (Tensor, Tensor?)`; op-plugin has no such
    op and its kernel and Meta need every output's semantics, which cannot say when one is None. The loader's hint for
    an `outputs:` entry of it said "opgen writes a TODO fake", and the op_plugin target then asked for that very entry
    (a loop): the target's refusal names the return and a way that works; the twin, an always-present Tensor, is
    written."""
    optional = ("npu_maybe(Tensor x) -> (Tensor, Tensor? extra)", {"out0": '{shape: "x.shape", dtype: x}'})
    error = refused(tmp_path, spec_text(optional))
    assert "spec.yaml:3:13: ops[0]: returns extra ('Tensor?')" in error, error
    assert "return a Tensor that is always there" in error and "TODO fake" not in error
    error = refused(tmp_path, spec_text((optional[0], {**optional[1], "extra": '{shape: "x.shape", dtype: x}'})))
    assert "ops[0].outputs.extra: semantics can describe Tensor and Tensor[] returns, not 'Tensor?'" in error
    assert "the op_plugin target, which needs every output's semantics, refuses such a return" in error
    twin = ("npu_maybe(Tensor x) -> (Tensor, Tensor extra)",
            {"out0": '{shape: "x.shape", dtype: x}', "extra": '{shape: "[0]", dtype: x}'})
    spec = tmp_path / "twin.yaml"
    spec.write_text(spec_text(twin))
    done = opgen("new", str(spec), "--target", "op_plugin", "-o", str(tmp_path / "twin"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("block", "where", "message"), [
    ("    op_plugin: {aclnn: AddRmsNorm}\n", "spec.yaml:7:", "is not an aclnn function name"),
    ("    op_plugin: {kernel: gen_opapi}\n", "spec.yaml:7:", "gen_opapi cannot describe this op: it mutates"),
    ("    op_plugin: {exec: [cache, keys]}\n", "spec.yaml:7:", "'keys' is not an argument"),
    ("    op_plugin: {versions: [v2.1, v9.9]}\n", "spec.yaml:7:", "must be a range"),
    ("    op_plugin: {new_params: {mode: '\"a\"; system(\"x\")'}}\n", "spec.yaml:7:", "one C++ expression"),
    ("    op_plugin: {acl_op: maybe}\n", "spec.yaml:7:", "must be true or false"),
    ("    op_plugin: {aclnn_name: aclnnX}\n", "spec.yaml:7:", "did you mean 'aclnn'"),
])
def test_op_plugin_keys_are_checked_with_location(tmp_path, block, where, message):
    error = refused(tmp_path, spec_text(KV).rstrip("\n") + "\n" + block)
    assert where in error and message in error, error


def test_op_plugin_keys_are_ignored_by_the_package_target(tmp_path):
    """`op_plugin:` is read only by the op_plugin target; `--target package` overrides the spec's `target`."""
    done = opgen("new", str(REPO / "examples/op_plugin/rms_norm.yaml"), "--target", "package", "-o",
                 str(tmp_path / "pkg"), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "npu/ops.py" in done.stdout and "op_plugin_functions.yaml" not in done.stdout


def test_regenerating_in_the_directory_keeps_the_target(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "examples/op_plugin/add_rms_norm.yaml").read_text().replace("target: op_plugin\n", ""))
    root = generate(spec, tmp_path / "out")  # --target op_plugin on the command line ...
    assert "target: op_plugin" in (root / "opgen.yaml").read_text()  # ... is written into the stored spec
    before = snapshot(root)
    done = opgen("new", cwd=root)
    assert done.returncode == 0, done.stderr
    assert snapshot(root) == before


def test_demo_context_in_template_is_in_sync():
    from demo_contexts import demo_contexts, render_json

    for directory, context in demo_contexts(REPO).items():
        on_disk = (REPO / "templates" / directory / "cookiecutter.json").read_text(encoding="utf-8")
        assert on_disk == render_json(context), f"run `python tests/demo_contexts.py` ({directory} is stale)"


def test_plain_cookiecutter_renders_the_demo_like_opgen(tmp_path, monkeypatch):
    """`cookiecutter templates/op_plugin` + `templates/op_plugin_op` (no opgen) give what opgen new writes for
    the demo spec (empty renders, such as a missing kernel or derivatives file, are not written by opgen)."""
    config = tmp_path / "config.yaml"
    config.write_text(f"cookiecutters_dir: {tmp_path / 'cc'}\nreplay_dir: {tmp_path / 'replay'}\n")
    rendered: dict[str, bytes] = {}
    for template in ("op_plugin", "op_plugin_op"):  # TMPDIR: cookiecutter leaves its hook scripts there
        out = tmp_path / template
        done = subprocess.run([sys.executable, "-m", "cookiecutter", f"templates/{template}", "--no-input", "-o",
                               str(out)], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "COOKIECUTTER_CONFIG": str(config), "TMPDIR": str(tmp_path)}, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        rendered.update({k: v for k, v in snapshot(out / "op_plugin_contribution").items() if v.strip()})
    from demo_contexts import DEMO_EPOCH

    monkeypatch.setenv("SOURCE_DATE_EPOCH", DEMO_EPOCH)  # the demo's licence year
    reference = generate(REPO / "examples/op_plugin/rms_norm.yaml", tmp_path / "reference")
    assert rendered == {k: v for k, v in snapshot(reference).items() if not k.startswith(".opgen/")}


def test_an_op_drawing_random_numbers_needs_its_tag_as_torchgen_demands(tmp_path):
    """torchgen raises "nondeterministic_seeded tag missing" for an op with a Generator argument (seen on
    npu_sig_d above): opgen refuses it at the schema and names the tag; with the tag the YAML entry carries it."""
    text = """\
namespace: npu
ops:
  - schema: "npu_sample(Tensor x, *, Generator? generator=None) -> Tensor"
    outputs: {out0: {like: x}}
"""
    error = refused(tmp_path, text)
    assert "spec.yaml:3:13: ops[0]: torchgen requires the nondeterministic_seeded tag of an op with a Generator" in error
    assert "tags: [nondeterministic_seeded]" in error
    spec_path = tmp_path / "tagged.yaml"
    spec_path.write_text(text.replace("    outputs:", "    tags: [nondeterministic_seeded]\n    outputs:")
                         + "    op_plugin: {exec: [x, out0]}  # aclnn takes a seed and offset, not the Generator\n")
    root = generate(spec_path, tmp_path / "out")
    assert "    tags: nondeterministic_seeded\n" in (root / "op_plugin/config/op_plugin_functions.yaml").read_text()
