"""What the checks need from torch that differs between the torch lines opgen supports (2.6 and later), one function
per feature, each asking torch (or npugraph_ex) rather than its version: the checks call these, never compare
versions. Importing it imports nothing heavy (the npugraph_ex loader stays torch-free)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


def has_custom_op_aliasing_check() -> bool:
    """functorch's `error_on_custom_op_aliasing` (torch 2.10 and later): a custom op's output that is an input's
    memory raises at the first compiled call instead of warning."""
    from torch._functorch import config

    return hasattr(config, "error_on_custom_op_aliasing")


@contextlib.contextmanager
def custom_op_aliasing_raises() -> Iterator[bool]:
    """Around a compiled call: torch's aliasing check raises, where the line has it; yields whether it does."""
    if not has_custom_op_aliasing_check():
        yield False
        return
    from torch._functorch import config

    with config.patch(error_on_custom_op_aliasing=True):
        yield True


def computed_kernel_debug(name: str, key: str) -> str:
    """The dispatcher's description of the kernel it computes for op `name` at dispatch key `key` ("registered at
    FILE:LINE ..."): `_dispatch_get_computed_kernel_for_dispatch_key` (torch 2.8 and later), else the line of
    `key` in the op's dumped dispatch table (2.6, 2.7). RuntimeError when there is none."""
    import torch

    get = getattr(torch._C, "_dispatch_get_computed_kernel_for_dispatch_key", None)
    if get is not None:
        return repr(get(name, key))
    table = torch._C._dispatch_dump_table(name)
    line = next((text for text in table.splitlines() if text.startswith(f"{key}: ")), None)
    if line is None or "registered at" not in line:
        raise RuntimeError(f"no kernel for {name} at {key}")
    return line


@functools.cache
def schema_check_compares_float8() -> bool:
    """opcheck's test_schema (SchemaCheckMode) compares arguments with torch.allclose, which CPU torch implements for
    no float8 dtype up to 2.15 ("mul_cpu_reduced_float" not implemented for 'Float8_e4m3fn'): where it raises, the
    checks ask test_schema's questions themselves (schema_check)."""
    import torch

    sample = torch.zeros(1, dtype=torch.float8_e4m3fn)
    try:
        torch.allclose(sample, sample, equal_nan=True)
    except (RuntimeError, NotImplementedError):
        return False
    return True


@functools.cache
def custom_op_added_tags() -> frozenset[str]:
    """The tags torch.library.custom_op gives every op by itself, by name: pt2_compliant_tag, and on 2.6 and 2.7
    needs_fixed_stride_order too. Read off a probe op (in a namespace of its own), as torch defines it."""
    import torch

    @torch.library.custom_op("opgen_torch_compat::probe", mutates_args=(), schema="(Tensor x) -> Tensor")
    def probe(x):
        return x.clone()

    return frozenset(tag.name for tag in torch.ops.opgen_torch_compat.probe.default.tags)




def capture_data_dependent_outputs() -> None:
    """Dynamo compiles an op whose output size is data-dependent with fullgraph=True only with
    `capture_dynamic_output_shape_ops` on torch 2.6 and 2.7 (later lines capture the op's unbacked sizes as they
    are): on, for the tests of such an op, as the generated README tells users to do in their models."""
    import torch._dynamo

    torch._dynamo.config.capture_dynamic_output_shape_ops = True


# --- npugraph_ex (torch-npu) --------------------------------------------------------------------------

EXIT_HOOKS = ("_finalize", "_finalize_graph_engine")  # npugraph_ex's atexit hook: 2.7.1.postN/2.13's, 2.9.1's


def npugraph_ex_exit_hooks(module) -> list:
    """The functions npugraph_ex's package registers with atexit (their name changed between torch-npu lines)."""
    return [hook for name in EXIT_HOOKS if callable(hook := getattr(module, name, None))]


