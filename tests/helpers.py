"""What tests in more than one file need: the CLI in a subprocess (`cb`) and an environment without
a launcher's variables (`LAUNCHER_VARS`, `clean_env`). Importable as `helpers` from every test
file: tests/conftest.py puts tests/ on sys.path."""

from __future__ import annotations

import os
import re
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


def cb(*args: str, env: dict[str, str] | None = None, timeout: float = 300, check: bool = False,
       **kw) -> subprocess.CompletedProcess:
    """`python -m commbench ARGS` in a subprocess, its output captured as text (env None: this
    process's environment). check: an exit code other than 0 fails with both outputs."""
    proc = subprocess.run([*COMMBENCH, *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"commbench {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc
