"""npugraph_ex fetched on first use (opgen/npugraph_ex/ensure.py): a new user's generated tests get it without a manual
step, with one progress line; offline, one line saying why and what to do, and the tiers skip as before; nothing is
fetched when it is there, when OPGEN_NPUGRAPH_EX_FETCH=0, or where torch is missing. pip sees only a directory of
small torch-npu-shaped wheels (tests/test_npugraph_ex.py builds them): no network."""

from __future__ import annotations

import pytest
from test_npugraph_ex import index_of

from opgen.npugraph_ex import loader
from opgen.npugraph_ex.ensure import SWITCH, ensure_available


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache, no wheel given, the first-use fetch on (opgen's suite switches it off), pip offline."""
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPGEN_TORCH_NPU_WHEEL", raising=False)
    monkeypatch.delenv(SWITCH, raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index_of(tmp_path / "index")))
    return tmp_path


def said() -> tuple[list[str], callable]:
    lines: list[str] = []
    return lines, lines.append


def test_a_missing_npugraph_ex_is_fetched_once_with_a_progress_line(fresh_cache, monkeypatch):
    release = loader().torch_release()
    monkeypatch.setenv("PIP_FIND_LINKS", str(index_of(fresh_cache / "published", f"{release}.post1")))
    lines, say = said()
    assert ensure_available(say) is None
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"opgen: npugraph_ex is not in {fresh_cache / 'cache'}: fetching it with pip "
                               f"(the torch-npu wheel of the torch {release} line")
    assert lines[1] == f"opgen: npugraph_ex fetched into {fresh_cache / 'cache' / 'npugraph_ex' / f'{release}.post1'}"
    assert loader().find() == fresh_cache / "cache" / "npugraph_ex" / f"{release}.post1"
    again, say = said()  # the twin: already there, nothing said, nothing fetched
    assert ensure_available(say) is None and again == []


def test_offline_it_says_why_and_what_to_do_and_the_tiers_skip_as_before(fresh_cache):
    lines, say = said()
    reason = ensure_available(say)
    assert reason is not None and reason.startswith("npugraph_ex not found: run 'opgen npugraph-ex fetch'")
    assert len(lines) == 2 and lines[1].startswith("opgen: could not fetch npugraph_ex (no torch-npu "), lines
    assert "Offline?" in lines[1] and "opgen npugraph-ex fetch --wheel" in lines[1], lines[1]
    assert "Traceback" not in "".join(lines) and not (fresh_cache / "cache" / "npugraph_ex").exists()


def test_a_torch_line_older_than_npugraph_ex_fetches_nothing_and_says_so(fresh_cache, monkeypatch):
    """torch 2.6 has no torch-npu with npugraph_ex: pip would download a wheel without it; the skip names the line.
    Its twin is the fetch above, on the installed torch's line."""
    release = loader().torch_release()
    monkeypatch.setenv("PIP_FIND_LINKS", str(index_of(fresh_cache / "published", f"{release}.post1")))
    monkeypatch.setattr(loader(), "torch_release", lambda: "2.6.0")
    lines, say = said()
    reason = ensure_available(say)
    assert reason is not None and reason.startswith("npugraph_ex does not exist for torch 2.6.0: "), reason
    assert "run 'opgen npugraph-ex fetch'" not in reason and lines == []
    assert not (fresh_cache / "cache" / "npugraph_ex").exists()


def test_a_wheel_on_disk_is_used_without_pip(fresh_cache, monkeypatch):
    from test_npugraph_ex import make_wheel

    release = loader().torch_release()
    wheel = make_wheel(fresh_cache, release)
    monkeypatch.setenv("OPGEN_TORCH_NPU_WHEEL", str(wheel))
    lines, say = said()
    assert ensure_available(say) is None
    assert f"fetching it from {wheel}" in lines[0], lines


@pytest.mark.parametrize("value", ["0", "off"])
def test_switched_off_nothing_is_fetched(fresh_cache, monkeypatch, value):
    release = loader().torch_release()
    monkeypatch.setenv("PIP_FIND_LINKS", str(index_of(fresh_cache / "published", release)))
    monkeypatch.setenv(SWITCH, value)
    lines, say = said()
    assert ensure_available(say).startswith("npugraph_ex not found") and lines == []
    assert loader().find() is None


def test_opgens_own_suite_never_fetches_on_first_use():
    """tests/conftest.py: the suite takes the cache as it finds it (the README's test command, fetched or not)."""
    import os

    assert os.environ.get(SWITCH) == "0"
