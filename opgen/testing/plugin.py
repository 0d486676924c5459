"""opgen's pytest plugin (the `pytest11` entry point `opgen`): what every generated project's tests share.

- markers: `npu`, `cuda`, `npugraph_ex` (the tiers that need them) and `slow` (seconds each: fusion compiles,
  models, npugraph_ex's features), put on a generated test by its name, so that `-m "not slow"` works everywhere;
- `--opgen-tiers=fake,kernel,...`: run only those tiers of the generated tests (TIERS names them);
- one report-header line naming torch, torch_npu and npugraph_ex, and which tiers skip here and why;
- the project of a generated test file put on sys.path before the file is imported, so that many projects are
  tested by one `pytest` from their common folder without installing them (a project is a folder holding
  opgen.yaml and .opgen/manifest.json);
- the fixture `npugraph_ex`: the loader of npugraph_ex on CPU, or a skip naming `opgen npugraph-ex fetch`.

Imports only the standard library at load: pytest loads it in every session of an environment holding opgen.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest

# A generated test's tier, by the end of its name (`test_<op>_<end>`, before any [parameters]): tier -> ends.
TIERS = {
    "registration": ("is_registered",),
    "fake": ("enters_graph_with_fake_tensors", "kernel_follows_the_semantics"),
    "kernel": ("matches_expected_values", "matches_the_reference", "writes_what_the_schema_says", "opcheck",
               "compiled_matches_eager", "non_contiguous_inputs", "compiles_once_for_two_sizes"),
    "autograd": ("opcheck_with_requires_grad", "gradcheck"),
    "npu": ("npugraph_ex_capture_replay",),
    "cuda": ("cuda_graphs_capture_replay",),
    "npugraph_ex": ("npugraph_ex_compiles_on_cpu", "npugraph_ex_capture_replay_on_cpu"),
    "features": ("npugraph_ex_compile_cache_in_a_fresh_process", "npugraph_ex_capture_limit",
                 "npugraph_ex_on_a_second_stream"),
    "fusion": ("fusion_composite_is_the_op", "fusion_keeps_layouts", "fusion_fires", "fusion_near_misses_stay_unfused",
               "fusion_trains"),
    "models": ("fusion_fires_in_models",),
}
# the markers each tier's tests carry
MARKERS = {"npu": ("npu",), "npugraph_ex": ("npugraph_ex",), "features": ("npugraph_ex", "slow"), "cuda": ("cuda",),
           "models": ("slow",)}
SLOW_ENDS = ("fusion_fires", "fusion_near_misses_stay_unfused", "fusion_trains")  # each compiles a model
MARKER_HELP = {
    "npu": "needs an Ascend NPU (torch_npu); skips without one, saying why",
    "cuda": "needs a CUDA GPU; skips without one, saying why",
    "npugraph_ex": "runs npugraph_ex (on CPU after `opgen npugraph-ex fetch`; skips without it, naming the command)",
    "slow": "seconds each (fusion compiles, models, npugraph_ex's features): deselect with -m 'not slow'",
}
WARNINGS = ("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",)  # npugraph_ex's, not the project's


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opgen", "opgen's generated graph-entry tests")
    group.addoption("--opgen-tiers", default="", metavar="TIER,...",
                    help=f"run only these tiers of opgen-generated tests (of: {', '.join(TIERS)})")


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in MARKER_HELP.items():
        config.addinivalue_line("markers", f"{marker}: {text}")
    for line in WARNINGS:
        config.addinivalue_line("filterwarnings", line)
    unknown = sorted(set(_chosen_tiers(config)) - set(TIERS))
    if unknown:
        raise pytest.UsageError(f"--opgen-tiers: unknown tier {', '.join(unknown)} (the tiers: {', '.join(TIERS)})")


def _chosen_tiers(config: pytest.Config) -> list[str]:
    return [tier.strip() for tier in (config.getoption("opgen_tiers") or "").split(",") if tier.strip()]


def project_of(path: Path) -> Path | None:
    """The generated project holding `path` (a folder with opgen.yaml and .opgen/manifest.json), or None."""
    for folder in path.parents:
        if (folder / "opgen.yaml").is_file() and (folder / ".opgen" / "manifest.json").is_file():
            return folder
    return None


def pytest_collect_file(file_path: Path) -> None:
    """A generated project's test file imports its package: the project goes first on sys.path (once)."""
    if file_path.suffix != ".py" or not file_path.name.startswith("test_") or file_path.parent.name != "tests":
        return
    project = project_of(file_path)
    if project is not None and str(project) not in sys.path:
        sys.path.insert(0, str(project))


def tier_of(item: pytest.Item) -> str | None:
    """The tier of a generated test (its name's end), or None for any other test."""
    name = item.name.partition("[")[0]
    found = None
    for tier, ends in TIERS.items():
        for end in ends:  # the longest end wins: `opcheck_with_requires_grad` is autograd's, not kernel's `opcheck`
            if name.endswith(f"_{end}") and (found is None or len(end) > len(found[1])):
                found = (tier, end)
    return found[0] if found else None


def _generated(item: pytest.Item) -> bool:
    path = getattr(item, "path", None)
    return path is not None and project_of(Path(path)) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = set(_chosen_tiers(config))
    kept, dropped = [], []
    for item in items:
        tier = tier_of(item) if _generated(item) else None
        if tier is not None:
            for marker in MARKERS.get(tier, ()):
                item.add_marker(marker)
            if item.name.partition("[")[0].endswith(SLOW_ENDS):
                item.add_marker("slow")
        (dropped if chosen and tier is not None and tier not in chosen else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> str | None:
    """One line: the versions the tiers run against, and which tiers skip here and why (only when the session
    tests a generated project: it imports torch)."""
    paths = [Path(arg.partition("::")[0]).resolve() for arg in config.args] or [Path(config.invocation_params.dir)]
    if not any(project_of(path / "x") is not None or any(path.glob("*/opgen.yaml")) for path in paths):
        return None
    return header()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def skipped_tiers() -> dict[str, str]:
    """Tier -> why it skips on this machine (tiers not named run)."""
    from . import npugraph_ex_cpu

    skipped = {}
    if importlib.util.find_spec("torch_npu") is None:
        skipped["npu"] = "no NPU: torch_npu not importable"
    if importlib.util.find_spec("torch") is not None:
        import torch

        if not torch.cuda.is_available():
            skipped["cuda"] = "no CUDA: torch.cuda.is_available() is False"
    reason = npugraph_ex_cpu.unavailable()
    if reason is not None:
        skipped["npugraph_ex"] = reason
    if importlib.util.find_spec("transformers") is None:
        skipped["models"] = "transformers is not installed"
    return skipped


def header() -> str:
    from . import npugraph_ex_cpu

    found = npugraph_ex_cpu.find()
    versions = (f"torch {_version('torch') or 'not installed'}, torch_npu {_version('torch-npu') or 'not installed'}, "
                f"npugraph_ex {found.name + ' (fetched)' if found else 'not fetched'}")
    skipped = "; ".join(f"{tier} ({why})" for tier, why in skipped_tiers().items()) or "none"
    return f"opgen.testing {_version('opgen') or ''}: {versions}; tiers that skip: {skipped}"


@pytest.fixture(scope="session")
def npugraph_ex():
    """npugraph_ex's loader on CPU (opgen.testing.npugraph_ex_cpu: `Session`, `unavailable`), or a skip naming
    `opgen npugraph-ex fetch`."""
    from . import npugraph_ex_cpu

    reason = npugraph_ex_cpu.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return npugraph_ex_cpu
