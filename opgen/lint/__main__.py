"""`python -m opgen.lint`: the lint command without the rest of the CLI (fastest start-up)."""

from .command import lint

lint(prog_name="opgen lint")
