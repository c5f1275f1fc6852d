"""The live bar's rule (core/progress.py): only on a person's terminal. A launcher's pseudo-terminal
(Open MPI, srun --pty, torchrun), TERM=dumb and CI turn it off under `--progress auto`; `on` draws
whenever stdout is a terminal, `off` never. Before, the bar drew whenever stdout.isatty()."""

from __future__ import annotations

import io
import os

import pytest
from click.testing import CliRunner

from commbench.cli.app import cli
from commbench.core import streams
from commbench.core.errors import BadInput
from commbench.core.launch import started_by
from commbench.core.progress import ci_set, draw_bar
from commbench.harness.console import Reporter

TERMINAL = {"TERM": "xterm-256color", "HOME": "/root", "PATH": "/usr/bin"}

LAUNCHED = {
    "mpirun": {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "PMIX_RANK": "0"},
    "mpirun, only the PMIx rank": {"PMIX_RANK": "1"},
    "mpirun, only OMPI_COMM_WORLD_LOCAL_RANK": {"OMPI_COMM_WORLD_LOCAL_RANK": "0"},
    "MPICH / PMI": {"PMI_RANK": "0", "PMI_SIZE": "2"},
    "srun step": {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"},
    "sbatch script": {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"},
    "torchrun": {"TORCHELASTIC_RUN_ID": "none", "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h1"},
    "torchrun agent variables": {"LOCAL_RANK": "0"},
    "torchrun group rank": {"GROUP_RANK": "0"},
    "lab run": {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "COMMBENCH_LAUNCHER": "lab"},
}


@pytest.mark.parametrize("name", sorted(LAUNCHED))
def test_a_launchers_terminal_gets_no_bar_under_auto_but_one_under_on(name):
    env = {**TERMINAL, **LAUNCHED[name]}
    assert started_by(env) is not None
    assert draw_bar("auto", True, env) is False
    assert draw_bar("on", True, env) is True
    assert draw_bar("off", True, env) is False


def test_launcher_names():
    assert started_by({**TERMINAL, **LAUNCHED["mpirun"]}) == "mpi"
    assert started_by({**TERMINAL, **LAUNCHED["srun step"]}) == "slurm"
    assert started_by({**TERMINAL, **LAUNCHED["torchrun"]}) == "torchrun"
    assert started_by({**TERMINAL, **LAUNCHED["lab run"]}) == "lab"


def test_a_persons_terminal_gets_the_bar():
    assert started_by(TERMINAL) is None
    assert draw_bar("auto", True, TERMINAL) is True


@pytest.mark.parametrize("env", [
    {"OMPI_MCA_btl": "^openib"},  # a user's Open MPI setting, no launcher
    {"SLURM_JOB_ID": "7"},  # salloc's shell: a person at a terminal inside an allocation
    {"SLURM_PROCID": "0"},  # a stray one alone
    {"RANK": "0"},  # half of torchrun's set
])
def test_settings_that_are_no_launcher_leave_the_bar(env):
    assert started_by({**TERMINAL, **env}) is None
    assert draw_bar("auto", True, {**TERMINAL, **env}) is True


@pytest.mark.parametrize("value,is_ci", [("true", True), ("1", True), ("yes", True), ("TRUE", True),
                                         ("woodpecker", True), ("false", False), ("0", False), ("", False),
                                         (" False ", False)])
def test_ci(value, is_ci):
    env = {**TERMINAL, "CI": value}
    assert ci_set(env) is is_ci
    assert draw_bar("auto", True, env) is (not is_ci)
    assert draw_bar("on", True, env) is True


def test_dumb_terminal_and_no_terminal():
    assert draw_bar("auto", True, {**TERMINAL, "TERM": "dumb"}) is False
    assert draw_bar("on", True, {**TERMINAL, "TERM": "dumb"}) is True
    for mode in ("auto", "on", "off"):
        assert draw_bar(mode, False, TERMINAL) is False  # a file or a pipe: never


def test_a_mode_that_is_none_of_them():
    with pytest.raises(BadInput, match="--progress 'yes' is not one of auto, on, off"):
        draw_bar("yes", True, TERMINAL)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("mode,env,draws", [
    ("auto", TERMINAL, True),
    ("auto", {**TERMINAL, **LAUNCHED["mpirun"]}, False),  # before: the bar drew into mpirun's log
    ("on", {**TERMINAL, **LAUNCHED["mpirun"]}, True),
    ("off", TERMINAL, False),
    ("auto", {**TERMINAL, "CI": "true"}, False),
])
def test_the_reporter_follows_the_rule(monkeypatch, mode, env, draws):
    monkeypatch.setattr("os.environ", dict(env))
    stream = FakeTerminal()
    reporter = Reporter(True, 3, stream=stream, progress=mode)
    try:
        assert (reporter.progress is not None) is draws
        reporter.line("#  1024  256  float")
        reporter.advance("all_reduce 1K")
    finally:
        reporter.close()
    text = stream.getvalue()
    assert "#  1024  256  float" in text
    if not draws:
        assert "\x1b" not in text and text == "#  1024  256  float\n"


def test_progress_is_an_option_of_every_measuring_command():
    runner = CliRunner()
    for command in ("sweep", "buckets", "pairs", "zero"):
        shown = runner.invoke(cli, [command, "--help"])
        assert shown.exit_code == 0 and "--progress [auto|on|off]" in shown.output, command
        refused = runner.invoke(cli, [command, "--progress", "maybe"])
        assert refused.exit_code == 2 and "'maybe' is not one of 'auto', 'on', 'off'" in refused.output, command


@pytest.mark.parametrize("env,styled", [(TERMINAL, True), ({**TERMINAL, **LAUNCHED["mpirun"]}, False),
                                        ({**TERMINAL, "CI": "true"}, False)])
def test_doctor_writes_plain_text_under_a_launcher(monkeypatch, env, styled):
    from commbench.net import doctor

    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = FakeTerminal()
    host = {"host": "node01", "source": "live", "interfaces": [], "rdma": [], "gpus": [], "traffic": None,
            "watch": None}
    doctor.report_human([host], [doctor.Finding("counters", "node01", "eth0 drops rose", "check the cable")],
                        file=out)
    assert "node01" in out.getvalue()
    assert ("\x1b" in out.getvalue()) is styled  # before: bold and colour codes in mpirun's log


def test_a_closed_pipe_stops_the_table_not_the_reporter(capsys):
    """stdout's reader gone: the first failed line says so on stderr once, later lines go nowhere
    (the descriptor now points at /dev/null), and the last line (where the results are) moves to stderr."""
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    os.close(read_end)  # the reader went away
    reporter = Reporter(True, 3, stream=stream, progress="off")
    reporter.line("# Collective test starting: all_reduce")
    reporter.line("        1024  ...")
    reporter.last_line("# Results: results/x.parquet (3 rows)")
    stream.write("late write\n")
    stream.flush()  # no BrokenPipeError: /dev/null
    err = capsys.readouterr().err.splitlines()
    assert err == ["commbench: stdout was closed (its reader went away): the run goes on without its table and "
                   "writes every point to its results file; Ctrl-C stops it and keeps what was measured",
                   "commbench: Results: results/x.parquet (3 rows)"]
    stream.close()


def test_a_guarded_stdout_tells_the_reporter(capsys):
    """In the entry point's process stdout is a GuardedStream (core/streams.py) that swallows the
    BrokenPipeError itself: the reporter still notices, says so once and moves its last line to stderr."""
    read_end, write_end = os.pipe()
    raw = os.fdopen(write_end, "w")
    os.close(read_end)
    guarded = streams.GuardedStream(raw)
    reporter = Reporter(True, 3, stream=guarded, progress="off")
    reporter.line("# Collective test starting: all_reduce")
    reporter.line("        1024  ...")
    reporter.last_line("# Results: results/x.parquet (3 rows)")
    err = capsys.readouterr().err.splitlines()
    assert guarded.reader_gone and streams.reader_gone(guarded)
    assert len(err) == 2 and err[0].startswith("commbench: stdout was closed") and \
        err[1] == "commbench: Results: results/x.parquet (3 rows)"
    raw.close()


def test_a_guarded_stdout_writes_through_until_its_reader_goes():
    read_end, write_end = os.pipe()
    raw = os.fdopen(write_end, "w")
    guarded = streams.GuardedStream(raw)
    assert guarded.write("first\n") == 6 and guarded.fileno() == write_end  # the stream's own attributes
    guarded.flush()
    assert os.read(read_end, 100) == b"first\n" and not streams.reader_gone(guarded)
    os.close(read_end)
    assert guarded.write("x" * 100_000) == 100_000  # more than a pipe holds: the write finds the reader gone
    guarded.flush()
    assert guarded.reader_gone
    assert guarded.write("later\n") == 6
    raw.write("straight to the descriptor\n")
    raw.flush()  # fd 1's stand-in now points at /dev/null: no BrokenPipeError
    raw.close()
    assert not streams.reader_gone(io.StringIO())  # a plain stream never reports a gone reader
