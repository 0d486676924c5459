"""An op's documentation as op-plugin writes it: the `_add_torch_npu_docstr` call of
codegen/templates/_op_plugin_docs.py (its sections, in the repo's order) and, for an exposed op, its page
under docs/zh/custom_APIs/torch_npu/ with the menu and API-list entries.

Everything comes from the spec: `doc:` (the description), the schema (prototype, parameters, defaults),
the outputs' shape/dtype rules, `op_plugin.versions` and `op_plugin.devices`, and the first example.
"""

from __future__ import annotations

import html

from ..schema.model import OptionalType, format_default, strip_alias
from ..spec.op_plugin import ALL_VERSIONS
from .calls import example_call

# op-plugin's docstring sections, in the order of its recent entries (npu_quant_max, npu_rotate_quant)
SECTIONS = ("功能描述:", "接口原型:", "参数说明:", "输出说明:", "支持的PyTorch版本:", "支持的型号:", "调用示例:")
# @SupportedDevices SoC -> the product names op-plugin's docs use
PRODUCTS = {
    "Ascend910B": "Atlas A2 训练系列产品/Atlas A2 推理系列产品",
    "Ascend910_93": "Atlas A3 训练系列产品/Atlas A3 推理系列产品",
    "Ascend950": "Ascend 950PR/Ascend 950DT",
    "Ascend310P": "Atlas 推理系列产品",
    "Ascend910": "Atlas 训练系列产品",
}
DOCS_DIR = "docs/zh/custom_APIs"
PAGES_DIR = f"{DOCS_DIR}/torch_npu"
MENU = f"{DOCS_DIR}/menu_Pytorch_API.md"
API_LIST = f"{PAGES_DIR}/torch_npu_list.md"


def public_name(entry) -> str:
    """The name a user calls, `torch_npu.<name>` (the dispatcher picks an overload): the schema's base name."""
    return entry.schema.name


def prototype(entry) -> str:
    return f"torch_npu.{entry.schema.name}{entry.func[len(entry.name):]}"


def description(entry) -> str:
    """`op_plugin.docs.description` (the repo's language), else `doc:`."""
    given = dict(entry.config.docs).get("description")
    return (given or entry.source.doc or f"{entry.name}: an NPU custom operator.").strip()


def _described(entry, name: str) -> str:
    """` text` of `op_plugin.docs.<name>` (an argument's or an output's), or nothing."""
    text = dict(entry.config.docs).get(name)
    return f"{text}" if text else ""


def summary(entry) -> str:
    """The first sentence of the description, for the API list."""
    text = " ".join(description(entry).split())
    for stop in ("。", ". "):
        if stop in text:
            return text.split(stop, 1)[0] + stop.strip()
    return text


def _type_name(arg) -> str:
    t = strip_alias(arg.type)
    base = strip_alias(t.elem) if isinstance(t, OptionalType) else t
    text = str(base).replace("ScalarType", "torch.dtype").replace("Scalar", "Number")
    if text.endswith("]"):
        text = f"List[{text[:text.index('[')]}]"
    return text


def parameter_lines(entry) -> list[str]:
    lines = []
    for arg in entry.schema.arguments:
        if arg.has_default:
            what = f"可选参数，默认值为{format_default(arg.default)}。"
        else:
            what = "必选参数。"
        if arg.is_write:
            what += "原地更新。"
        lines.append(f"{arg.name} ({_type_name(arg)}): {what}{_described(entry, arg.name)}")
    return lines


def output_lines(entry) -> list[str]:
    """One line per output (a Tensor[] as `List[Tensor]`, each of its tensors described); an op returning nothing
    names the arguments it updates in place."""
    if entry.kind == "inplace":
        return [f"{entry.schema.arguments[0].name} (Tensor): 原地更新后的输入。"]
    if not entry.outputs:
        return [f"无返回值，原地更新{'、'.join(a.name for a in entry.schema.arguments if a.is_write)}。"] if any(
            a.is_write for a in entry.schema.arguments) else ["无返回值。"]
    lines = []
    for out in entry.outputs:
        described = f"shape为{out.shape_rule.text}，数据类型为{out.dtype_rule.text}。{_described(entry, out.name)}"
        if out.is_list:
            lines.append(f"{out.name} (List[Tensor]): 共{out.length_rule.text}个Tensor，每个Tensor的{described}")
        else:
            lines.append(f"{out.name} (Tensor): {described}")
    return lines


