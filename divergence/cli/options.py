"""Options several commands share, defined once so they read and check alike.

>>> import click
>>> @click.command()
... @width_option
... def report(width: int | None) -> None:
...     click.echo(width)
>>> report.main(["--width", "60"], standalone_mode=False)
60
"""

from __future__ import annotations

import click

width_option = click.option(
    "--width",
    type=click.IntRange(min=40),
    default=None,
    help="Report width, at least 40 (default: the terminal's).",
)
