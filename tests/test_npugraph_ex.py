"""`opgen npugraph-ex fetch|path`, the CPU loader (tests/npugraph_ex_cpu.py of every generated project)
and the generated `npugraph_ex_compiles_on_cpu` tier: it passes correct ops, accepts a copy that is
correct, and fails, saying why, on ops npugraph_ex would mishandle.

Fetching is tested with small synthetic torch-npu wheels (no network, no 43 MB download). Tests that run
npugraph_ex itself use the cache `opgen npugraph-ex fetch` filled (.ci/run fetches it; without it they
skip, unless OPGEN_REQUIRE_NPUGRAPH_EX is set, as in CI, where its absence fails).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest
from forked_python import run_pytest, run_python
from new_helpers import PYTEST_PLUGINS_OFF, REPO, opgen, pythonpath
from npugraph_ex_state import NPUGRAPH_EX, needs_npugraph_ex

from opgen.npugraph_ex import loader, loader_path

NOT_FOUND = "npugraph_ex not found: run 'opgen npugraph-ex fetch'"


def test_npugraph_ex_is_fetched_where_required():
    """CI sets OPGEN_REQUIRE_NPUGRAPH_EX after fetching: there the npugraph_ex tests must run, not skip."""
    if os.environ.get("OPGEN_REQUIRE_NPUGRAPH_EX"):
        assert NPUGRAPH_EX is None, NPUGRAPH_EX
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    readme = ci.index('pip install "torch==2.13.0" -e ".[test]" && python -m pytest -q')  # tests/test_readme.py
    fetch = next(i for i, line in enumerate(ci) if "opgen npugraph-ex fetch" in line)
    required = next(i for i, line in enumerate(ci) if "OPGEN_REQUIRE_NPUGRAPH_EX=1" in line)
    step = ci.index('python -m pytest -q -m "npugraph_ex or torch_npu_wheel"')
    assert readme < fetch < required < step


# --- fetch and path ---------------------------------------------------------------------------------


def make_wheel(directory: Path, version: str = "9.9.9", *, package: bool = True, metadata_version: str | None = None,
               extra: dict | None = None, tag: str = "cp311-cp311-manylinux_2_28_x86_64") -> Path:
    """A small torch-npu-shaped wheel: dist-info METADATA, npugraph_ex/__init__.py and one other module."""
    wheel = directory / f"torch_npu-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"torch_npu-{version}.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {metadata_version or version}\n\n")
        archive.writestr(f"torch_npu-{version}.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
        archive.writestr("torch_npu/__init__.py", "raise ImportError('never imported')\n")
        if package:
            archive.writestr("torch_npu/dynamo/npugraph_ex/__init__.py", "MARK = 'npugraph_ex " + "x" * 400 + "'\n")
            archive.writestr("torch_npu/dynamo/npugraph_ex/core/utils.py", "X = 1\n")
        for name, text in (extra or {}).items():
            archive.writestr(name, text)
    return wheel


def run_cli(*args: str, cache: Path, index: Path | None = None) -> subprocess.CompletedProcess:
    """`opgen npugraph-ex ...`; with `index`, pip sees only the wheels in that directory (no network)."""
    env = {**os.environ, "OPGEN_CACHE_DIR": str(cache)}
    if index is not None:
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(index))
    env.pop("OPGEN_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "opgen", "npugraph-ex", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300, check=False)


def test_fetch_from_a_wheel_extracts_only_npugraph_ex_and_records_it(tmp_path):
    cache = tmp_path / "cache"
    wheel = make_wheel(tmp_path)
    absent = run_cli("path", "--torch-npu-version", "9.9.9", cache=cache)
    assert absent.returncode == 1 and absent.stdout == ""
    assert "npugraph_ex is not fetched" in absent.stderr and "opgen npugraph-ex fetch" in absent.stderr

    done = run_cli("fetch", "--wheel", str(wheel), cache=cache)
    assert done.returncode == 0, done.stderr
    target = cache / "npugraph_ex" / "9.9.9"
    assert done.stdout.strip() == str(target)
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert files == ["npugraph_ex/__init__.py", "npugraph_ex/core/utils.py", "opgen-fetch.json"]
    record = json.loads((target / "opgen-fetch.json").read_text())
    assert record["wheel"] == wheel.name and record["torch_npu_version"] == "9.9.9"
    assert record["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert record["torch_version"] == loader().torch_release()
    assert f"warning: torch-npu 9.9.9 is not built for the installed torch {loader().torch_release()}" in done.stderr

    found = run_cli("path", "--torch-npu-version", "9.9.9", cache=cache)
    assert found.returncode == 0 and found.stdout.strip() == str(target)
    # fetching again replaces the directory as a whole and leaves no staging directory behind
    (target / "npugraph_ex" / "stale.py").write_text("")
    assert run_cli("fetch", "--wheel", str(wheel), cache=cache).returncode == 0
    assert not (target / "npugraph_ex" / "stale.py").exists()
    assert sorted(p.name for p in (cache / "npugraph_ex").iterdir()) == ["9.9.9"]


@pytest.mark.parametrize("case", ["version", "metadata", "no package", "not a zip", "unsafe", "missing"])
def test_fetch_refuses_a_bad_wheel_with_a_clear_error(tmp_path, case):
    cache = tmp_path / "cache"
    args, expected_hint = (), ""
    if case == "version":
        wheel, args, expected = make_wheel(tmp_path), ("--torch-npu-version", "1.2.3"), "is torch-npu 9.9.9, not 1.2.3"
    elif case == "metadata":
        wheel, expected = make_wheel(tmp_path, metadata_version="9.9.8"), "METADATA does not say Version: 9.9.9"
    elif case == "no package":
        wheel, expected = make_wheel(tmp_path, package=False), "has no torch_npu/dynamo/npugraph_ex/ package"
        expected_hint = "npugraph_ex ships in torch-npu the post releases of the 2.7.1 line on"
    elif case == "not a zip":
        wheel = tmp_path / "torch_npu-9.9.9-cp311-cp311-manylinux_2_28_x86_64.whl"
        wheel.write_bytes(b"not a zip at all")
        expected = "is not a readable wheel"
    elif case == "unsafe":
        wheel = make_wheel(tmp_path, extra={"torch_npu/dynamo/npugraph_ex/../../../evil.py": ""})
        expected = "refusing the unsafe path"
    else:
        wheel, expected = tmp_path / "torch_npu-9.9.9-x.whl", "no such file"
    done = run_cli("fetch", "--wheel", str(wheel), *args, cache=cache)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and expected in done.stderr and "Traceback" not in done.stderr
    assert expected_hint in done.stderr
    assert not (cache / "npugraph_ex" / "9.9.9").exists()


def test_fetch_refuses_a_crc_mismatch(tmp_path):
    """A stored (uncompressed) member with one flipped byte fails zipfile's CRC test."""
    wheel = tmp_path / "torch_npu-9.9.9-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("torch_npu-9.9.9.dist-info/METADATA", "Name: torch_npu\nVersion: 9.9.9\n\n")
        archive.writestr("torch_npu/dynamo/npugraph_ex/__init__.py", "MARK = 'abcdefgh'\n")
    data = bytearray(wheel.read_bytes())
    data[data.index(b"abcdefgh")] ^= 0x01
    wheel.write_bytes(bytes(data))
    done = run_cli("fetch", "--wheel", str(wheel), cache=tmp_path / "cache")
    assert done.returncode == 2 and "is corrupt: torch_npu/dynamo/npugraph_ex/__init__.py fails its CRC check" in (
        done.stderr), done.stderr


