"""`commbench nccl-tests ...`: parse and delegate to integrations/nccl_tests (importer.py, run.py;
docs/NCCL_TESTS.md)."""

from __future__ import annotations

import click

from commbench.cli.options import WEEK_S, InOrder, Number, Text, complete_nccl_tests_collective


@click.group("nccl-tests", cls=InOrder)
def nccl_tests() -> None:
    """Run NVIDIA nccl-tests binaries, or import their logs, into commbench results."""


@nccl_tests.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--out", default="results", show_default=True,
              help="Folder (one <run_id>.parquet per log) or one .parquet file for all of them.")
@click.option("--label", type=Text(), default="", help="Free text stored with every row.")
@click.option("--collective", default=None, shell_complete=complete_nccl_tests_collective,
              help="The collective measured, when neither the log nor its file name says it.")
def import_(files, out, label, collective) -> int:
    """Read nccl-tests logs (text in any shape nccl-tests prints, or -J JSON) into commbench results.

    The numbers are nccl-tests' own. Exit 0; 1 when a log records a failed data check; 2 when a
    file is not an nccl-tests log (nothing is written then).
    """
    from commbench.integrations.nccl_tests.importer import import_files

    return import_files(list(files), out, label=label, collective=collective)


@nccl_tests.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--launcher", type=click.Choice(["none", "mpirun", "srun"]), default="none", show_default=True,
              help="How to start the binary: directly, under mpirun -np N, or under srun --ntasks N.")
@click.option("--np", "np_", type=Number(int, 1, 1_000_000, example="8"), default=None,
              help="Processes for mpirun/srun (nccl-tests built with MPI=1).")
@click.option("--launcher-arg", "launcher_args", multiple=True, metavar="ARG",
              help="One extra argument for the launcher (repeat), e.g. --launcher-arg=--allow-run-as-root.")
@click.option("--timeout", type=Number(float, 0, WEEK_S, low_open=True, example="600"), default=None,
              help="Seconds before the whole run is killed (exit 3).")
@click.option("--out", default="results", show_default=True, help="Folder for <run_id>.parquet, or a .parquet file.")
@click.option("--label", type=Text(), default="", help="Free text stored with every row.")
@click.option("--collective", default=None, shell_complete=complete_nccl_tests_collective,
              help="The collective measured, if the binary's name does not say it.")
@click.option("--no-json", is_flag=True, help="Do not ask for -J JSON output; parse the text only.")
@click.argument("binary")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(launcher, np_, launcher_args, timeout, out, label, collective, no_json, binary, args) -> int:
    """Run an nccl-tests BINARY (argv, no shell) and store its results: BINARY -- ARGS.

    Output is shown live and parsed as it comes: a failing or hung binary keeps the rows it
    printed (exit 3, with the tail of its stderr); a failed data check exits 1.
    """
    from commbench.integrations.nccl_tests.run import run_binary

    args = list(args)
    if args and args[0] == "--":
        args = args[1:]
    return run_binary(binary, args, launcher=launcher, np_=np_, launcher_args=list(launcher_args),
                      timeout=timeout, out=out, label=label, collective=collective, use_json=not no_json)


@nccl_tests.command("side-by-side")
@click.argument("commbench_results", type=click.Path())
@click.argument("nccl_tests_results", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv"]), default="table", show_default=True)
@click.option("--out", default=None, help="Also write the table to this file (in --format), e.g. ratios.csv.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (never one of the inputs).")
def side_by_side(commbench_results, nccl_tests_results, fmt, out, force) -> int:
    """commbench's sweep next to nccl-tests on the same points: the ratio per collective and size.

    COMMBENCH_RESULTS: a `commbench sweep` parquet file (or folder); NCCL_TESTS_RESULTS: the
    parquet of `commbench nccl-tests run` or `import`. Ratio = nccl-tests time / commbench time
    (the busbw ratio from 2 ranks). Goal: from 64 MiB (2+ ranks) ratio >= 0.97; below 64 KiB,
    time per operation within 5%. Exit 0: goal met; 1: missed at some point; 2: the sides
    cannot be paired (one line says why).
    """
    import sys
    from pathlib import Path

    from commbench.analysis.ncclside import sidebyside
    from commbench.core import outputs, results

    inputs = [commbench_results, nccl_tests_results]
    if out is not None:
        outputs.check_new(out, "nccl-tests side-by-side", "--out", inputs, force)
    cb = results.read_results([commbench_results], columns=sidebyside.READ_COLUMNS)
    nt = results.read_results([nccl_tests_results], columns=sidebyside.READ_COLUMNS)
    result = sidebyside.side_by_side(cb, nt, (commbench_results, nccl_tests_results))
    render = {"table": sidebyside.render_table, "markdown": sidebyside.render_markdown,
              "csv": sidebyside.render_csv}[fmt]
    text = render(result)
    sys.stdout.write(text)
    if out is not None:
        outputs.write_files([outputs.Output(Path(out), text.encode("utf-8"), "--out")],
                            "nccl-tests side-by-side", inputs, force)
    return result.exit_code()
