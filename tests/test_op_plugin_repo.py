"""`opgen add` writes an op-add pull request as op-plugin's own contributors do (issue 27), on the fixture checkout
(tests/fixtures/op_plugin_root, in op-plugin's formats): every file one touches, each in the repo's style, updated
in place when the spec changes, and nothing of anyone else's touched."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from new_helpers import REPO, opgen, snapshot
from test_op_plugin_add import FIXTURE, RECORD, only_added

NEW_OPS = REPO / "tests" / "op_plugin" / "new_ops.yaml"
MAIN_NAMES = ["npu_scale_shift_", "npu_row_topk", "npu_gated_act"]
ENTRIES = ["npu_scale_shift_", "npu_scale_shift", "npu_row_topk", "npu_gated_act"]


def add(root: Path, spec: Path):
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def added(tmp_path_factory) -> tuple[Path, dict[str, bytes], dict[str, bytes]]:
    """The fixture checkout before and after `opgen add tests/op_plugin/new_ops.yaml` (shared: read only)."""
    root = Path(shutil.copytree(FIXTURE, tmp_path_factory.mktemp("added") / "op-plugin"))
    before = snapshot(root)
    add(root, NEW_OPS)
    return root, before, {k: v for k, v in snapshot(root).items() if k != RECORD}


def text(files: dict[str, bytes], path: str) -> str:
    return files[path].decode("utf-8")


def test_every_file_of_an_op_add_pull_request_in_the_repos_formats(added):
    _, before, after = added
    assert sorted(set(after) - set(before)) == [
        "docs/zh/custom_APIs/torch_npu/torch_npu-npu_gated_act.md",  # the exposed op only
        "op_plugin/ops/opapi/RowTopkKernelNpuOpApi.cpp", "op_plugin/ops/opapi/ScaleShiftKernelNpuOpApi.cpp",
        "test/test_custom_ops/test_npu_gated_act.py", "test/test_custom_ops/test_npu_row_topk.py",
        "test/test_custom_ops/test_npu_scale_shift_.py"]  # npu_gated_act's kernel: torchnpugen writes it (gen_opapi)
    for path in before:
        if before[path] != after[path]:
            only_added(text(before, path), text(after, path))
    # the compatibility test's keys: every entry, and the public op's signature forms, with their versions
    schema = json.loads(text(after, "test/core_tests/torch_npu_OpApi_schema_all.json"))
    functions = yaml.safe_load(text(after, "op_plugin/config/op_plugin_functions.yaml"))["custom"]
    ours = [e["func"] for e in functions if e["func"].split("(")[0] in ENTRIES]
    assert len(ours) == 4 and all(schema[f"func: {func}"] == {"version": ["all_version"]} for func in ours)
    assert {k: v for k, v in schema.items() if "npu_gated_act(*" in k} == {
        "op_api: torch_npu.npu_gated_act(*args, **kwargs)": {"version": ["v2.1", "v2.5", "v2.6", "v2.7"]},
        "op_api: torch_npu.npu_gated_act(*args: _P.args, **kwargs: _P.kwargs) -> ~_T": {"version": ["v2.8", "newest"]}}
    assert not any(k.startswith("op_api") and ("row_topk" in k or "scale_shift" in k) for k in schema)
    allow = json.loads(text(after, "test/allowlist_for_publicAPI.json"))["torch_npu"]
    assert allow["all_version"][-1] == "npu_gated_act" and sum(v.count("npu_gated_act") for v in allow.values()) == 1
    # exposed: only where asked (the twin neither)
    assert [e["func"].split("(")[0] for e in functions if "exposed" in e and e["func"].split("(")[0] in ENTRIES] == [
        "npu_gated_act"]
    # the fake-tensor test: one class per spec op, after the last class, before `if __name__`
    fake = text(after, "test/core_tests/test_fake_tensor.py")
    assert fake.index("class TestNpuTranspose") < fake.index("class TestNpuScaleShiftMeta") < fake.index(
        "class TestNpuGatedActMeta") < fake.index('if __name__ == "__main__":')
    assert "def test_npu_scale_shift_meta(self):" in fake and "@SupportedDevices(['Ascend910B', 'Ascend950'])" in fake
    ast.parse(fake)
    # the docs of the exposed op: its page, its line in the menu and its row in the API list, in alphabetical place
    menu = text(after, "docs/zh/custom_APIs/menu_Pytorch_API.md").splitlines()
    assert menu[menu.index("        -   [torch_npu.npu_gated_act](./torch_npu/torch_npu-npu_gated_act.md)") + 1] == (
        "        -   [torch_npu.npu_gelu](./torch_npu/torch_npu-npu_gelu.md)")
    rows = text(after, "docs/zh/custom_APIs/torch_npu/torch_npu_list.md")
    assert rows.index("torch_npu-npu_anti_quant.md") < rows.index("torch_npu-npu_gated_act.md") < rows.index(
        "torch_npu-npu_swiglu.md")
    page = text(after, "docs/zh/custom_APIs/torch_npu/torch_npu-npu_gated_act.md")
    assert [line for line in page.splitlines() if line.startswith("## ")] == [
        "## 产品支持情况", "## 功能说明", "## 函数原型", "## 参数说明", "## 返回值说明", "## 约束说明", "## 调用示例"]


def test_the_yaml_and_the_kernels_read_as_the_repos_own(added):
    _, _, after = added
    functions = text(after, "op_plugin/config/op_plugin_functions.yaml")
    block = functions[functions.index("  - func: npu_gated_act("):]
    block = block[:block.index("\n\n")] if "\n\n" in block else block
    assert block.splitlines()[3:] == [
        "    gen_opapi:", "      out:",
        "        size: '{x.size(0), x.size(1) / 2}'",  # a brace list, single-quoted, as op-plugin writes sizes
        "        dtype: x",
        "      new_params:",  # the str reaches aclnn as a char*, the optional int as its value
        "        act_ptr: 'const_cast<char*>(act.data())'",
        "        group_value: 'group.value_or(-1)'",
        "      exec: aclnnGatedAct, x, bias, act_ptr, group_value, out"]
    assert '"' not in "".join(line for line in block.splitlines() if not line.lstrip().startswith("- func:"))
    kernel = text(after, "op_plugin/ops/opapi/ScaleShiftKernelNpuOpApi.cpp")
    assert kernel.startswith("// Copyright (c) ") and "// Licensed under the BSD 3-Clause License" in kernel
    assert "  double shift_value = shift.value_or(0.0);\n  EXEC_NPU_CMD(aclnnInplaceScaleShift, self, scale, " \
        "shift_value, alpha);\n  return self;\n}" in kernel
    assert kernel.endswith("} // namespace op_api\n")
    topk = text(after, "op_plugin/ops/opapi/RowTopkKernelNpuOpApi.cpp")
    assert "std::tuple<at::Tensor, at::Tensor, at::Tensor> npu_row_topk(\n    const at::Tensor& x,\n" in topk
    assert "auto total_size = op_infer::reduce_ops_npu_output_size(x, dims, keepdim);" in topk  # op_infer's helper
    assert "at::ScalarType index_dtype_value = index_dtype.value_or(at::kLong);" in topk
    test = text(after, "test/test_custom_ops/test_npu_gated_act.py")
    assert test.startswith("import itertools\n\nimport torch\nimport torch_npu\n")
    assert test.count("@SupportedDevices(['Ascend910B', 'Ascend950'])") == 4


def test_the_docstring_has_the_repos_sections(added):
    _, _, after = added
    docs = text(after, "codegen/templates/_op_plugin_docs.py")
    call = docs[docs.index('_add_torch_npu_docstr(\n    "npu_gated_act",'):]
    assert call.startswith('_add_torch_npu_docstr(\n    "npu_gated_act",\n    """\n功能描述:\n')
    assert call.index('"""\n)') > 0 and '""",\n)' not in call  # no trailing comma, as the repo's 207 calls
    sections = [line for line in call[:call.index('"""\n)')].splitlines() if re.fullmatch(r"\S+:", line)]
    assert sections == ["功能描述:", "接口原型:", "参数说明:", "输出说明:", "支持的PyTorch版本:", "支持的型号:", "调用示例:"]
    assert "act (str): 可选参数，默认值为\"gelu\"。" in call
    assert 'output = torch_npu.npu_gated_act(x, bias, act="silu")' in call
    tree = ast.parse(docs)
    names = [n.value.args[0].value for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert names.count("npu_gated_act") == 1 and "npu_scale_shift" not in names  # no docstring for the twin


def _edit(spec: Path, old: str, new: str) -> None:
    content = spec.read_text(encoding="utf-8")
    assert old in content, old
    spec.write_text(content.replace(old, new, 1), encoding="utf-8")


@pytest.mark.slow
def test_re_adding_after_spec_changes_updates_opgens_pieces_in_place(tmp_path):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    spec = tmp_path / "ops.yaml"
    shutil.copy(NEW_OPS, spec)
    add(root, spec)
    first = snapshot(root)
    # a doc-only change: the docstring, the doc page and the API-list row, in place (one docstring per op)
    _edit(spec, "act gelu or silu.", "act is gelu or silu (see the paper).")
    add(root, spec)
    second = snapshot(root)
    changed = sorted(p for p in first if first[p] != second[p] and p != RECORD)
    assert changed == ["codegen/templates/_op_plugin_docs.py", "docs/zh/custom_APIs/torch_npu/torch_npu-npu_gated_act.md",
                       "docs/zh/custom_APIs/torch_npu/torch_npu_list.md"]
    docs = text(second, "codegen/templates/_op_plugin_docs.py")
    assert docs.count('"npu_gated_act",') == 1 and "(see the paper)" in docs
    assert len(docs.splitlines()) == len(text(first, "codegen/templates/_op_plugin_docs.py").splitlines())
    # a new argument: every entry of the op follows, where it stands
    _edit(spec, 'int? group=None) -> Tensor"', 'int? group=None, float beta=0.0) -> Tensor"')
    add(root, spec)
    third = snapshot(root)
    functions = text(third, "op_plugin/config/op_plugin_functions.yaml")
    assert functions.count("- func: npu_gated_act(") == 1 and "float beta=0.0) -> Tensor" in functions
    assert "exec: aclnnGatedAct, x, bias, act_ptr, group_value, beta, out" in functions
    schema = json.loads(text(third, "test/core_tests/torch_npu_OpApi_schema_all.json"))
    assert [k for k in schema if k.startswith("func: npu_gated_act(")] == [
        'func: npu_gated_act(Tensor x, Tensor? bias=None, *, str act="gelu", int? group=None, float beta=0.0) -> Tensor']
    assert "def npu_gated_act_meta(x, bias=None, *, act=\"gelu\", group=None, beta=0.0):" in text(
        third, "op_plugin/python/meta/_meta_registrations.py")
    # not exposed any more: its public-API pieces go, its other pieces stay
    _edit(spec, "      exposed: true\n", "")
    add(root, spec)
    fourth = snapshot(root)
    assert "docs/zh/custom_APIs/torch_npu/torch_npu-npu_gated_act.md" not in fourth
    assert "npu_gated_act" not in text(fourth, "docs/zh/custom_APIs/menu_Pytorch_API.md")
    assert text(fourth, "docs/zh/custom_APIs/torch_npu/torch_npu_list.md") == text(
        FIXTURE_FILES, "docs/zh/custom_APIs/torch_npu/torch_npu_list.md")
    assert text(fourth, "test/allowlist_for_publicAPI.json") == text(FIXTURE_FILES, "test/allowlist_for_publicAPI.json")
    assert "op_api: torch_npu.npu_gated_act" not in text(fourth, "test/core_tests/torch_npu_OpApi_schema_all.json")
    functions = text(fourth, "op_plugin/config/op_plugin_functions.yaml")
    assert "exposed" not in functions[functions.index("- func: npu_gated_act("):]
    assert add(root, spec).stdout.startswith("nothing to do")


FIXTURE_FILES = snapshot(FIXTURE)


@pytest.mark.slow
def test_a_piece_edited_by_hand_is_kept_and_the_change_printed(tmp_path):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    spec = tmp_path / "ops.yaml"
    shutil.copy(NEW_OPS, spec)
    add(root, spec)
    kernel = root / "op_plugin/ops/opapi/RowTopkKernelNpuOpApi.cpp"
    edited = kernel.read_text().replace("  EXEC_NPU_CMD(", "  // my tuning\n  EXEC_NPU_CMD(")
    kernel.write_text(edited)
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    meta.write_text(meta.read_text().replace("    return values, indices, total", "    return values, indices, total  # ok"))
    # a change the edited pieces do not see: nothing to say
    _edit(spec, "and the sum of x over dims.", "and the sum of x over `dims`.")
    done = add(root, spec)
    assert "note:" not in done.stderr and kernel.read_text() == edited
    # a change they do see: kept, and the change the spec would have made is printed
    _edit(spec, "bool keepdim=False, ScalarType?", "bool keepdim=True, ScalarType?")  # the Meta's default
    _edit(spec, "none_values: {index_dtype: at::kLong}", "none_values: {index_dtype: at::kLong}\n      aclnn: aclnnTopkV2")
    done = add(root, spec)
    assert kernel.read_text() == edited and "  # ok" in meta.read_text()
    assert "op_plugin/ops/opapi/RowTopkKernelNpuOpApi.cpp was edited since opgen add wrote it and is kept" in done.stderr
    assert "npu_row_topk in op_plugin/python/meta/_meta_registrations.py was edited" in done.stderr
    assert "+def npu_row_topk_meta(x, k, dims, keepdim=True, index_dtype=None):" in done.stderr
    assert "+  EXEC_NPU_CMD(aclnnTopkV2, x, k, dims, keepdim, index_dtype_value, values, indices, total);" in done.stderr
    assert "bool keepdim=True" in (root / "op_plugin/config/op_plugin_functions.yaml").read_text()  # not edited: updated


BACKWARD = """namespace: npu
ops:
  - schema: "npu_minmax_norm(Tensor self, float eps=1e-06) -> Tensor"
    outputs: {out0: {like: self}}
    op_plugin:
      backward: {self: "FORMULA"}
"""


@pytest.mark.parametrize(("formula", "error"), [
    ("npu_minmax_norm_backward(grad, self, eps)", ("spec.yaml:6:25: ops[0].op_plugin.backward: "
                                                   "'npu_minmax_norm_backward' is neither an op of the spec nor of "
                                                   "the checkout's op_plugin_functions.yaml")),
    ("grad * npu_transpose(self, [0], true).sum() + npu_oops(grad)", ("spec.yaml:6:71: ops[0].op_plugin.backward: "
                                                                      "'npu_oops'")),
    ("npu_transpose_backward(grad, self.sizes(), true)", None),  # an op of the checkout
    ("at::npu_whatever(grad) * grad.mul(2) + maybe_multiply(grad, eps)", None),  # qualified, a method, torch's helper
])
def test_a_backward_formula_calling_an_op_that_exists_nowhere_is_refused_at_it(tmp_path, formula, error):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    functions = root / "op_plugin/config/op_plugin_functions.yaml"
    functions.write_text(functions.read_text().replace("  # activations\n", "  - func: npu_transpose_backward(Tensor "
                                                       "grad, int[] sizes, bool c) -> Tensor\n  # activations\n"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(BACKWARD.replace("FORMULA", formula))
    before = snapshot(root)
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    if error is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2 and error in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and snapshot(root) == before


def test_the_kernel_follows_the_checkouts_own_clang_format(tmp_path):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    style = root / ".clang-format"
    style.write_text(style.read_text().replace("IndentWidth: 2", "IndentWidth: 3"))
    add(root, REPO / "examples/op_plugin/kv_cache_update.yaml")
    kernel = (root / "op_plugin/ops/opapi/KvCacheUpdateKernelNpuOpApi.cpp").read_text()
    assert "\n   EXEC_NPU_CMD(" in kernel and "\n  EXEC_NPU_CMD(" not in kernel


@pytest.mark.parametrize("spec", [REPO / "examples/op_plugin/kv_cache_update.yaml", NEW_OPS])
def test_without_clang_format_the_kernels_are_already_laid_out_as_it_would(spec):
    """What opgen itself writes (signature, allocations, conversions, the call, the return) is what clang-format
    makes of it under op-plugin's rules: only a size lambda from the semantics printer is left to the formatter."""
    from opgen.op_plugin.clangformat import executable, format_cpp
    from opgen.op_plugin.kernel import kernel_file
    from opgen.op_plugin.model import plugin_ops
    from opgen.op_plugin.render import by_spec_op
    from opgen.spec.load import load_spec

    if executable() is None:
        pytest.fail("clang-format is not installed (it is part of the test extra)")
    checked = 0
    for group in by_spec_op(plugin_ops(load_spec(str(spec)))).values():
        kernels = [entry for entry in group if entry.kernel == "opapi"]
        source = kernel_file(kernels, group[0].config.acl_op) if kernels else ""
        if source and "[&]" not in source:
            assert format_cpp(source) == source
            assert format_cpp(source, FIXTURE / ".clang-format") == source
            checked += 1
    assert checked >= 1
