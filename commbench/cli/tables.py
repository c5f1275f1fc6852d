"""The option of the commands whose tables fit 120 columns by default (tune, zero): --wide adds
the columns past that, declared once here."""

from __future__ import annotations

import click


def wide_option(command):
    """--wide: the statistics columns, past the 120 columns the table fits by default."""
    return click.option(
        "--wide", is_flag=True, help="Add the statistics columns to the table (wider than 120 characters)."
    )(command)
