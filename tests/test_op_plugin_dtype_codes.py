"""A dtype-code argument (`int dst_type`, read with `from_code` under the spec's `dtype_codes:`) reaches aclnn as
op-plugin's kernels pass one, `c10_npu::GetAclDataType(dst_type)`, not as torch_npu's number; and the Meta reads the
module's own TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP where the checkout has it (a table of its own otherwise,
or where the module's map gives a code another dtype)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import torch
from new_helpers import REPO, opgen
from op_plugin_helpers import run_kernels

from opgen.spec.load import load_spec_text

FIXTURE = REPO / "tests" / "fixtures" / "op_plugin_root"
META = "op_plugin/python/meta/_meta_registrations.py"
SPEC = """namespace: npu
target: op_plugin
dtype_codes: {1: int8, 2: int32, 291: float8_e4m3fn}
ops:
  - schema: "npu_cast_code(Tensor x, int dst_type) -> Tensor"
    doc: "x cast to the dtype of torch_npu's code dst_type."
    outputs:
      out0: {like: x, dtype: "from_code(dst_type)"}
    op_plugin: {kernel: KERNEL}
    examples:
      - {x: {shape: [4, 8], dtype: float16}, dst_type: 2}
"""
MODULE_MAP = "\n\nTORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP = {1: torch.int8, 2: torch.int32, 291: torch.float8_e4m3fn}\n"


def added(tmp_path: Path, kernel: str, module_map: str = "") -> Path:
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    if module_map:
        with (root / META).open("a", encoding="utf-8") as meta:
            meta.write(module_map)
    spec = tmp_path / "codes.yaml"
    spec.write_text(SPEC.replace("KERNEL", kernel), encoding="utf-8")
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def meta_source(root: Path) -> str:
    tree = ast.parse((root / META).read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "npu_cast_code_meta"]
    node.decorator_list = []  # @impl(m, ...): the function alone is run here
    return ast.unparse(node)


def test_the_gen_opapi_entry_converts_the_code_and_the_meta_keeps_its_own_table(tmp_path):
    root = added(tmp_path, "gen_opapi")
    functions = (root / "op_plugin/config/op_plugin_functions.yaml").read_text(encoding="utf-8")
    assert "        dst_type_acl: 'c10_npu::GetAclDataType(dst_type)'\n      exec: aclnnCastCode, x, dst_type_acl, out" in (
        functions)
    assert "dtype_codes = {1: torch.int8" in meta_source(root)  # the fixture's module has no map


def test_the_kernel_passes_an_acl_data_type(tmp_path):
    root = added(tmp_path, "opapi")
    kernel = (root / "op_plugin/ops/opapi/CastCodeKernelNpuOpApi.cpp").read_text(encoding="utf-8")
    assert "  aclDataType dst_type_acl = c10_npu::GetAclDataType(dst_type);\n" in kernel
    schema = load_spec_text(SPEC.replace("KERNEL", "opapi"), "codes.yaml").ops[0]
    lines = run_kernels(kernel, [("npu_cast_code", schema.schema, schema.examples[0])], tmp_path / "harness",
                        exec_lines=True)
    assert "-- aclnnCastCode: aclTensor* aclDataType aclTensor*" in lines and "[4, 8] int32" in lines


@pytest.mark.parametrize(("module_map", "uses_module"), [
    (MODULE_MAP, True),
    (MODULE_MAP.replace("2: torch.int32", "2: torch.int64"), False),  # the module's 2 is another dtype: own table
])
def test_the_meta_reads_the_modules_map_where_it_agrees(tmp_path, module_map, uses_module):
    root = added(tmp_path, "gen_opapi", module_map)
    source = meta_source(root)
    assert ("TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP[dst_type]" in source) is uses_module
    assert ("dtype_codes = " in source) is not uses_module
    scope = {"torch": torch, "TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP": {2: torch.int32}}
    exec(source, scope)  # noqa: S102
    assert scope["npu_cast_code_meta"](torch.empty(4, 8, device="meta"), 2).dtype == torch.int32


TORCH_NPU_SPEC = SPEC.replace("{1: int8, 2: int32, 291: float8_e4m3fn}", "{1: int8, 3: int32, 24: float8_e4m3fn}").replace(
    "dst_type: 2}", "dst_type: 3}")


@pytest.mark.parametrize("codes", ["torch_npu", "own"])
def test_the_kernel_allocates_a_coded_output_with_the_repos_helpers_where_the_codes_are_torch_npus(tmp_path, codes):
    """A reviewer's comment (issue 38): the kernel hand-rolls a switch where the repo has helpers. With torch_npu's own
    codes the output's dtype is `npu_preparation::convert_to_scalar_type` of the aclDataType aclnn gets (as
    AntiQuant's kernel writes it); a table of the spec's own (2 is int16 to torch_npu) keeps the switch over it.
    Both allocate the example's dtype on the stub, and both check the code (the kernel and the Meta)."""
    text = TORCH_NPU_SPEC if codes == "torch_npu" else SPEC
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    spec = tmp_path / "codes.yaml"
    spec.write_text(text.replace("KERNEL", "opapi"), encoding="utf-8")
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    kernel = (root / "op_plugin/ops/opapi/CastCodeKernelNpuOpApi.cpp").read_text(encoding="utf-8")
    helper = ("  aclDataType dst_type_acl = c10_npu::GetAclDataType(dst_type);\n"
              "  at::Tensor out0 = npu_preparation::apply_tensor_without_format(\n"
              "      x.sizes(), x.options().dtype(npu_preparation::convert_to_scalar_type(dst_type_acl)));\n")
    assert (helper in kernel) is (codes == "torch_npu"), kernel
    assert ("switch (" in kernel) is (codes == "own")
    assert "TORCH_CHECK(\n      dst_type == 1 || dst_type == " in kernel
    schema = load_spec_text(text.replace("KERNEL", "opapi"), "codes.yaml").ops[0]
    lines = run_kernels(kernel, [("npu_cast_code", schema.schema, schema.examples[0])], tmp_path / "harness")
    assert lines[1:] == ["[4, 8] int32"]
    assert "    torch._check(\n        dst_type in (1, " in (root / META).read_text(encoding="utf-8")


