"""Open MPI for real: ranks that mpirun binds to the same CPU get one warning line naming the ranks,
the CPUs and the fix (issue #40: both ranks showed `cpus 0` and nothing said so); ranks on distinct
cores, or unbound, get none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.core.launch import free_port

MPIRUN = shutil.which("mpirun")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(MPIRUN is None, reason="Open MPI is not installed: apt-get install openmpi-bin"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="distinct cores need 2 CPUs"),
]
ROOT_OK = ["--allow-run-as-root"] if os.geteuid() == 0 else []
SWEEP = ["sweep", "--collective", "all_reduce", "-b", "1K", "-e", "1K", "-w", "1", "-n", "2", "--no-wire"]


def mpirun(tmp_path: Path, *placement: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_"))}
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    argv = [MPIRUN, *ROOT_OK, "--oversubscribe", "-np", "2", *placement, "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
            "-x", "PATH", sys.executable, "-m", "commbench", *SWEEP, "--out", str(tmp_path / "r.parquet")]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def warnings(res: subprocess.CompletedProcess) -> list[str]:
    return [line for line in res.stderr.splitlines() if "bound to the same CPUs" in line]


def test_both_ranks_on_cpu_0_are_warned_once(tmp_path):
    res = mpirun(tmp_path, "--bind-to", "core:overload-allowed", "--cpu-set", "0")
    assert "cpus 0\n" in res.stdout  # the Using devices block shows both on CPU 0
    assert warnings(res) == [
        "commbench: warning: ranks 0, 1 on " + os.uname().nodename + " are bound to the same CPUs (rank 0 cpus 0, "
        "rank 1 cpus 0): they take turns and measure the scheduler; fix: `mpirun --bind-to none`, or "
        "`--map-by slot:PE=N` (N CPUs per rank), or srun --cpu-bind=cores, or commbench --bind cores"]


@pytest.mark.parametrize("placement", [["--bind-to", "core", "--map-by", "core"], ["--bind-to", "none"]],
                         ids=["distinct-cores", "unbound"])
def test_distinct_or_unbound_ranks_get_no_warning(tmp_path, placement):
    assert warnings(mpirun(tmp_path, *placement)) == []
