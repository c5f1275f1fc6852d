"""The command line: the `commbench` group, its commands registered from the cli modules, and the
mapping of errors to exit codes and one-line messages."""

from __future__ import annotations

import sys

import click

from commbench import __version__
from commbench.cli import analyze, capture, check, doctor, export, measure, replay, trend, tune
from commbench.cli.lab import lab
from commbench.cli.nccl_tests import nccl_tests
from commbench.cli.options import InOrder
from commbench.core import streams
from commbench.core.outtext import terminal
from commbench.core.errors import EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, CommbenchError
from commbench.core.signals import Terminated, ignore_signals_until_exit


@click.group(cls=InOrder, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="commbench")
def cli() -> None:
    """Communication benchmarks for distributed deep learning (NCCL, gloo)."""


for _command in (measure.sweep, measure.buckets, measure.zero, measure.pairs, tune.tune,  # measure
                 analyze.compare, analyze.gate, trend.trend, analyze.plot, analyze.report,  # judge and look
                 export.export, capture.capture, replay.replay,  # results as Prometheus metrics; a job's communication
                 doctor.doctor, check.check, nccl_tests, lab):  # diagnose, nccl-tests, the emulated cluster
    cli.add_command(_command)


# The most of one error line shown: values from files are bounded where they are named (core/outtext.py);
# this bounds the line whatever it holds.
MESSAGE_LIMIT = 4000


def _fail(message: str, code: int) -> None:
    """Every error line passes here: one terminal line, control and bidi characters shown as escapes,
    written in one write with its newline (print writes the end apart, and the ranks of a launcher
    that share one stderr then ran two refusals into one line)."""
    sys.stderr.write(f"commbench: {terminal(message, MESSAGE_LIMIT)}\n")
    sys.stderr.flush()
    sys.exit(code)


def _interrupted(code: int) -> None:
    """Stopped by a signal: exit with its code, and let no further Ctrl-C / SIGTERM turn the exit
    (or the interpreter's shutdown) into a traceback or a kill."""
    ignore_signals_until_exit()
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    streams.guard()  # a reader that leaves (`| head`) costs the output, never the exit code
    try:
        code = cli.main(args=argv, prog_name="commbench", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # `commbench` or `commbench lab` alone asks for its help
        click.echo(exc.ctx.get_help(), color=exc.ctx.color)
        sys.exit(0)
    except click.exceptions.NoSuchCommand as exc:
        hint = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        _fail(f"no such command {exc.command_name!r}{hint}: see '{_help(exc)}'", EXIT_USAGE)
    except click.exceptions.NoSuchOption as exc:
        hint = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        _fail(f"no such option {exc.option_name}{hint}: see '{_help(exc)}'", EXIT_USAGE)
    except click.MissingParameter as exc:
        _fail(_missing(exc), EXIT_USAGE)
    except click.UsageError as exc:
        _fail(f"{exc.format_message().rstrip('.')}: see '{_help(exc)}'", EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        _interrupted(EXIT_SIGINT)
    except Terminated:  # a SIGTERM that a command turned into an exception and did not catch itself
        _interrupted(EXIT_SIGTERM)
    except CommbenchError as exc:
        _fail(str(exc), exc.exit_code)
    sys.exit(code or 0)


# What a first try of each command that takes arguments looks like: shown when one is missing.
_EXAMPLES = {
    "compare": "commbench compare results/before/ results/after/",
    "gate": "commbench gate results/ --expect bands.yaml",
    "plot": "commbench plot results/",
    "trend": "commbench trend results/nightly/",
    "export": "commbench export results/ --openmetrics commbench.prom",
    "report": "commbench report results/",
    "replay": "commbench replay job.trace",
    "nccl-tests import": "commbench nccl-tests import all_reduce_perf.log",
    "nccl-tests run": "commbench nccl-tests run ./build/all_reduce_perf -- -b 8 -e 8G -f 2 -g 8",
    "nccl-tests side-by-side": "commbench nccl-tests side-by-side results/sweep.parquet results/nccl/",
    "lab exec": "commbench lab exec cbnode1 -- ip -s link",
    "lab slurm submit": "commbench lab slurm submit slurm/commbench.sbatch --wait",
}


def _missing(exc: click.MissingParameter) -> str:
    """'compare needs BEFORE AFTER (missing: AFTER), e.g. ...': the command's arguments and a first
    try, not click's bare 'Missing argument', so that the one line says what to type."""
    ctx, param = exc.ctx, exc.param
    if ctx is None or not isinstance(param, click.Argument):
        return f"{exc.format_message().rstrip('.')}: see '{_help(exc)}'"
    arguments = [p for p in ctx.command.params if isinstance(p, click.Argument)]
    wanted = " ".join(p.make_metavar(ctx) for p in arguments)
    which = "" if param is arguments[0] else f" (missing: {param.make_metavar(ctx)})"  # some were given
    example = _EXAMPLES.get(_sub(exc))
    hint = f", e.g. '{example}'" if example else ""
    return f"{_sub(exc)} needs {wanted}{which}{hint}: see '{_help(exc)}'"


def _sub(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    return ctx.command_path.removeprefix("commbench").strip() or "" if ctx else ""


def _help(exc: click.ClickException) -> str:
    """'commbench lab up --help', or 'commbench --help' for the program itself."""
    return " ".join(filter(None, ("commbench", _sub(exc), "--help")))


if __name__ == "__main__":
    main()
