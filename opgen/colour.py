"""Terminal colour, one way for every command: style the text, and let `click.echo` drop the styling
when the stream is not a terminal (or NO_COLOR is set)."""

from __future__ import annotations

import os


def paint(text: str, color: bool = True, **style) -> str:
    """`text` with click's style keywords (fg=..., bold=...) when `color`; unchanged otherwise."""
    if not color or not any(style.values()) or os.environ.get("NO_COLOR"):
        return text
    import click

    return click.style(text, **style)
