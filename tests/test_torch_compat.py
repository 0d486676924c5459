"""opgen/testing/torch_compat.py: each switch takes the line's own way, checked here on this torch by taking the
other line's way too (the attribute a line lacks removed), so both branches run on every line."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
from opgen.testing import torch_compat


def test_the_computed_kernel_reads_the_same_from_the_dump_table_as_from_torch_s_own_query(monkeypatch):
    direct = torch_compat.computed_kernel_debug("aten::add.Tensor", "CPU")
    monkeypatch.delattr(torch._C, "_dispatch_get_computed_kernel_for_dispatch_key", raising=False)
    dumped = torch_compat.computed_kernel_debug("aten::add.Tensor", "CPU")
    assert "registered at" in direct and "registered at" in dumped
    assert direct.split("registered at ")[1].split(":")[0] == dumped.split("registered at ")[1].split(":")[0]
    with pytest.raises(RuntimeError):  # no kernel at that key: as torch's own query says
        torch_compat.computed_kernel_debug("aten::add.Tensor", "NoSuchKey")


def test_custom_op_s_own_tags_are_read_off_torch():
    tags = torch_compat.custom_op_added_tags()
    assert "pt2_compliant_tag" in tags and tags <= {tag.name for tag in torch.Tag.__members__.values()}


def test_the_aliasing_check_is_turned_on_only_where_the_line_has_it(monkeypatch):
    from torch._functorch import config

    with torch_compat.custom_op_aliasing_raises() as raises:
        assert raises == hasattr(config, "error_on_custom_op_aliasing")
    monkeypatch.setattr(torch_compat, "has_custom_op_aliasing_check", lambda: False)
    with torch_compat.custom_op_aliasing_raises() as raises:  # a line without it (2.9 and older): no patch
        assert raises is False


def test_npugraph_ex_options_and_exit_hooks_in_both_layouts(tmp_path, monkeypatch):
    """torch-npu 2.7.1.postN/2.13 keep options as CompilerConfig fields; 2.9.1 nests them, at the paths of its option
    map (the map and a config built as 2.9.1 builds them, in a package of that name)."""
    flat = types.SimpleNamespace(pattern_fusion_pass=True, capture_limit=64)
    package = tmp_path / "fake_npugraph_ex" / "configs"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "npugraphex_config.py").write_text(
        "class _NpuGraphExConfig:\n"
        "    OPTIONS_TO_CONFIG_MAP = {'pattern_fusion_pass': 'experimental_config.pattern_fusion_pass',\n"
        "                             'capture_limit': 'debug.aclgraph.static_capture_size_limit',\n"
        "                             'inplace_pass': 'debug.aclgraph.disable_reinplace_inplaceable_ops_pass'}\n"
        "    OPTIONS_TO_CONFIG_TRANSFORMATIONS = {'inplace_pass': lambda x: not x}\n")
    (package.parent / "config.py").write_text(
        "from types import SimpleNamespace as N\n"
        "class CompilerConfig:\n"
        "    def __init__(self):\n"
        "        self.experimental_config = N(pattern_fusion_pass=True)\n"
        "        self.debug = N(aclgraph=N(static_capture_size_limit=64, disable_reinplace_inplaceable_ops_pass=False))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from fake_npugraph_ex.config import CompilerConfig

    nested = CompilerConfig()
    for config in (flat, nested):
        torch_compat.set_npugraph_ex_option(config, "pattern_fusion_pass", False)
        torch_compat.set_npugraph_ex_option(config, "capture_limit", 1)
    torch_compat.set_npugraph_ex_option(nested, "inplace_pass", True)
    assert (flat.pattern_fusion_pass, flat.capture_limit) == (False, 1)
    assert nested.experimental_config.pattern_fusion_pass is False
    assert nested.debug.aclgraph.static_capture_size_limit == 1
    assert nested.debug.aclgraph.disable_reinplace_inplaceable_ops_pass is False  # 2.9.1's transformation applied

    def hook():
        pass
    assert torch_compat.npugraph_ex_exit_hooks(types.SimpleNamespace(_finalize=hook)) == [hook]
    assert torch_compat.npugraph_ex_exit_hooks(types.SimpleNamespace(_finalize_graph_engine=hook)) == [hook]
    assert torch_compat.npugraph_ex_exit_hooks(types.SimpleNamespace()) == []