def test_fetch_of_a_version_the_index_lacks_says_so(tmp_path):
    """pip download of a torch-npu that does not exist (or no index at all): exit 2, no traceback."""
    done = run_cli("fetch", "--torch-npu-version", "0.0.1", cache=tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert "torch-npu 0.0.1" in done.stderr and "--wheel PATH" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "npugraph_ex" / "0.0.1").exists()


def index_of(directory: Path, *versions: str) -> Path:
    """A pip find-links directory of small torch-npu wheels (pure-Python tag, so pip takes them anywhere)."""
    directory.mkdir()
    for version in versions:
        make_wheel(directory, version, tag="py3-none-any")
    return directory


# torch-npu publishes post releases for a torch release (all requiring torch==X.Y.Z, uploaded after X.Y.Z):
# 2.10.0, 2.10.0.post2 ... .post7; for 2.1.0 and 2.3.1 only post releases. Distractors: a pre-release of a
# later post, a four-part release, the next patch release.
DISTRACTORS = ("7.7.7.post11rc1", "7.7.7.1", "7.7.8")


@pytest.mark.parametrize(("published", "asked", "fetched"), [
    (("7.7.7.post2", "7.7.7.post10"), "7.7.7", "7.7.7.post10"),  # only post releases: the newest
    (("7.7.7", "7.7.7.post2", "7.7.7.post10"), "7.7.7", "7.7.7.post10"),  # a post release is newer than X.Y.Z
    (("7.7.7",), "7.7.7", "7.7.7"),
    (("7.7.7", "7.7.7.post2", "7.7.7.post10"), "7.7.7.post2", "7.7.7.post2"),  # asked exactly
], ids=["only-post", "plain-and-post", "only-plain", "exact-post"])
def test_fetch_takes_the_newest_release_for_torch_x_y_z(tmp_path, published, asked, fetched):
    cache = tmp_path / "cache"
    index = index_of(tmp_path / "index", *published, *DISTRACTORS)
    done = run_cli("fetch", "--torch-npu-version", asked, cache=cache, index=index)
    assert done.returncode == 0, done.stderr
    target = cache / "npugraph_ex" / fetched
    assert done.stdout.strip() == str(target) and sorted(p.name for p in target.parent.iterdir()) == [fetched]
    assert json.loads((target / "opgen-fetch.json").read_text())["torch_npu_version"] == fetched
    found = run_cli("path", "--torch-npu-version", asked, cache=cache)
    assert found.returncode == 0 and found.stdout.strip() == str(target), found.stderr


