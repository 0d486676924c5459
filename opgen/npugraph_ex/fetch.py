"""Fetch npugraph_ex, the pure-Python torch.compile backend inside the torch-npu wheel, into opgen's cache.

torch-npu itself is never installed (without Ascend's CANN it breaks `import torch`): the wheel is
downloaded with pip (`pip download --no-deps`, the machine's configured index) or taken from disk,
verified, and only `torch_npu/dynamo/npugraph_ex/` is extracted, atomically, to
`<cache>/npugraph_ex/<torch-npu version>/npugraph_ex/` next to a JSON record of the wheel.

A torch release X.Y.Z asks for the newest torch-npu built for it: X.Y.Z or a post release X.Y.Z.postN
(torch-npu publishes e.g. 2.10.0 then 2.10.0.post2 ... .post7, all requiring torch==2.10.0, and for
2.1.0 and 2.3.1 only post releases); when its line has none, the newest earlier release of the X.Y line
(torch 2.14.1 gets torch-npu 2.14.0: not every torch patch release gets a torch-npu, and npugraph_ex,
pure Python, runs on the line's torch). Any other version (X.Y.Z.postN, X.Y.Zrc1) asks for itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import EnvironmentFault, OpgenError, os_error
from ..files import special_kind
from . import loader

PREFIX = "torch_npu/dynamo/npugraph_ex/"
# which torch-npu wheels hold torch_npu/dynamo/npugraph_ex/, measured on the published ones
HAVE_NPUGRAPH_EX = ("the post releases of the 2.7.1 line on (2.7.1.post10, 2.8.0.post4, 2.9.0.post2 have it; 2.8.0, "
                    "2.9.0 and every 2.6 or older wheel do not) and every release of later lines")
WHEEL_NAME = re.compile(r"^torch_npu-(?P<version>[^-]+)-.+\.whl$")


def default_version(lib) -> str:
    version = lib.torch_release()
    if version is None:
        raise OpgenError("torch is not installed, so the matching torch-npu version is unknown",
                         hint="install torch, or give --torch-npu-version X.Y.Z (or --wheel PATH)")
    return version


def requirements(version: str) -> list[str]:
    """pip's requirements for `version`, best first (pip takes the newest match; pre-releases it skips): X.Y.Z or
    X.Y.Z.postN, then an earlier release of the X.Y line or its post releases."""
    if not loader().RELEASE.fullmatch(version):
        return [f"torch-npu=={version}"]
    major, minor, patch = version.split(".")
    exact = f"torch-npu>={version},<{version}.1"
    return [exact, f"torch-npu>={major}.{minor}.0,<{version}"] if int(patch) else [exact]


def described(version: str) -> str:
    if not loader().RELEASE.fullmatch(version):
        return version
    earlier = f", or an earlier {version.rpartition('.')[0]}.x" if not version.endswith(".0") else ""
    return f"{version} (or {version}.postN{earlier})"


def download(version: str, directory: str) -> Path:
    """`pip download` of the torch-npu wheel the first of `requirements(version)` pip finds (the wheel only)."""
    for requirement in requirements(version):
        tail = _pip_download(version, requirement, directory)
        if tail is None:
            break
    else:
        raise OpgenError(f"no torch-npu {described(version)} wheel for this Python and platform ({tail})",
                         hint="torch-npu X.Y.Z and X.Y.Z.postN match torch X.Y.Z (and a later X.Y patch release "
                         "without its own); give another --torch-npu-version, or a wheel with --wheel PATH")
    wheels = sorted(Path(directory).glob("torch_npu-*.whl"))
    if not wheels:
        raise OpgenError(f"pip downloaded no torch-npu {version} wheel", hint="pass a wheel with --wheel PATH")
    return wheels[0]


def _pip_download(version: str, requirement: str, directory: str) -> str | None:
    """None when pip downloaded a wheel for `requirement`, else pip's last line saying none matches."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", requirement, "-d", directory]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise OpgenError(f"downloading torch-npu {version} failed: {error}",
                         hint="download the wheel yourself and pass it with --wheel PATH") from None
    if done.returncode == 0:
        return None
    output = (done.stderr or done.stdout).strip()
    tail = output.splitlines()[-1] if output else f"exit code {done.returncode}"
    if "No matching distribution" in output or "Could not find a version" in output:
        return tail
    raise OpgenError(f"downloading torch-npu {version} with pip failed:\n{tail}",
                     hint="check pip's index and network, or pass a wheel on disk with --wheel PATH") from None


