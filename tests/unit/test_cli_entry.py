"""The program's own entry: a command group called alone prints its help (stdout, exit 0), and an
unknown command is one line with a guess, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def commbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("group, first", [((), "Usage: commbench [OPTIONS] COMMAND"),
                                          (("lab",), "Usage: commbench lab [OPTIONS] COMMAND"),
                                          (("nccl-tests",), "Usage: commbench nccl-tests [OPTIONS] COMMAND")])
def test_a_group_alone_prints_its_help(group, first):
    proc = commbench(*group)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(first) and "Commands:" in proc.stdout


def test_an_unknown_command_is_one_line_with_a_guess():
    proc = commbench("swep")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "commbench: no such command 'swep' (did you mean sweep?): see 'commbench --help'\n"


@pytest.mark.parametrize("group, order", [
    ((), ["sweep", "buckets", "zero", "pairs", "tune", "compare", "gate", "plot", "report", "doctor", "nccl-tests",
          "lab"]),
    (("lab",), ["up", "status", "set", "exec", "rsh", "run", "down", "slurm"]),
    (("lab", "slurm"), ["up", "status", "down", "submit"]),
])
def test_help_lists_commands_in_a_users_order_not_alphabetically(group, order):
    """The main job first (sweep), then judging and looking, then diagnosis; a lab from up to down."""
    from click.testing import CliRunner

    from commbench.cli.app import cli

    out = CliRunner().invoke(cli, [*group, "--help"]).output
    listed = [line.split()[0] for line in out.split("Commands:\n", 1)[1].splitlines() if line.startswith("  ")]
    assert listed == order
