"""Run op-plugin's own code generator (torchnpugen, extracted from the torch-npu wheel) on a generated
op_plugin_functions.yaml fragment and print what it made of it, as JSON.

Usage: PYTHONPATH=<extracted wheel> python torchnpugen_probe.py FRAGMENT.yaml OUT_DIR TORCH_VERSION
Steps, as torch_npu's build runs them: gen_op_plugin_functions (version filter) -> schema parsing
(NativeFunction.from_yaml) -> functionalization grouping and kernels -> gen_opapi structured codegen.
"""

import copy
import json
import os
import subprocess
import sys

import yaml


def main() -> None:
    fragment, out_dir, version = sys.argv[1:4]
    os.environ["PYTORCH_VERSION"] = version
    subprocess.run([sys.executable, "-m", "torchnpugen.gen_op_plugin_functions", "-v", version, "-s", fragment,
                    "-o", out_dir], check=True)
    filtered_path = os.path.join(out_dir, "op_plugin_functions.yaml")
    with open(filtered_path, encoding="utf-8") as stream:
        filtered = yaml.safe_load(stream)

    from torchgen.selective_build.selector import SelectiveBuilder
    from torchnpugen.api import cpp
    from torchnpugen.api.types import NativeSignature
    from torchnpugen.context import native_function_manager
    from torchnpugen.gen import parse_native_yaml_struct
    from torchnpugen.gen_functionalization_type import gen_functionalization_definition
    from torchnpugen.struct.struct_codegen import compute_op_api_definition, parse_struct_yaml
    from torchnpugen.utils import get_grouped_native_functions_optional_out

    functions = parse_native_yaml_struct(copy.deepcopy(filtered))  # it pops keys
    signatures = {}
    for f in functions:
        with native_function_manager(f):
            sig = NativeSignature(f.func, prefix="", symint=False)
            args = ", ".join(a.defn() for a in sig.arguments())
            signatures[str(f.func.name)] = f"{cpp.returns_type(f.func.returns).cpp_type()} {cpp.name(f.func)}({args})"
    # the structured codegen first: parsing the custom yaml for functionalization changes torchnpugen's state
    structs = parse_struct_yaml(fragment, functions)
    generated = {s.name: "".join(compute_op_api_definition(s, False)) for s in structs}
    import torchgen
    from torchnpugen.custom_functions import parse_custom_yaml

    tags = os.path.join(os.path.dirname(torchgen.__file__), "packaged/ATen/native/tags.yaml")
    custom = parse_custom_yaml(filtered_path, tags).native_functions
    selector = SelectiveBuilder.get_nop_selector()
    groups = []
    for g in get_grouped_native_functions_optional_out(custom):
        if hasattr(g, "functional"):
            members = {kind: str(getattr(g, kind).func.name) for kind in ("functional", "inplace", "mutable", "out")
                       if getattr(g, kind) is not None}
            kernels = gen_functionalization_definition(selector, g)
            groups.append({"members": members, "functionalization_kernels": len(kernels)})
    print(json.dumps({"filtered": filtered, "signatures": signatures, "groups": groups, "gen_opapi": generated}))


if __name__ == "__main__":
    main()