def verify(wheel: Path, version: str | None) -> tuple[str, list[zipfile.ZipInfo]]:
    """The wheel's version and its npugraph_ex members; OpgenError when it is not a sound torch-npu wheel."""
    match = WHEEL_NAME.match(wheel.name)
    if match is None:
        raise OpgenError(f"{wheel} is not a torch-npu wheel (expected torch_npu-<version>-....whl)")
    if not wheel.is_file():  # a FIFO would block the zip reader forever
        raise OpgenError(f"{wheel} is not a regular file", hint="give the path of a downloaded torch_npu-*.whl")
    wheel_version = match.group("version")
    if version is not None and loader().serves(wheel_version, version) is None:
        raise OpgenError(f"{wheel.name} is torch-npu {wheel_version}, not {described(version)}",
                         hint=f"pass the torch_npu-{version}-... wheel, or --torch-npu-version {wheel_version}")
    try:
        with zipfile.ZipFile(wheel) as archive:
            broken = archive.testzip()
            members = archive.infolist()
            metadata = archive.read(f"torch_npu-{wheel_version}.dist-info/METADATA").decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError, KeyError, EOFError) as error:
        raise OpgenError(f"{wheel} is not a readable wheel: {error}",
                         hint="download it again (or run without --wheel)") from None
    if broken is not None:
        raise OpgenError(f"{wheel} is corrupt: {broken} fails its CRC check", hint="download it again")
    if f"\nVersion: {wheel_version}\n" not in metadata:
        raise OpgenError(f"{wheel.name}: its METADATA does not say Version: {wheel_version}")
    members = [m for m in members if m.filename.startswith(PREFIX) and not m.is_dir()]
    if not any(m.filename == PREFIX + "__init__.py" for m in members):
        raise OpgenError(f"{wheel.name} has no {PREFIX} package",
                         hint=f"npugraph_ex ships in torch-npu {HAVE_NPUGRAPH_EX}; pick a version that has it")
    for member in members:
        parts = member.filename[len(PREFIX):].split("/")
        if member.filename.startswith("/") or ".." in parts or "\\" in member.filename:
            raise OpgenError(f"{wheel.name}: refusing the unsafe path {member.filename!r}")
    return wheel_version, members


def install(wheel: Path, version: str, members: list[zipfile.ZipInfo], torch_version: str | None) -> Path:
    """Extract into a temporary directory beside the target, then rename it into place."""
    lib = loader()
    target = lib.install_dir(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in members:
                destination = staging / lib.PACKAGE / member.filename[len(PREFIX):]
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(archive.read(member))
        record = {"wheel": wheel.name, "sha256": _sha256(wheel), "torch_npu_version": version,
                  "torch_version": torch_version, "files": len(members)}
        (staging / lib.RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{version}-old-", dir=target.parent))
            os.replace(target, old / "x")
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as error:
        fault = os_error(error, "write", f"the cache at {target}", outcome="the cache is as it was")
        if not isinstance(fault, EnvironmentFault):
            fault.hint = "set OPGEN_CACHE_DIR to a writable directory"
        raise fault from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _regular_wheel(wheel: str) -> None:
    """--wheel names a regular file: a FIFO would block the zip reader, /dev/zero never end; each is said as what
    it is."""
    try:
        mode = os.stat(wheel).st_mode
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise OpgenError(f"--wheel {wheel}: no such file", hint="give the path of a downloaded torch_npu-*.whl") \
                from None
        raise os_error(error, "read", f"--wheel {wheel}") from None
    kind = special_kind(mode)
    if kind is not None:
        raise OpgenError(f"--wheel {wheel} is {kind}, not a regular file",
                         hint="give the path of a downloaded torch_npu-*.whl")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(version: str | None, wheel: str | None) -> tuple[Path, str]:
    """(install directory, note) for `opgen npugraph-ex fetch`."""
    lib = loader()
    torch_version = lib.torch_release()
    if wheel is not None:
        path = Path(wheel)
        _regular_wheel(wheel)
        wheel_version, members = verify(path, version)
        return install(path, wheel_version, members, torch_version), _mismatch(wheel_version, torch_version)
    version = version or default_version(lib)
    with tempfile.TemporaryDirectory(prefix="opgen-torch-npu-") as directory:
        path = download(version, directory)
        wheel_version, members = verify(path, version)
        return install(path, wheel_version, members, torch_version), _mismatch(wheel_version, torch_version)


def _mismatch(version: str, torch_version: str | None) -> str:
    if torch_version is None or loader().serves(version, torch_version) is not None:
        return ""
    return (f"warning: torch-npu {version} is not built for the installed torch {torch_version}: the generated "
            f"tests look for npugraph_ex {described(torch_version)} and will skip")
