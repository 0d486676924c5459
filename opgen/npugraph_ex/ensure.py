"""npugraph_ex on first use: the generated tests' npugraph_ex tiers fetch it themselves, once, on a machine where
nobody ran `opgen npugraph-ex fetch` (a new user's), so that the tiers the mission names run instead of skipping.

The fetch is the command's own (fetch.py: pip downloads the torch-npu wheel matching the installed torch, only its
npugraph_ex/ is kept in the cache); one line says what is fetched and where, and a failure (offline, no index, no
wheel for this platform) one line saying why and what to do, after which those tiers skip as before. Nothing is
fetched where npugraph_ex cannot run anyway (no torch, a real NPU) or where OPGEN_NPUGRAPH_EX_FETCH=0 (opgen's own
suite sets it: it takes the cache as it finds it).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import OpgenError
from . import loader

SWITCH = "OPGEN_NPUGRAPH_EX_FETCH"  # "0": never fetch on first use
WHEEL = "OPGEN_TORCH_NPU_WHEEL"  # a torch-npu wheel on disk: fetched from it, without pip (as `fetch --wheel`)
APPROXIMATE_SIZE = "about 45 MB"  # torch-npu 2.13.0's manylinux wheel: 43.6 MB


def fetch_wanted() -> bool:
    return os.environ.get(SWITCH, "").strip() not in ("0", "no", "false", "off")


def ensure_available(say: Callable[[str], None] = print) -> str | None:
    """None when npugraph_ex can run on CPU here, fetching it first when it is missing; else why it cannot (the
    skip reason the tiers give). `say` gets the progress line and, on failure, the line saying why and what to do."""
    lib = loader()
    reason = lib.unavailable()
    if reason is None or lib.find() is not None or lib.torch_release() is None or not fetch_wanted() \
            or lib.line_lacks_npugraph_ex(lib.torch_release()):
        return reason
    wheel = os.environ.get(WHEEL) or None
    release = lib.torch_release()
    source = f"from {wheel}" if wheel else f"with pip (the torch-npu wheel of the torch {release} line, {APPROXIMATE_SIZE}, once)"
    say(f"opgen: npugraph_ex is not in {lib.cache_root()}: fetching it {source}; only its npugraph_ex/ is kept "
        f"({SWITCH}=0 turns this off)")
    try:
        target, note = _fetch(wheel)
    except OpgenError as error:
        say(offline_message(error.message, release))
        return reason
    say(f"opgen: npugraph_ex fetched into {target}" + (f"\n{note}" if note else ""))
    return lib.unavailable()


def _fetch(wheel: str | None):
    from .fetch import fetch

    return fetch(None, wheel)


def _line(release: str) -> str:
    """`2.14` of torch 2.14.1: torch-npu releases serve a torch line (2.14.0 for torch 2.14.1, 2.7.1.post11 for 2.7.1)."""
    return ".".join(release.split(".")[:2])


def offline_message(error: str, release: str) -> str:
    why = " ".join(error.split())[:300] or "pip failed"
    return (f"opgen: could not fetch npugraph_ex ({why}): its tiers skip. Offline? On a machine with network run "
            f"`pip download --no-deps 'torch-npu~={_line(release)}.0' -d wheels`, bring the wheel here and run "
            "`opgen npugraph-ex fetch --wheel wheels/torch_npu-*.whl`")