def versions_line(versions) -> str:
    if versions == "all_version":
        return f"PyTorch {ALL_VERSIONS[0][1:]}及以上"
    if isinstance(versions, list):
        first = versions[0][1:]
        return f"PyTorch {first}及以上" if versions[1] == "newest" else f"PyTorch {first}至{versions[1][1:]}"
    return "PyTorch " + "、".join(v.strip()[1:] for v in versions.split(","))


def products(entry) -> list[str]:
    return [PRODUCTS.get(device, device) for device in entry.config.devices]


def example_lines(entry) -> list[str]:
    if not entry.source.examples:
        return []
    result = "" if entry.kind == "inplace" else ("outputs = " if len(entry.outputs) > 1 else "output = ")
    inputs, call = example_call(entry.schema, entry.source.examples[0], f"torch_npu.{public_name(entry)}", lead=result)
    return ["import torch", "import torch_npu", "", *inputs, call]


def docstring(entry) -> str:
    """The text of the docstring, sections as op-plugin's recent entries have them."""
    blocks = [[description(entry)], [prototype(entry)], parameter_lines(entry), output_lines(entry),
              [versions_line(entry.config.versions)], products(entry), example_lines(entry)]
    parts = [f"{head}\n" + "\n".join(block) for head, block in zip(SECTIONS, blocks) if block]
    return "\n" + "\n\n".join(parts) + "\n"


def doc_call(entry) -> str:
    """`_add_torch_npu_docstr(\\n    "npu_x",\\n    \"\"\"...\"\"\"\\n)` as the repo writes its 207 calls."""
    text = docstring(entry).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'_add_torch_npu_docstr(\n    "{public_name(entry)}",\n    """{text}"""\n)'


def page(entry) -> str:
    """docs/zh/custom_APIs/torch_npu/torch_npu-<name>.md, in the sections of the repo's API pages."""
    rows = [f"|  <term>{name}</term>   |     √    |" for name in products(entry)]
    examples = example_lines(entry)
    lines = [f"# torch_npu.{public_name(entry)}", "", "## 产品支持情况", "", "|产品             |  是否支持  |",
             "|:-------------------------|:----------:|", *rows, "", "## 功能说明", "",
             f"- API功能：{' '.join(description(entry).split())}", "", "## 函数原型", "", "```python",
             prototype(entry), "```", "", "## 参数说明", ""]
    for line in parameter_lines(entry):
        name, _, rest = line.partition(" ")
        kind, _, what = rest.partition(": ")
        lines += [f"- **{name}** (`{kind.strip('()')}`)：{what}", ""]
    lines += ["## 返回值说明", ""]
    for line in output_lines(entry):
        name, _, rest = line.partition(" ")
        kind, _, what = rest.partition(": ")
        lines += [f"- **{name}** (`{kind.strip('()')}`)：{what}", ""]
    lines += ["## 约束说明", "", f"- 支持{versions_line(entry.config.versions)}。", ""]
    if examples:
        lines += ["## 调用示例", "", "- 单算子调用", "", "    ```python"]
        lines += [f"    {part}".rstrip() for line in examples for part in line.split("\n")] + ["    ```", ""]
    return "\n".join(lines)


def page_path(entry) -> str:
    return f"{PAGES_DIR}/torch_npu-{public_name(entry)}.md"


def menu_line(entry, indent: str = "        ") -> str:
    name = public_name(entry)
    return f"{indent}-   [torch_npu.{name}](./torch_npu/torch_npu-{name}.md)"


def list_row(entry) -> str:
    """One row of torch_npu_list.md's HTML table (ids of the row's own, as the newest rows have)."""
    name, text = public_name(entry), html.escape(summary(entry), quote=False)
    cell = 'class="cellrowborder" valign="top"'
    return (f'<tr id="row_{name}"><td {cell} width="38.61%" headers="mcps1.2.3.1.1 "><p id="p_{name}_api">'
            f'<a name="p_{name}_api"></a><a name="p_{name}_api"></a><a href="torch_npu-{name}.md">'
            f"torch_npu.{name}</a></p>\n</td>\n"
            f'<td {cell} width="61.39%" headers="mcps1.2.3.1.2 "><p id="p_{name}_doc"><a name="p_{name}_doc"></a>'
            f'<a name="p_{name}_doc"></a>{text}</p>\n</td>\n</tr>')
