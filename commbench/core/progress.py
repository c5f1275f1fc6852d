"""Whether rank 0 draws the live progress bar: `--progress auto|on|off`.

A bar is cursor movement and colour: on a person's terminal it shows how far a run is, anywhere
else it is noise in a log. Open MPI hands its ranks a pseudo-terminal even when mpirun's output
goes to a file (13.5 KB of escape sequences for 18 rows), and srun --pty and torchrun do the like,
so "stdout is a terminal" alone does not say that a person watches it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from commbench.core.errors import BadInput
from commbench.core.launch import started_by

MODES = ("auto", "on", "off")


def ci_set(environ: Mapping[str, str]) -> bool:
    """CI=true, CI=1, CI=yes (GitHub, GitLab, Buildkite, ...): a CI job; empty, false and 0 say not."""
    value = str(environ.get("CI", "")).strip().lower()
    return value not in ("", "false", "0")


def draw_bar(mode: str, is_terminal: bool, environ: Mapping[str, str] | None = None) -> bool:
    """The one rule. off: never. on: whenever stdout is a terminal, also under a launcher. auto: when
    stdout is a terminal, no launcher started this process (core/launch.py started_by), TERM is not
    dumb and no CI is set."""
    env = os.environ if environ is None else environ
    check_mode(mode)
    if mode == "off" or not is_terminal:
        return False
    if mode == "on":
        return True
    return env.get("TERM") != "dumb" and not ci_set(env) and started_by(env) is None


def check_mode(mode: str, flag: str = "--progress") -> str:
    if mode not in MODES:
        raise BadInput(f"{flag} {mode!r} is not one of {', '.join(MODES)}: e.g. {flag} off")
    return mode


def is_terminal(stream: Any) -> bool:
    """stream.isatty(), False for a stream without one or already closed."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
