"""Where tune's child runs get their ranks (workloads/tune.py): the argv of a child under each
--launcher, and the Slurm job --launcher srun needs, read from the job's environment. The real
runs: tests/integration/test_lab_tune.py (lab) and test_lab_slurm.py (srun in a real Slurm)."""

from __future__ import annotations

import sys

import pytest

from commbench.core.errors import BadInput
from commbench.workloads.tune import child_command, srun_world


@pytest.fixture
def srun_on_path(tmp_path):
    """A folder holding an executable named srun: what `which` finds on a Slurm node."""
    (tmp_path / "srun").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "srun").chmod(0o755)
    return str(tmp_path)


def test_each_launcher_wraps_the_same_commbench_command():
    own = [sys.executable, "-m", "commbench", "sweep", "--sizes", "1K"]
    assert child_command(["sweep", "--sizes", "1K"], "local") == own
    assert child_command(["sweep", "--sizes", "1K"], "lab") == [sys.executable, "-m", "commbench", "lab", "run", "--",
                                                                *own]
    assert child_command(["sweep", "--sizes", "1K"], "srun") == ["srun", "--kill-on-bad-exit=1", *own]


@pytest.mark.parametrize("tasks,nodes,want", [("2", "2", (2, 1)), ("16", "2", (16, 8)), ("3", "2", (3, 2)),
                                              ("8", None, (8, 8))])
def test_the_jobs_tasks_are_the_world_and_the_busiest_node_shares_its_memory(srun_on_path, tasks, nodes, want):
    env = {"SLURM_JOB_ID": "42", "SLURM_NTASKS": tasks, "PATH": srun_on_path}
    if nodes:
        env["SLURM_JOB_NUM_NODES"] = nodes
    assert srun_world(env) == want


def test_outside_a_job_or_without_srun_or_tasks_is_one_line_naming_the_fix(srun_on_path, tmp_path):
    with pytest.raises(BadInput, match="run tune inside an sbatch script or an salloc allocation"):
        srun_world({"PATH": srun_on_path})
    with pytest.raises(BadInput, match="srun is not on PATH"):
        srun_world({"SLURM_JOB_ID": "42", "SLURM_NTASKS": "2", "PATH": str(tmp_path / "empty")})
    for tasks in (None, "1", "x"):
        env = {"SLURM_JOB_ID": "42", "PATH": srun_on_path, **({"SLURM_NTASKS": tasks} if tasks else {})}
        with pytest.raises(BadInput, match="needs a job of 2 or more tasks .* --ntasks-per-node"):
            srun_world(env)
