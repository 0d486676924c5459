"""opgen.testing: the graph-entry checks of opgen's generated tests, as a library (`opgen check` runs them too).

A generated project's `tests/test_<package>.py` holds its ops' data and one-line tests that call the tiers below;
the checks live here, one module per job, and are versioned with opgen (the project's `test` extra pins a range).

Every check takes an `Op` (the operator under test and where its parts live: the spec field `ops[i]`, the kernel
file) and calls of it: a call is a dict of the op's arguments by name (`op.overload(**call)`). A check raises
`CheckFailed` (an AssertionError) whose message names what to fix; its `kind` says which problem it found, for
`opgen check`. Checks, in the order of the generated tests (module in brackets):
  registration   assert_registered, assert_signature [registration]
  fake tensors   assert_enters_graph, assert_follows_semantics [fake]
  CPU kernel     assert_expected, assert_writes [kernel], assert_matches_reference [oracle], opcheck,
                 assert_compiled_matches_eager, assert_compiles_once [compiled], assert_non_contiguous_inputs
                 [non_contiguous], opcheck_with_requires_grad, gradcheck [autograd]
  capture        assert_capture_replay (npugraph_ex on an NPU, CUDA graphs on a GPU) [capture],
                 assert_npugraph_ex_compiles_on_cpu [npugraph_ex_compiler], assert_npugraph_ex_capture_replay_on_cpu
                 [capture_cpu: npugraph_ex's AclGraph over the NPU graph emulation of npu_graph_cpu]
  npugraph_ex    CompileCache, assert_capture_limit, assert_on_a_second_stream [npugraph_ex_features]
  fusion         assert_fusion_matches_the_op, assert_fusion_fires (on first_fusion_call),
                 assert_near_misses_stay_unfused [fusion],
                 assert_fusion_keeps_layouts [layouts], assert_fusion_trains [training],
                 assert_fusion_fires_in_model [models]
The inputs the checks try are input_variants'; npugraph_ex_cpu loads npugraph_ex on CPU.

Importing this package imports neither torch nor any check: each name below is imported on first use, so that
`opgen npugraph-ex` (which loads npugraph_ex_cpu) and the pytest plugin stay torch-free.
"""

from __future__ import annotations

import importlib

# the public API, by the module that defines it
_MODULES = {
    "autograd": ("opcheck_with_requires_grad", "gradcheck", "assert_backward_raises_without_formula"),
    "capture": ("npu_unavailable", "cuda_unavailable", "assert_capture_replay"),
    "capture_cpu": ("assert_npugraph_ex_capture_replay_on_cpu",),
    "compiled": ("opcheck", "assert_compiled_matches_eager", "assert_compiles_once"),
    "failures": ("CheckFailed", "SkipCheck"),
    "fake": ("assert_enters_graph", "assert_follows_semantics"),
    "fusion": ("FUSION_ROUTES", "assert_fusion_fires", "assert_fusion_matches_the_op",
               "assert_near_misses_stay_unfused", "first_fusion_call"),
    "input_variants": ("Domain", "Draw", "Variant", "SWEPT_DTYPES", "random_tensor", "variants"),
    "kernel": ("assert_expected", "assert_writes"),
    "layouts": ("assert_fusion_keeps_layouts",),
    "models": ("assert_fusion_fires_in_model",),
    "non_contiguous": ("assert_non_contiguous_inputs",),
    "npugraph_ex_compiler": ("assert_npugraph_ex_compiles_on_cpu",),
    "npugraph_ex_features": ("CompileCache", "assert_capture_limit", "assert_on_a_second_stream"),
    "op": ("Op", "Expected", "Call"),
    "oracle": ("assert_matches_reference",),
    "registration": ("assert_registered", "assert_signature"),
    "torch_compat": ("skip_module_without_tags",),
    "training": ("assert_fusion_trains",),
}
_HOMES = {name: module for module, names in _MODULES.items() for name in names}
__all__ = tuple(sorted(_HOMES))


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
