"""The CLI and local ranks as real processes: tests that were in tests/unit (issue #36) and need a
process of their own, so that the unit tier starts none. Each keeps its in-process neighbours in its
first file, named in its section.

tests/integration/test_reliability_{inputs,numbers,launch,labsecrets}.py moved here whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import cb
from unit.synthetic import make_rows, write
from unit.test_zerogrid import zero_rows

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


# ---- the program's own entry (unit/test_cli_entry.py runs the same through app.main in process) ----


@pytest.mark.parametrize("group, first", [((), "Usage: commbench [OPTIONS] COMMAND"),
                                          (("lab",), "Usage: commbench lab [OPTIONS] COMMAND"),
                                          (("nccl-tests",), "Usage: commbench nccl-tests [OPTIONS] COMMAND")])
def test_a_group_alone_prints_its_help(group, first):
    proc = cb(*group, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(first) and "Commands:" in proc.stdout


def test_an_unknown_command_is_one_line_with_a_guess():
    proc = cb("swep", timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "commbench: no such command 'swep' (did you mean sweep?): see 'commbench --help'\n"


# ---- shell completion through the real command (unit/test_completion.py) ----


def test_the_shell_script_and_a_completion_through_the_real_command():
    env = {**os.environ, "_COMMBENCH_COMPLETE": "bash_source"}
    script = subprocess.run([sys.executable, "-m", "commbench"], env=env, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "complete -o nosort -F _commbench_completion commbench" in script.stdout
    env.update(_COMMBENCH_COMPLETE="bash_complete", COMP_WORDS="commbench sweep --collective reduce_s", COMP_CWORD="3")
    got = subprocess.run([sys.executable, "-m", "commbench"], env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.split() == ["plain,reduce_scatter"], got.stdout + got.stderr


# ---- the settings axes' refusals on the command line (unit/test_settings.py) ----


@pytest.mark.parametrize("args, says", [
    (["sweep", "--env", "NOEQUALS"], "has no '='"),
    (["sweep", "--env", "NCCL_ALGO="], "has an empty value"),
    (["sweep", "--env", "OMP_NUM_THREADS=1", "--env", "OMP_NUM_THREADS=2"], "is given twice"),
    (["sweep", "--env", "GLOO_SOCKET_IFNAME=nosuchnic0"], "no interface nosuchnic0 on"),
    (["sweep", "--env", "GLOO_SOCKET_IFNAME=lo", "--iface", "lo"], "drop --iface, or the --env axis"),
    (["sweep", "--env", "NCCL_ALGO=Ring|Tree", "--backend", "gloo"], "does nothing with --backend gloo"),
    (["buckets", "--env", "NCCL_ALGO="], "has an empty value"),
    (["zero", "--env", "OMP_NUM_THREADS=1|2", "--engine", "deepspeed"], "the DeepSpeed engine keeps the one"),
])
@pytest.mark.failure(row="env-noequals-env-nccl-algo")
def test_the_command_line_refuses_with_one_line_and_exit_2(tmp_path, args, says):
    proc = cb(*args, "--out", str(tmp_path / "r.parquet"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not (tmp_path / "r.parquet").exists()


# ---- SIGTERM while writing ends the real command (unit/test_reliability_outputs.py injects the rest) ----


@pytest.fixture(scope="module")
def zero_results(tmp_path_factory) -> Path:
    """A sweep's rows and a ZeRO grid's: `report` writes r.md, r.png and r-zero.png from it."""
    return write(tmp_path_factory.mktemp("inputs") / "m.parquet", make_rows(repetitions=1) + zero_rows())


@pytest.mark.failure(row="ctrl-c-sigterm-while-writing")
def test_sigterm_while_writing_ends_the_command_as_sigterm_and_leaves_nothing(zero_results, tmp_path):
    """The real command: it ends as SIGTERM ends it (143 in a shell) with nothing left behind."""
    script = textwrap.dedent("""
        import os, signal, sys
        real = os.fsync
        def fsync(fd):
            if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".r-zero.png."):
                os.kill(os.getpid(), signal.SIGTERM)
            return real(fd)
        os.fsync = fsync
        from commbench.cli.app import main
        main(sys.argv[1:])
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script, "report", str(zero_results), "--out",
                           str(tmp_path / "r.md")], capture_output=True, text=True, env=env, timeout=120)
    # killed by the signal itself, or exit 143 where the command line turns Terminated into its exit code
    assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), proc.stderr
    assert "Traceback" not in proc.stderr and sorted(p.name for p in tmp_path.iterdir()) == []


# ---- local ranks fork from the parent that imported torch (unit/test_launch.py) ----

FORKED = """
import sys
from commbench.core import launch
import torch  # what the CLI has imported before it starts the ranks

SEEN = ["set in the parent after its start"]

def rank(env):
    print(f"rank {env.rank} of {env.world_size}: {SEEN[0]}", file=sys.stderr, flush=True)
    return 0

sys.exit(launch.spawn_local(2, rank, fork=True) if launch.fork_safe() else 9)
"""


def test_local_ranks_fork_from_the_parent_that_imported_torch(tmp_path):
    """A forked rank holds what its parent held (here: a value a fresh interpreter would not have),
    so it skips torch's import; each reports and the run's code is 0."""
    proc = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line for line in proc.stderr.splitlines() if line.startswith("rank "))
    assert lines == [f"rank {r} of 2: set in the parent after its start" for r in (0, 1)], proc.stderr
