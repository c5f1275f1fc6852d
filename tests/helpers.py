"""What tests in more than one file need: the CLI in a subprocess (`cb`) and an environment without
a launcher's variables (`LAUNCHER_VARS`, `clean_env`). Importable as `helpers` from every test
file: tests/conftest.py puts tests/ on sys.path."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

COMMBENCH = (sys.executable, "-m", "commbench")  # the real entry point, in this interpreter

# What a launcher (torchrun, Slurm, Open MPI, PMI/PMIx) or an earlier commbench sets, and the socket
# choices a rank reads: a test that starts its own ranks removes them, so that commbench spawns its
# ranks even when the tests themselves run inside a Slurm step or under torchrun. The names
# core/launch.py reads are all here (test_helpers.py holds it to that).
LAUNCHER_VARS = re.compile(r"^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|"
                           r"TORCHELASTIC_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MPI_LOCAL.*|COMMBENCH_.*|"
                           r"GLOO_SOCKET_IFNAME|NCCL_SOCKET_IFNAME)$")


def clean_env(extra: dict[str, str] | None = None, /, **more: str) -> dict[str, str]:
    """This process's environment without LAUNCHER_VARS, then `extra` and `more` on top."""
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARS.match(k)}
    env.update(extra or {})
    env.update(more)
    return env


def run_group(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with the output captured as text, the command in a session of its own: on a
    timeout the whole group is killed (a launcher's workers too: torchrun, commbench's own ranks),
    not only the command, so that no orphan rank outlives the test holding ports and CPUs."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def cb(*args: str, env: dict[str, str] | None = None, timeout: float = 300, check: bool = False,
       **kw) -> subprocess.CompletedProcess:
    """`python -m commbench ARGS` in a subprocess, its output captured as text (env None: this
    process's environment). check: an exit code other than 0 fails with both outputs."""
    proc = run_group([*COMMBENCH, *args], timeout, env=env, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"commbench {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc
