"""`opgen lint`: the click command (registered on the main group by opgen/cli.py)."""

from __future__ import annotations

import sys

import click

from ..errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

MAX_FIX_PASSES = 8


@click.command("lint", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--output-format", "output_format", type=click.Choice(["text", "json", "github", "sarif"]),
              default="text", show_default=True, help="How to print diagnostics.")
@click.option("--select", "select", metavar="CODES", default="", help="Comma-separated codes or prefixes (OPG2,OPG301).")
@click.option("--ignore", "ignore", metavar="CODES", default="", help="Comma-separated codes or prefixes to skip.")
@click.option("--exclude", "exclude", metavar="GLOBS", default=None,
              help="Comma-separated globs to skip, replacing the defaults (.git, .venv, build, .opgen, ...).")
@click.option("--extend-exclude", "extend_exclude", metavar="GLOBS", default="",
              help="Comma-separated globs to skip in addition to the defaults and the configured ones.")
@click.option("--statistics", is_flag=True, help="Print one line per rule with its count instead of diagnostics.")
@click.option("--exit-zero", "exit_zero", is_flag=True, help="Exit 0 even when diagnostics remain.")
@click.option("--fix", is_flag=True, help="Apply the safe fixes (dispatch-key spelling, `(a!)`, define namespace).")
@click.option("--explain", "explain", metavar="CODE", help="Explain a rule code and exit.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="pyproject.toml to read [tool.opgen.lint] from (default: the nearest one).")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Read every file again instead of taking unchanged files' records from the last run.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Worker processes (default: all cores).")
def lint(paths, output_format, select, ignore, exclude, extend_exclude, statistics, exit_zero, fix, explain, config_path, jobs, no_cache) -> None:
    """Check custom-op registrations in PATHS (files or directories; default '.').

    Ops are matched across all files given: a fake registered in another file counts.
    Exit codes: 0 clean, 1 diagnostics remain, 2 usage or internal error, 3 the machine refused.
    Suppress one line with `# noqa: OPG204` (or a bare `# noqa`), a whole file with `# opgen: noqa`.
    """
    from ..console import handle_errors

    handle_errors(_run)(paths, output_format, select, ignore, exclude, extend_exclude, statistics, exit_zero, fix,
                        explain, config_path, jobs, no_cache)


def _run(paths, output_format, select, ignore, exclude, extend_exclude, statistics, exit_zero, fix, explain, config_path, jobs, no_cache) -> None:
    from .config import load_config
    from .engine import lint_paths
    from .report import paint_text, render
    from .report import statistics as render_statistics

    if explain:
        from ..explain import explain_code

        explain_code(explain, False)
        return
    paths = list(paths) or ["."]
    config = load_config(paths[0], config_path)
    if exclude is not None:
        config.exclude = _globs(exclude)
    config.exclude += _globs(extend_exclude)
    select_codes = tuple(s for s in select.split(",") if s.strip())
    ignore_codes = tuple(s for s in ignore.split(",") if s.strip())
    result = lint_paths(paths, config, select=select_codes, ignore=ignore_codes, jobs=jobs,
                        cache=_use_cache(no_cache, fix))
    fixed, not_rewritten = 0, {}
    if fix:
        result, fixed = _fix(result, not_rewritten, lambda: lint_paths(paths, config, select=select_codes,
                                                                        ignore=ignore_codes, jobs=jobs))
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    for path, reason in not_rewritten.items():
        click.echo(f"error: {path}: --fix did not rewrite this file: {reason}; its fixable problems remain", err=True)
    diagnostics = result.diagnostics
    if statistics:
        text = render_statistics(diagnostics)
    else:
        text = render(diagnostics, output_format, fixed=fixed)
    if text:
        click.echo(paint_text(text) if output_format == "text" and not statistics else text)
    if fix and output_format != "text" and (fixed or not_rewritten):
        files = f" ({len(not_rewritten)} file{'s' if len(not_rewritten) != 1 else ''} not rewritten)" \
            if not_rewritten else ""
        click.echo(f"{fixed} fixed{files}", err=True)
    for path, error in result.internal_errors:
        click.echo(f"error: {path}: opgen could not check this file: {error}\n"
                   "  = hint: rerun with OPGEN_DEBUG=1 for the traceback and report it", err=True)
    if result.internal_errors:
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK if exit_zero or not diagnostics else EXIT_FINDINGS)


def _fix(result, not_rewritten: dict[str, str], relint):
    """Apply the safe fixes, re-linting after each pass (a fix may reveal another); a file that cannot be
    rewritten is left whole and recorded in `not_rewritten` (path -> why), and its edits are not offered again.
    A file another process rewrote between the lint and the fix (a second `opgen lint --fix`, an editor) is not
    touched: it is linted again and fixed from what it holds now."""
    from .fix import apply_edits

    fixed, changed = 0, set()
    for _ in range(MAX_FIX_PASSES):
        edits = [d.fix for d in result.diagnostics if d.fix is not None and d.fix.path not in not_rewritten]
        if not edits:
            return result, fixed
        read = {record.path: record.read_digest for record in result.records if record.read_digest}
        changed = set()
        applied = apply_edits(edits, not_rewritten, read=read, changed=changed)
        fixed += applied
        if not applied and not changed:
            return result, fixed
        result = relint()
    for path in sorted(changed):
        not_rewritten[path] = (f"it changed {MAX_FIX_PASSES} times while opgen was fixing it (another program is "
                               "writing it); run opgen lint --fix again when it is done")
    return result, fixed


def _globs(text: str) -> tuple[str, ...]:
    return tuple(glob.strip() for glob in text.split(",") if glob.strip())


def _use_cache(no_cache: bool, fix: bool) -> bool:
    """--fix reads every file it may rewrite: it compares the bytes it edits with the bytes it linted."""
    return not (no_cache or fix)
