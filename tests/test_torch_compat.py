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


def test_npugraph_ex_options_their_names_and_exit_hooks_in_both_layouts(tmp_path, monkeypatch):
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
    # the name npugraph_ex's capture_limit fallback warning gives the option ("The ... reached")
    assert torch_compat.npugraph_ex_option_field(flat, "capture_limit") == "capture_limit"
    assert torch_compat.npugraph_ex_option_field(nested, "capture_limit") == "static_capture_size_limit"
    assert (flat.pattern_fusion_pass, flat.capture_limit) == (False, 1)
    assert nested.experimental_config.pattern_fusion_pass is False
    assert nested.debug.aclgraph.static_capture_size_limit == 1
    assert nested.debug.aclgraph.disable_reinplace_inplaceable_ops_pass is False  # 2.9.1's transformation applied

    def hook():
        pass
    assert torch_compat.npugraph_ex_exit_hooks(types.SimpleNamespace(_finalize=hook)) == [hook]
    assert torch_compat.npugraph_ex_exit_hooks(types.SimpleNamespace(_finalize_graph_engine=hook)) == [hook]
    assert torch_compat.npugraph_ex_exit_hooks(types.SimpleNamespace()) == []


def _op_with_a_fake(style: str, namespace: str):
    """An op of `style` whose fake returns its input's shape; its library kept alive by the caller."""
    lib = torch.library.Library(namespace, "FRAGMENT")
    if style == "library":
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        torch.library.register_fake(f"{namespace}::twice", lambda x: torch.empty_like(x), lib=lib)
    else:
        @torch.library.custom_op(f"{namespace}::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        twice.register_fake(lambda x: torch.empty_like(x))
    return lib


def _fake_shape(namespace: str) -> tuple[int, ...]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return tuple(getattr(torch.ops, namespace).twice(torch.empty(3)).shape)


@pytest.mark.parametrize("style", ["library", "custom_op"])
@pytest.mark.parametrize("override", [True, False], ids=["allow_override", "swapped"])
def test_a_fake_registered_over_another_is_used_until_its_library_goes(style, override, monkeypatch):
    """Both ways register_fake_over takes, on this line's real fake registry: where register_fake takes
    allow_override (2.8 and later), and the swap in simple_registry 2.6 and 2.7 need (planted here by hiding the
    parameter; on 2.13 the registry keeps a stack of fakes, so the swap is checked on a holder standing for 2.7's)."""
    namespace = f"opgen_compat_{style}_{override}"
    keep = _op_with_a_fake(style, namespace)
    qualname = f"{namespace}::twice"
    if not override:
        monkeypatch.setattr(torch_compat, "register_fake_takes_override", lambda: False)
    from torch._library.simple_registry import singleton

    entry = singleton.find(qualname)
    stand_in = None
    if not override and style == "library" and isinstance(getattr(type(entry.fake_impl), "kernel", None), property):
        stand_in = types.SimpleNamespace(kernel=entry.fake_impl.kernel)  # 2.7's holder: one settable kernel
        monkeypatch.setattr(entry, "fake_impl", stand_in)
    before = stand_in.kernel if stand_in else None
    probe = torch.library.Library(namespace, "FRAGMENT")
    torch_compat.register_fake_over(qualname, lambda x: x.new_empty((7,)), probe)
    if stand_in:
        assert stand_in.kernel.func(torch.empty(3)).shape == (7,)
    else:
        assert _fake_shape(namespace) == (7,)
    probe._destroy()
    if stand_in:
        assert stand_in.kernel is before
    elif style == "library":
        assert _fake_shape(namespace) == (3,)
    del keep


def test_a_package_whose_tags_this_torch_lacks_is_skipped_naming_the_line_and_one_it_has_runs():
    """torch 2.6-2.12 have no torch.Tag.inplace / Tag.out: the tests of a package defined with one skip (the package
    refuses to import there); where torch has the tag, nothing is skipped."""
    torch_compat.skip_module_without_tags("inplace_ops", ("inplace",))  # torch 2.13 has it: returns
    with pytest.raises(pytest.skip.Exception, match=r"torch\.Tag\.no_such_tag .* torch 2\.\d+"):
        torch_compat.skip_module_without_tags("inplace_ops", ("inplace", "no_such_tag"))


def test_float8_calls_get_opgens_schema_check_only_where_torch_cannot_compare_float8(monkeypatch):
    from opgen.testing.schema_check import needs_own_schema_check

    sample = torch.zeros(2, dtype=torch.float8_e4m3fn)
    try:
        torch.allclose(sample, sample, equal_nan=True)  # what opcheck's test_schema compares arguments with
        compares = True
    except (RuntimeError, NotImplementedError):
        compares = False
    assert torch_compat.schema_check_compares_float8() is compares
    assert needs_own_schema_check({"x": sample, "n": 3}) is not compares
    assert not needs_own_schema_check({"x": sample.float()})
    monkeypatch.setattr(torch_compat, "schema_check_compares_float8", lambda: True)  # a line that can: torch's own
    assert not needs_own_schema_check({"x": sample})