@pytest.mark.parametrize(("published", "asked", "fetched"), [
    (("7.7.5", "7.7.6", "7.7.6.post2"), "7.7.7", "7.7.6.post2"),  # torch 2.14.1 takes torch-npu 2.14.0
    (("7.7.6", "7.7.7"), "7.7.7", "7.7.7"),  # the patch release's own build first
], ids=["earlier-patch", "own-patch"])
def test_fetch_for_a_patch_release_without_its_own_build_takes_the_line_s_newest(tmp_path, published, asked, fetched):
    cache = tmp_path / "cache"
    index = index_of(tmp_path / "index", *published, "7.6.9", *DISTRACTORS)
    done = run_cli("fetch", "--torch-npu-version", asked, cache=cache, index=index)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(cache / "npugraph_ex" / fetched)
    # where the generated tests look for the line's torch (the loader's find), and `opgen npugraph-ex path`
    assert run_cli("path", "--torch-npu-version", asked, cache=cache).stdout.strip() == done.stdout.strip()


def test_fetch_for_the_installed_torch_finds_its_post_release_and_the_tests_use_it(tmp_path, monkeypatch):
    """The default version is the installed torch's X.Y.Z; only X.Y.Z.post3 published: fetched, no warning,
    and found where the generated tests and `opgen check` look (the loader's find()/unavailable())."""
    release = loader().torch_release()
    cache = tmp_path / "cache"
    index = index_of(tmp_path / "index", f"{release}.post1", f"{release}.post3")
    done = run_cli("fetch", cache=cache, index=index)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    target = cache / "npugraph_ex" / f"{release}.post3"
    assert done.stdout.strip() == str(target)
    assert run_cli("path", cache=cache).stdout.strip() == str(target)
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(cache))
    assert loader().find() == target and loader().unavailable() is None


def test_the_cache_lookup_prefers_the_newest_complete_post_release(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    root = tmp_path / "npugraph_ex"
    for name in ("5.5.5", "5.5.5.post2", "5.5.5.post10", "5.5.5.post11", "5.5.5.post12rc1", "5.5.5rc1", "5.5.50",
                 "5.5.5.1", ".5.5.5.post13-staging", "5.5.6.post1"):
        (root / name / "npugraph_ex").mkdir(parents=True)
        (root / name / "npugraph_ex" / "__init__.py").write_text("")
        if name != "5.5.5.post11":  # incomplete: no record, as if fetched by hand
            (root / name / "opgen-fetch.json").write_text("{}")
    assert loader().find("5.5.5") == root / "5.5.5.post10"  # post10 > post2 (numbers, not strings)
    assert loader().find("5.5.5.post2") == root / "5.5.5.post2"  # an exact version names itself alone
    assert loader().find("5.5.5rc1") == root / "5.5.5rc1"
    assert loader().find("5.5.4") is None
    assert loader().find("5.5.7") == root / "5.5.6.post1"  # no 5.5.7 build: the line's newest below it (2.14.1)
    for name in ("5.5.5.post10", "5.5.5.post2"):
        (root / name / "opgen-fetch.json").unlink()
    assert loader().find("5.5.5") == root / "5.5.5"  # the plain release when no complete post release is there


def test_fetch_of_a_torch_release_with_no_wheel_in_the_index_names_both_forms(tmp_path):
    index = index_of(tmp_path / "index", *DISTRACTORS)
    done = run_cli("fetch", "--torch-npu-version", "7.7.7", cache=tmp_path / "cache", index=index)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "error: no torch-npu 7.7.7 (or 7.7.7.postN, or an earlier 7.7.x) wheel for this Python and platform")
    assert "torch-npu X.Y.Z and X.Y.Z.postN match torch X.Y.Z" in done.stderr
    assert not (tmp_path / "cache").exists()


def test_fetch_without_torch_and_without_a_version_says_what_to_give(tmp_path):
    """A venv with everything this Python has except the torch distribution: torch is really not installed."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_packages = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
    torch = importlib.metadata.distribution("torch")
    torch_names = {Path(file).parts[0] for file in torch.files}
    system = Path(torch.locate_file(""))
    for entry in system.iterdir():
        if entry.name not in torch_names and not (site_packages / entry.name).exists():
            (site_packages / entry.name).symlink_to(entry)
    env = {**os.environ, "OPGEN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    code = ("import importlib.metadata as m, importlib.util as u, click; "
            "print(u.find_spec('torch'), [d for d in m.distributions() if d.name == 'torch'])")
    probe = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert probe.stdout == "None []\n", probe.stdout + probe.stderr  # no torch module, no torch metadata

    def opgen_in_venv(*args):
        return subprocess.run([python, "-m", "opgen", "npugraph-ex", *args], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=120, check=False)

    done = opgen_in_venv("fetch")
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith("error: torch is not installed, so the matching torch-npu version is unknown")
    assert "hint: install torch, or give --torch-npu-version X.Y.Z (or --wheel PATH)" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "cache").exists()
    path = opgen_in_venv("path")
    assert path.returncode == 1 and "npugraph_ex is not fetched (torch is not installed)" in path.stderr, path.stderr
    # the look-alike: the same venv with a version given fetches (from a wheel on disk)
    done = opgen_in_venv("fetch", "--wheel", str(make_wheel(tmp_path)))
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    assert done.stdout.strip() == str(tmp_path / "cache" / "npugraph_ex" / "9.9.9")


def test_the_commands_need_no_torch(tmp_path):
    """`opgen npugraph-ex` is part of the torch-free core: with torch unimportable it still runs."""
    shim = tmp_path / "shim" / "torch"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('torch is hidden')\n")
    env = {**os.environ, "OPGEN_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(shim.parent)}
    done = subprocess.run([sys.executable, "-m", "opgen", "npugraph-ex", "path", "--torch-npu-version", "9.9.9"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 1 and "npugraph_ex is not fetched" in done.stderr, done.stderr
    wheel = make_wheel(tmp_path)
    done = subprocess.run([sys.executable, "-m", "opgen", "npugraph-ex", "fetch", "--wheel", str(wheel)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


# --- the loader ---------------------------------------------------------------------------------------


def test_projects_carry_no_copy_and_opgen_loads_the_library_module(tmp_path):
    """The generated tests import opgen.testing (the loader among it): the project's tests/ holds its test file
    only, and `opgen npugraph-ex` uses the very module the tests do."""
    done = opgen("new", str(REPO / "examples" / "rms_norm.yaml"), "-o", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in (tmp_path / "p" / "tests").iterdir()) == ["test_myops.py"]
    assert loader().__name__ == "opgen.testing.npugraph_ex_cpu"
    assert Path(loader().__file__).resolve() == loader_path().resolve() == (REPO / "opgen" / "testing" /
                                                                          "npugraph_ex_cpu.py").resolve()


def test_a_missing_cache_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path))
    reason = loader().unavailable()
    assert reason.startswith(NOT_FOUND) and str(tmp_path / "npugraph_ex") in reason
    with pytest.raises(RuntimeError, match="npugraph_ex not found"):
        loader().Session().__enter__()


@pytest.mark.slow
@needs_npugraph_ex
def test_the_loader_leaves_the_process_as_it_found_it():
    """Enter and leave four times in a fresh process, compile-only and capture sessions in turn: modules, sys.path,
    torch.npu, the emulation's names and Tensor.is_npu, torch's collective remaps and the signal handlers are
    restored; later entries reuse the first import; exit is clean."""
    code = textwrap.dedent("""
        import signal, sys
        import torch
        import torch.distributed._functional_collectives as fc
        from opgen.testing import npugraph_ex_cpu

        def state():
            return ({m for m in sys.modules if m.split(".")[0] in ("npugraph_ex", "torch_npu")}, list(sys.path),
                    hasattr(torch, "npu"), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM),
                    dict(fc.traceable_collective_remaps), set(vars(fc)))

        before = state()
        for capture in (False, True, False, True):
            torch._dynamo.reset()
            with npugraph_ex_cpu.Session(capture=capture) as session:
                assert sys.modules["torch_npu"].npu is torch.npu and "npugraph_ex" in sys.modules
                assert len(fc.traceable_collective_remaps) > len(before[5])
                assert hasattr(torch.Tensor, "is_npu") == capture == hasattr(torch.npu, "NPUGraph")
                backend = session.backend()
                compiled = torch.compile(lambda x: x.sin() + 1, backend=backend, fullgraph=True, dynamic=False)
                assert torch.equal(compiled(torch.ones(3)), torch.ones(3).sin() + 1)
                if capture:  # npugraph_ex's own AclGraph: one capture (after its empty pool capture), one replay
                    assert [g.replays for g in session.emulation.captures] == [1] and not session.graphs
                else:
                    assert session.runs == 1 and len(session.graphs) == 1
            assert state() == before, [a == b for a, b in zip(state(), before)]
            assert not hasattr(torch.Tensor, "is_npu") and torch.Tensor.tolist is torch._C.TensorBase.tolist
        print("ok")
    """)
    done = run_python(["-c", code], timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n" and "Exception ignored" not in done.stderr, done.stderr


@pytest.mark.slow
@needs_npugraph_ex
def test_the_stand_in_is_minimal():
    """Each name of the torch_npu stand-in is needed: without it, compiling with npugraph_ex fails."""
    code = textwrap.dedent("""
        import sys
        import torch
        from opgen.testing import npugraph_ex_cpu as lib

        # Event first: it is an annotation in a module imported at the first compilation only
        for name in ("Event", "Stream", "current_stream", "set_stream"):
            with lib.Session() as session:
                npu = sys.modules["torch_npu"].npu
                value = npu.__dict__.pop(name)
                torch._dynamo.reset()
                compiled = torch.compile(lambda x: x + 1, backend=session.backend(), fullgraph=True, dynamic=False)
                try:
                    compiled(torch.ones(2))
                except Exception as error:
                    assert f"torch_npu.npu.{name} is not part of" in str(error), (name, str(error)[-500:])
                else:
                    raise AssertionError(f"compiled without torch.npu.{name}")
                setattr(npu, name, value)
        # and the one option changed on the stand-in: pattern fusion needs torch_npu's C++ operators
        with lib.Session() as session:
            torch._dynamo.reset()
            backend = session.backend(pattern_fusion_pass=True)
            compiled = torch.compile(lambda x: x + 1, backend=backend, fullgraph=True, dynamic=False)
            try:
                compiled(torch.ones(2))
            except Exception as error:
                assert "'_OpNamespace' 'npu' object has no attribute 'npu_add_rms_norm'" in str(error), error
            else:
                raise AssertionError("pattern fusion ran without torch_npu")
        print("ok")
    """)
    done = run_python(["-c", code], timeout=600)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout + done.stderr[-3000:]


# --- the generated tier on broken ops ------------------------------------------------------------------

BROKEN_SPEC = """\
namespace: broken_ops
style: library
device: npu
ops:
  - schema: "sneaky(Tensor x, Tensor y) -> Tensor"
    doc: "Mutates x although the schema does not say Tensor(a!)."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      x.add_(y)
      return x * 2
    examples: [{x: {shape: [4, 8], dtype: float32}, y: {shape: [4, 8], dtype: float32}}]
  - schema: "aliasing(Tensor(a!) x, float v) -> Tensor"
    doc: "Returns the argument it mutates although the schema promises a new tensor."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      x.fill_(v)
      return x
    examples: [{x: {shape: [4, 8], dtype: float32}, v: 2.0}]
  - schema: "wrong_fake(Tensor x) -> Tensor"
    doc: "The semantics (so the fake) drop the last dimension; the kernel keeps it."
    outputs: {out0: {shape: "x.shape[:-1]", dtype: "x.dtype"}}
    reference: |
      return x * 2
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "upd(Tensor(a!) buf, Tensor y) -> ()"
    doc: "A correct in-place op."
    reference: |
      buf.add_(y)
    examples: [{buf: {shape: [4, 8], dtype: float32}, y: {shape: [4, 8], dtype: float32}}]
  - schema: "no_kernel(Tensor x) -> Tensor"
    doc: "No reference: the CPU kernel is the stub that raises."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "nonzero(Tensor x) -> Tensor"
    doc: "A data-dependent output size: the tier is skipped, the look-alike shows why."
    outputs: {out0: {shape: "[dynamic(max=x.numel())]", dtype: int64}}
    reference: |
      return x.flatten().nonzero().flatten()
    examples: [{x: {values: [0.0, 1.0, 0.0, 2.0], dtype: float32}}]
  - schema: "fill_all(Tensor(a!)[] xs, float v) -> ()"
    doc: "Correct, mutating a list of tensors: each one must be written in place."
    reference: |
      for x in xs:
          x.fill_(v)
    examples: [{xs: [{shape: [2, 3], dtype: float32}, {shape: [4], dtype: float32}], v: 1.5}]