def _option_path(config, name: str) -> tuple[list[str], str]:
    """Where CompilerConfig `config` keeps option `name`: the configs it is nested in, and its field."""
    if hasattr(config, name):
        return [], name
    import importlib

    package = type(config).__module__.split(".")[0]
    options = importlib.import_module(f"{package}.configs.npugraphex_config")._NpuGraphExConfig
    *owners, field = options.OPTIONS_TO_CONFIG_MAP[name].split(".")
    return owners, field


def set_npugraph_ex_option(config, name: str, value) -> None:
    """An npugraph_ex option on its CompilerConfig: a field of its own on most torch-npu lines; torch-npu 2.9.1 keeps
    most in nested configs (pattern_fusion_pass in experimental_config, capture_limit as
    debug.aclgraph.static_capture_size_limit), at the path its own option map names, with its value transformation."""
    owners, field = _option_path(config, name)
    if not owners and field == name:
        setattr(config, name, value)
        return
    import importlib

    options = importlib.import_module(f"{type(config).__module__.split('.')[0]}.configs.npugraphex_config")
    for owner in owners:
        config = getattr(config, owner)
    transform = options._NpuGraphExConfig.OPTIONS_TO_CONFIG_TRANSFORMATIONS.get(name, lambda v: v)
    setattr(config, field, transform(value))


def npugraph_ex_option_field(config, name: str) -> str:
    """The name npugraph_ex's messages give option `name`: its CompilerConfig field's. The option's own on most
    torch-npu lines; 2.9.1's nested field there (capture_limit's fallback warns "The static_capture_size_limit
    reached", where 2.7.1.postN and 2.13 say "The capture_limit reached")."""
    return _option_path(config, name)[1]


def register_fake_takes_override() -> bool:
    """torch.library.register_fake's `allow_override` (torch 2.8 and later): a second fake of an op stacks over the
    first until its library is destroyed. Without it (2.6, 2.7) a Library op's second fake raises."""
    import inspect

    import torch

    return "allow_override" in inspect.signature(torch.library.register_fake).parameters


def register_fake_over(qualname: str, fake, lib) -> None:
    """`fake` over the op's existing fake until `lib` is destroyed (`lib._destroy()` brings the old one back).
    torch.library.register_fake with `allow_override=True` where it takes it; on older lines a custom_op's fake is
    replaced as register_fake always did, and a Library op's, which register_fake refuses to replace, is swapped in
    torch's fake registry (simple_registry, which torch and the generated compile_cache read it from) with the old
    one restored by a handle of `lib`."""
    import torch

    if register_fake_takes_override():
        torch.library.register_fake(qualname, fake, lib=lib, allow_override=True)
        return
    from torch._library.custom_ops import OPDEFS
    from torch._library.simple_registry import singleton
    from torch._library.utils import Kernel, RegistrationHandle

    holder = singleton.find(qualname).fake_impl
    if qualname in OPDEFS or holder.kernel is None:
        torch.library.register_fake(qualname, fake, lib=lib)
        return
    saved = holder.kernel
    holder.kernel = Kernel(fake, "opgen.testing.torch_compat.register_fake_over")

    def restore() -> None:
        holder.kernel = saved

    lib._registration_handles.append(RegistrationHandle(restore))


def skip_module_without_tags(package: str, tags: tuple[str, ...]) -> None:
    """At the top of a package's test module: skip it, naming this torch, where torch.Tag lacks a tag its ops are
    defined with (`inplace` and `out` came in torch 2.13); the package itself refuses to import there."""
    import pytest
    import torch

    missing = [tag for tag in tags if not hasattr(torch.Tag, tag)]
    if missing:
        pytest.skip(f"{package}'s ops are tagged {', '.join(f'torch.Tag.{t}' for t in missing)} (opgen.yaml), which "
                    f"torch {torch.__version__} does not have (it came in torch 2.13): the package cannot register "
                    "them on this torch", allow_module_level=True)
