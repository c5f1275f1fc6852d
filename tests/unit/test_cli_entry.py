"""The program's own entry: a command group called alone prints its help (stdout, exit 0), and an
unknown command is one line with a guess, exit 2, no traceback. In process (app.main, through
tests/conftest.py's `cli`); integration/test_cli_process.py runs the first two as `python -m commbench`."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("group, first", [((), "Usage: commbench [OPTIONS] COMMAND"),
                                          (("lab",), "Usage: commbench lab [OPTIONS] COMMAND"),
                                          (("nccl-tests",), "Usage: commbench nccl-tests [OPTIONS] COMMAND")])
def test_a_group_alone_prints_its_help(cli, group, first):
    proc = cli(*group)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(first) and "Commands:" in proc.stdout


def test_an_unknown_command_is_one_line_with_a_guess(cli):
    proc = cli("swep")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "commbench: no such command 'swep' (did you mean sweep?): see 'commbench --help'\n"


@pytest.mark.parametrize("group, order", [
    ((), ["sweep", "buckets", "zero", "pairs", "tune", "compare", "gate", "trend", "plot", "report", "export",
          "capture", "replay", "doctor", "check", "nccl-tests", "lab"]),
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


def _commands_with_arguments(group, path=()):
    import click

    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands_with_arguments(command, (*path, name))
        elif any(isinstance(p, click.Argument) and p.required for p in command.params):
            yield (*path, name)


def test_a_command_called_without_its_arguments_names_them_and_shows_a_first_try(capsys):
    """Every command that takes arguments, called bare (outside the lab, which asks for a lab
    first): one line naming the arguments, an example to type, its help; exit 2."""
    from commbench.cli import app

    paths = [p for p in _commands_with_arguments(app.cli) if p[0] != "lab"]
    assert {("compare",), ("gate",), ("plot",), ("report",), ("nccl-tests", "import")} <= set(paths)
    for path in paths:
        with pytest.raises(SystemExit) as exit_info:
            app.main(list(path))
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and len(err.splitlines()) == 1, (path, err)
        assert err.startswith(f"commbench: {' '.join(path)} needs "), err
        assert f", e.g. 'commbench {' '.join(path)} " in err and f"see 'commbench {' '.join(path)} --help'" in err


def test_the_missing_one_is_named_when_some_were_given(capsys):
    from commbench.cli import app

    with pytest.raises(SystemExit):
        app.main(["compare", "before.parquet"])
    assert capsys.readouterr().err.startswith("commbench: compare needs BEFORE AFTER (missing: AFTER), e.g. ")