def test_the_gen_opapi_dtype_of_a_torch_npu_code_is_the_repos_conversion(tmp_path):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    spec = tmp_path / "codes.yaml"
    spec.write_text(TORCH_NPU_SPEC.replace("KERNEL", "gen_opapi"), encoding="utf-8")
    assert opgen("add", "--op-plugin-root", str(root), str(spec)).returncode == 0
    functions = (root / "op_plugin/config/op_plugin_functions.yaml").read_text(encoding="utf-8")
    assert "        dtype: npu_preparation::convert_to_scalar_type(c10_npu::GetAclDataType(dst_type))\n" in functions


def test_codes_torch_npu_reads_as_other_dtypes_are_a_located_warning(tmp_path):
    """The kernel hands the code to aclnn through c10_npu::GetAclDataType, which reads torch_npu's table: the spec's
    `2: int32` is int16 there and its `291: float8_e4m3fn` is float8_e5m2, so the Meta and the device would disagree.
    The warning stands at `dtype_codes:`; the twin, torch_npu's own codes, gets none."""
    for text, warned in ((SPEC, True), (TORCH_NPU_SPEC, False)):
        root = Path(shutil.copytree(FIXTURE, tmp_path / f"op-plugin-{warned}"))
        spec = tmp_path / f"codes-{warned}.yaml"
        spec.write_text(text.replace("KERNEL", "opapi"), encoding="utf-8")
        done = opgen("add", "--op-plugin-root", str(root), str(spec))
        assert done.returncode == 0, done.stderr
        line = (f"warning: {spec}:3:14: dtype_codes 2: int32 (torch_npu: int16), 291: float8_e4m3fn (torch_npu: "
                "float8_e5m2): the kernels pass the code to aclnn through c10_npu::GetAclDataType")
        assert (line in done.stderr) is warned, done.stderr