"""

def run_tier(project: Path, junit: Path, env: dict | None = None,
             tier: str = "npugraph_ex_compiles_on_cpu") -> dict[str, tuple[str, str]]:
    """Run the project's npugraph_ex tier (and the look-alikes) in one pytest process: name -> (outcome, text, the
    test's printed output)."""
    arguments = ["-q", *PYTEST_PLUGINS_OFF, "-c", os.devnull, f"--junitxml={junit}", "-o", "junit_logging=system-out",
                 "-k", tier, str(project / "tests")]
    full_env = {**os.environ, "PYTHONPATH": pythonpath([project]), **(env or {})}
    done = run_pytest(arguments, env=full_env, timeout=900, cwd=junit.parent)
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        outcome, text, printed = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, text = child.tag, (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "system-out":
                printed = child.text or ""
        results[case.get("name")] = (outcome, text, printed)
    assert results, done.stdout + done.stderr
    return results


@pytest.fixture(scope="module")
def broken_project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("broken")
    (root / "broken.yaml").write_text(BROKEN_SPEC, encoding="utf-8")
    done = opgen("new", str(root / "broken.yaml"), "-o", str(root / "project"))
    assert done.returncode == 0, done.stderr
    return root / "project"


@pytest.mark.slow  # generates a project and runs its tests
@needs_npugraph_ex
def test_the_tier_fails_broken_ops_saying_why_and_passes_correct_ones(broken_project, tmp_path):
    results = run_tier(broken_project, tmp_path / "junit.xml")
    ops = ("sneaky", "aliasing", "wrong_fake", "upd", "no_kernel", "nonzero", "fill_all")
    tiers = [f"test_{op}_npugraph_ex_compiles_on_cpu" for op in ops]
    assert sorted(results) == sorted(tiers)
    expected = {
        "sneaky": ("failure", ("input tensor 0 after the compiled call differs from eager (an argument the kernel "
                               "writes but the schema does not mark Tensor(a!)")),
        # the tier's own check, or torch's (which runs first on a pt2_compliant_tag op): both name the aliasing
        "aliasing": ("failure", ("output 0 is the memory of input tensor 0: the kernel returns (a view of) an argument",
                                 ("broken_ops::aliasing (with implementation in ???): The output of this custom "
                                  "operator (1) must not also be an input to this custom operator"))),
        "wrong_fake": ("failure", "output 0: the fake function says (4,) torch.float32, the kernel returned (4, 8)"),
        "upd": ("passed", ""),
        "fill_all": ("passed", ""),  # each tensor of a Tensor(a!)[] written in place
        "no_kernel": ("skipped", "broken_ops::no_kernel has no CPU reference kernel yet"),
        "nonzero": ("skipped", ("broken_ops::nonzero has a data-dependent output size (`dynamic`): npugraph_ex's "
                                "graph converter does not compile its size check")),
    }
    for op, (outcome, text) in expected.items():
        got = results[f"test_{op}_npugraph_ex_compiles_on_cpu"]
        texts = text if isinstance(text, tuple) else (text,)
        assert got[0] == outcome and any(t in got[1] for t in texts), (op, got[0], got[1][-3000:])


@pytest.mark.slow  # generates a project and runs its tests
def test_without_the_cache_the_tier_skips_with_the_fetch_command(broken_project, tmp_path):
    """Both CPU tiers of npugraph_ex, the compiler's and capture & replay, skip naming the fetch command."""
    results = run_tier(broken_project, tmp_path / "junit.xml", env={"OPGEN_CACHE_DIR": str(tmp_path / "empty")},
                       tier="npugraph_ex_compiles_on_cpu or npugraph_ex_capture_replay_on_cpu")
    assert len(results) == 14 and sum(name.endswith("_capture_replay_on_cpu") for name in results) == 7
    for name, (outcome, text, _) in results.items():
        if name.startswith("test_nonzero_npugraph_ex_"):
            assert outcome == "skipped" and "data-dependent output size" in text
        else:
            assert outcome == "skipped" and text.startswith(NOT_FOUND), (name, outcome, text)


# --- the generated capture & replay tier on planted kernels ------------------------------------------------

CAPTURE_SPEC = """\
namespace: capture_ops
style: library
device: npu
ops:
  - schema: "validated(Tensor x) -> Tensor"
    doc: "Validates its input with .item() inside the kernel."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      if x.isnan().any().item():
          raise ValueError("NaN input")
      return x * 2
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "validated_outside(Tensor x) -> Tensor"
    doc: "Its twin: validation belongs to the caller, before the op."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      return x * 2
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "value_branch(Tensor x) -> Tensor"
    doc: "Branches on a tensor value."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      if x.abs().max() > 1:
          return x / x.abs().max()
      return x.clone()
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "value_where(Tensor x) -> Tensor"
    doc: "Its twin: torch.where keeps the decision on the device."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      peak = x.abs().max()
      return torch.where(peak > 1, x / peak, x)
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "zero_rows(Tensor x, Tensor idx) -> Tensor"
    doc: "Loops over idx.tolist()."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      out = x.clone()
      for row in idx.tolist():
          out[row] = 0
      return out
    examples: [{x: {shape: [4, 8], dtype: float32}, idx: {values: [0, 2], dtype: int64}}]
  - schema: "round_trip(Tensor x) -> Tensor"
    doc: "Copies to the host and back."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      host = x.cpu()
      return (host * 2).to(x.device)
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "metadata(Tensor x) -> Tensor"
    doc: "The look-alike of host reads: sizes and dims are host values a capture may read."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      return x * x.shape[0] + x.dim()
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "scheduled(Tensor x) -> Tensor"
    doc: "Reads (and advances) a module-level config per call."
    outputs: {out0: {shape: "x.shape", dtype: "x.dtype"}}
    reference: |
      schedule = globals().setdefault("SCHEDULE", {"step": 0})
      schedule["step"] += 1
      return x * 0.5 ** schedule["step"]
    examples: [{x: {shape: [4, 8], dtype: float32}}]
  - schema: "cache_write(Tensor(a!) cache, Tensor rows, Tensor src) -> ()"
    doc: "A correct in-place op: the tier shows the recapture a new cache buffer causes."
    reference: |
      cache.index_copy_(0, rows, src)
    examples: [{cache: {shape: [8, 4], dtype: float32}, rows: {values: [6, 1, 3], dtype: int64},
                src: {shape: [3, 4], dtype: float32}}]
"""
# planted op -> the line of its kernel the skip names (the twins pass)
CAPTURE_PLANTED = {"validated": "if x.isnan().any().item():", "value_branch": "if x.abs().max() > 1:",
                   "zero_rows": "for row in idx.tolist():", "round_trip": "host = x.cpu()",
                   "scheduled": 'x * 0.5 ** schedule["step"]'}  # (the kernel returns it .contiguous())
CAPTURE_KINDS = {"scheduled": "a host value of its CPU kernel"}  # else a capture error
# its NPU kernel written in plain torch as the CPU kernel is: the kernel the NPU runs, judged, failing
DEVICE_KERNEL = "value_branch"


def _write_npu_kernel_like_the_cpu_kernel(project: Path, op: str) -> Path:
    """kernels/<op>_npu.py made the CPU kernel's body in plain torch, as a user writing the NPU kernel in torch would."""
    kernels = project / "capture_ops" / "kernels"
    cpu = (kernels / f"{op}_cpu.py").read_text(encoding="utf-8")
    npu = kernels / f"{op}_npu.py"
    npu.write_text(cpu.replace(f"def {op}_cpu(", f"def {op}_npu("), encoding="utf-8")
    return npu


@pytest.mark.slow  # generates a project and runs its tests
@needs_npugraph_ex
def test_the_capture_tier_of_a_generated_project_names_the_kernel_line_and_passes_the_twins(tmp_path):
    """With the NPU kernels still stubs, each CPU kernel stands in for its NPU kernel: a planted host read (or frozen
    config) in it is a skip naming the line the NPU kernel must not copy, after the op's plumbing passed as one
    launch; the twins pass. The same read in an NPU kernel written in plain torch, which is what the NPU runs, fails."""
    (tmp_path / "capture.yaml").write_text(CAPTURE_SPEC, encoding="utf-8")
    project = tmp_path / "project"
    done = opgen("new", str(tmp_path / "capture.yaml"), "-o", str(project))
    assert done.returncode == 0, done.stderr
    npu_kernel = _write_npu_kernel_like_the_cpu_kernel(project, DEVICE_KERNEL)
    results = run_tier(project, tmp_path / "junit.xml", tier="capture_replay_on_cpu")
    ops = ("validated", "validated_outside", "value_branch", "value_where", "zero_rows", "round_trip", "metadata",
           "scheduled", "cache_write")
    assert sorted(results) == sorted(f"test_{op}_npugraph_ex_capture_replay_on_cpu" for op in ops)
    for op in ops:
        outcome, text, printed = results[f"test_{op}_npugraph_ex_capture_replay_on_cpu"]
        if op not in CAPTURE_PLANTED:
            assert outcome == "passed", (op, text[-3000:])
            assert (f"capture_ops::{op}: npugraph_ex's AclGraph captured its CPU kernel (capture_ops/kernels/{op}_cpu.py; "
                    "the NPU kernel is not plain torch on CPU: NotImplementedError") in printed, printed
            continue
        kernel = npu_kernel if op == DEVICE_KERNEL else project / "capture_ops" / "kernels" / f"{op}_cpu.py"
        number = next(i for i, line in enumerate(kernel.read_text().splitlines(), 1) if CAPTURE_PLANTED[op] in line)
        line = kernel.read_text().splitlines()[number - 1].strip()
        assert f"{kernel.relative_to(project).as_posix()}:{number}: {line}" in text, (op, text[-3000:])
        assert CAPTURE_KINDS.get(op, "makes a call the capturing stream refuses") in text, (op, text[-3000:])
        if op == DEVICE_KERNEL:
            assert outcome == "failure" and "its NPU (PrivateUse1) kernel, plain torch on CPU, makes a call" in text, (
                op, outcome, text[-3000:])
            continue
        assert outcome == "skipped", (op, outcome, text[-3000:])
        assert "capture on CPU judged only the op's plumbing, which passed" in text, text[-3000:]
        assert "it stands in for the kernel the device runs (the NPU kernel is not plain torch on CPU" in text
    printed = results["test_cache_write_npugraph_ex_capture_replay_on_cpu"][2]
    assert "1 capture and 3 replays for 3 calls; the kernel's Python ran 1 time(s) at capture and 0 during" in printed
    assert "new memory for 'cache' (same shapes) made AclGraph recapture once" in printed, printed
