"""The non-tensor arguments reach aclnn converted as op-plugin converts them (issue 27, item 2).

g++ compiles the generated kernels, hand-written (opapi) and torchnpugen's (gen_opapi, from the wheel), against
tests/op_plugin/stub, whose EXEC_NPU_CMD converts every argument with the ConvertType overloads of op-plugin's
op_api_common_base.h and refuses, at compile time, what op-plugin's catch-all would pass to the C API as it is
(a c10::string_view, a c10::optional<int64_t>); running them prints what each argument became."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from new_helpers import opgen
from op_plugin_helpers import run_kernels

from opgen.op_plugin.model import plugin_ops
from opgen.spec.load import load_spec

EVERY_KIND = """\
namespace: npu
ops:
  - schema: "npu_conv_all(Tensor x, Tensor? w, str mode, int[] dims, bool[2] mask, Scalar alpha, ScalarType dtype, str? layout=None, str? tag=\\"t\\", int? k=None, float? eps=1e-05, bool? flag=None, ScalarType? out_dtype=None, Tensor[]? extras=None, int[]? sizes=None, Scalar? beta=None) -> Tensor"
    outputs: {out0: {like: x}}
    op_plugin:
      kernel: opapi
      none_values: {k: "-1", flag: "false", out_dtype: "x.scalar_type()"}
    examples:
      - {x: {shape: [2, 3]}, w: {shape: [3]}, mode: "rint", dims: [0], mask: [true, false], alpha: 2, dtype: float16}
  - schema: "npu_conv_gen(Tensor x, *, str mode=\\"rint\\", str? layout=None, int? k=None, float? eps=1e-05, ScalarType? out_dtype=None) -> Tensor"
    outputs: {out0: {like: x}}
    op_plugin:
      none_values: {k: "0", out_dtype: "at::kFloat"}
    examples:
      - {x: {shape: [4]}, layout: "BSND"}
"""
KINDS_ALL = ("-- aclnnConvAll: aclTensor* aclTensor* char* aclIntArray* aclBoolArray* aclScalar* aclDataType char* "
             "char* int64_t double bool aclDataType aclTensorList* aclIntArray* aclScalar* aclTensor*")


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, object]:
    work = tmp_path_factory.mktemp("convert")
    spec_path = work / "spec.yaml"
    spec_path.write_text(EVERY_KIND)
    done = opgen("new", str(spec_path), "--target", "op_plugin", "-o", str(work / "out"))
    assert done.returncode == 0, done.stderr
    return work / "out", load_spec(str(spec_path))


def _calls(spec, name):
    entry = next(e for e in plugin_ops(spec) if e.name == name)
    return [(entry.name, entry.schema, example) for example in entry.source.examples]


def test_every_argument_kind_is_converted_as_op_plugin_does(generated, tmp_path):
    root, spec = generated
    code = (root / "op_plugin/ops/opapi/ConvAllKernelNpuOpApi.cpp").read_text()
    for line in ("  char* mode_ptr = const_cast<char*>(mode.data());",
                 "  char* layout_ptr = layout.has_value() ? const_cast<char*>(layout.value().data()) : nullptr;",
                 '  char* tag_ptr = const_cast<char*>(tag.value_or("t").data());',
                 "  int64_t k_value = k.value_or(-1);", "  double eps_value = eps.value_or(1e-05);",
                 "  bool flag_value = flag.value_or(false);",
                 "  at::ScalarType out_dtype_value = out_dtype.value_or(x.scalar_type());",
                 "  at::TensorList extras_value = extras.value_or(at::TensorList());"):
        assert line in code, line
    assert KINDS_ALL in run_kernels(code, _calls(spec, "npu_conv_all"), tmp_path, exec_lines=True)


@pytest.mark.parametrize("planted", [
    ("EXEC_NPU_CMD(\n      aclnnConvAll,\n      x,\n      w,\n      mode_ptr,",
     "EXEC_NPU_CMD(\n      aclnnConvAll,\n      x,\n      w,\n      mode,"),  # the string passed as a string_view
    ("      k_value,", "      k,"),  # the optional int passed as an optional
    ("      extras_value,", "      extras,"),  # an optional TensorList
])
def test_the_compile_check_catches_an_argument_left_unconverted(generated, tmp_path, planted):
    root, spec = generated
    code = (root / "op_plugin/ops/opapi/ConvAllKernelNpuOpApi.cpp").read_text()
    old, new = planted
    assert old in code
    with pytest.raises(subprocess.CalledProcessError) as failure:
        run_kernels(code.replace(old, new, 1), _calls(spec, "npu_conv_all"), tmp_path)
    assert "EXEC_NPU_CMD would pass this argument to the aclnn C API as it is" in failure.value.stderr


def test_gen_opapi_converts_in_new_params(generated):
    """The same conversions as torchnpugen's `new_params` (its generated kernel is compiled against the stubs in
    test_op_plugin.py::test_cpp_signature_printer_matches_torchnpugen_on_many_types, which runs torchnpugen)."""
    root, _ = generated
    yaml_text = (root / "op_plugin/config/op_plugin_functions.yaml").read_text()
    assert ("      new_params:\n        mode_ptr: 'const_cast<char*>(mode.data())'\n"
            "        layout_ptr: 'layout.has_value() ? const_cast<char*>(layout.value().data()) : nullptr'\n"
            "        k_value: 'k.value_or(0)'\n        eps_value: 'eps.value_or(1e-05)'\n"
            "        out_dtype_value: 'out_dtype.value_or(at::kFloat)'\n"
            "      exec: aclnnConvGen, x, mode_ptr, layout_ptr, k_value, eps_value, out_dtype_value, out\n") in yaml_text


def refused(tmp_path: Path, text: str) -> str:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    done = opgen("new", str(spec), "--target", "op_plugin", "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "out").exists()
    return done.stderr


@pytest.mark.parametrize(("schema", "extra", "message"), [
    ("npu_f(Tensor x, float[] scales) -> Tensor", "",
     "spec.yaml:3:13: ops[0]: argument 'scales' of type 'float[]' has no ConvertType overload"),
    ("npu_f(Tensor x, int? group=None) -> Tensor", "",
     ("spec.yaml:3:13: ops[0]: argument 'group' ('int?', default None) reaches the aclnn call, and what None means "
      "to it is not in the schema")),
    ("npu_f(Tensor x, float[] scales) -> Tensor", "\n    op_plugin: {exec: [x, scales, out0]}",
     "spec.yaml:5:27: ops[0]: argument 'scales'"),  # placed at the exec item that passes it
    ("npu_f(Tensor x, int group) -> Tensor", "\n    op_plugin: {none_values: {group: '1'}}",
     "spec.yaml:5:31: ops[0].op_plugin.none_values: 'group' is not an optional non-tensor argument"),
])
def test_an_argument_aclnn_cannot_take_is_refused_at_its_place(tmp_path, schema, extra, message):
    text = f'namespace: npu\nops:\n  - schema: "{schema}"\n    outputs: {{out0: {{like: x}}}}{extra}\n'
    assert message in refused(tmp_path, text)


def test_an_argument_left_out_of_exec_needs_no_conversion(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text('namespace: npu\nops:\n  - schema: "npu_f(Tensor x, float[] scales, int? g=None) -> Tensor"\n'
                    "    outputs: {out0: {like: x}}\n    op_plugin: {exec: [x, out0]}\n")
    done = opgen("new", str(spec), "--target", "op_plugin", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
