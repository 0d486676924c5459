"""`opgen npugraph-ex fetch|path`."""

from __future__ import annotations

import sys

import click


@click.group("npugraph-ex")
def npugraph_ex() -> None:
    """Fetch npugraph_ex (torch_npu's graph backend) so generated tests run its compiler on CPU."""


@npugraph_ex.command("fetch")
@click.option("--torch-npu-version", "version", metavar="X.Y.Z",
              help="torch-npu version to fetch; X.Y.Z takes the newest of X.Y.Z and X.Y.Z.postN "
              "(default: the installed torch's X.Y.Z).")
@click.option("--wheel", type=click.Path(dir_okay=False), metavar="PATH",
              help="Use this torch_npu-*.whl instead of downloading (works offline).")
def fetch(version: str | None, wheel: str | None) -> None:
    """Download the matching torch-npu wheel with pip (or take --wheel), verify it, and extract only
    torch_npu/dynamo/npugraph_ex/ into opgen's cache. torch-npu is not installed."""
    from ..console import handle_errors

    handle_errors(_fetch)(version, wheel)


def _fetch(version: str | None, wheel: str | None) -> None:
    from .fetch import fetch as run_fetch

    _check_cache_dir()
    target, note = run_fetch(version, wheel)
    if note:
        click.echo(note, err=True)
    click.echo(str(target))


@npugraph_ex.command("path")
@click.option("--torch-npu-version", "version", metavar="X.Y.Z",
              help="torch-npu version; X.Y.Z finds the newest fetched of X.Y.Z and X.Y.Z.postN "
              "(default: the installed torch's X.Y.Z).")
def path(version: str | None) -> None:
    """Print the directory holding the fetched npugraph_ex (exit 1 when it has not been fetched)."""
    from ..console import handle_errors

    handle_errors(_path)(version)


def _path(version: str | None) -> None:
    from . import loader

    _check_cache_dir()
    lib = loader()
    version = version or lib.torch_release()
    found = lib.find(version) if version else None
    if found is None:
        where = f" (looked in {lib.looked_in(version)})" if version else " (torch is not installed)"
        click.echo(f"npugraph_ex is not fetched{where}\n  = hint: {lib.FETCH_HINT}", err=True)
        sys.exit(1)
    click.echo(str(found))


def _check_cache_dir() -> None:
    """OPGEN_CACHE_DIR must name a directory: `~user/...` of a user this machine does not know names none."""
    import os

    from ..errors import OpgenError

    value = os.environ.get("OPGEN_CACHE_DIR")
    if value and value.startswith("~") and os.path.expanduser(value) == value:
        user = value[1:].split("/", 1)[0]
        raise OpgenError(f"OPGEN_CACHE_DIR={value}: cannot expand {value.split('/', 1)[0]!r}: "
                         + (f"there is no user {user!r} on this machine" if user else "there is no home directory"),
                         hint="set OPGEN_CACHE_DIR to an absolute path, or unset it to use ~/.cache/opgen")
