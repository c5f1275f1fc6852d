"""`commbench check` on the lab's real Slurm (root only; issue #41 parts 1 and 2): 4 hosts, host 3
shaped to 300mbit. `--mode healthcheck` on each host (as a Prolog / HealthCheckProgram runs it:
this host alone, no job) exits 1 on host 3 within its budget and 0 on host 1; the lab's slurmd itself,
given it as HealthCheckProgram (`lab slurm up --health-check`, after host 3 is shaped), runs it at start
on every host and logs its failure on host 3 alone;
slurm/nightly-check.sbatch, unchanged, runs `check --drain` in a job: `sinfo -R` lists host 3 alone,
its reason starting "commbench:"; with the rate restored and host 2 drained by hand, `check
--resume --launcher lab` returns host 3 to service and leaves host 2 drained with its own reason.
The lab is this file's own (prefix `chk`, subnet 10.230.1.0/24); one lab and one Slurm for the
module. Small steps (doctor, pairs of 1 MiB, 3 timed calls) keep it short.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env, leftovers

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "slurm" / "nightly-check.sbatch"
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "srun")


def _missing_tools() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin"
    return [t for t in SLURM_TOOLS if shutil.which(t, path=path) is None]


pytestmark = NEEDS_LAB + [
    pytest.mark.skipif(bool(_missing_tools()),
                       reason=f"Slurm/munge not installed ({', '.join(_missing_tools())} missing): "
                              "apt-get install slurm-wlm munge"),
]

PREFIX = "chk"
SUBNET = "10.230.1.0/24"
ENV = {k: v for k, v in lab_env(PREFIX).items() if not k.startswith("SLURM_")}
PROFILE = "version: 1\nsteps: [doctor, pairs]\ntime_budget: 150\nlink_rate: 1gbit\npairs: {size: 1M, iters: 3}\n"
HAND = "hand: bad dimm"
STATE = Path(f"/run/commbench-lab-{PREFIX}")
HC_BUDGET = 20
# What Slurm 22.05's slurmd logs when its HealthCheckProgram exits non-zero (seen in this lab).
HC_FAILED = "error: health_check failed: rc:1 output:"

cb = partial(helpers.cb, env=ENV, timeout=200)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    cb("lab", "down")
    assert leftovers(PREFIX) == [], "a previous run left this test's lab behind"
    profile = tmp_path_factory.mktemp("check") / "profile.yaml"
    profile.write_text(PROFILE)
    try:
        cb("lab", "up", "--nodes", "4", "--rate", "1gbit", "--mtu", "1500", "--subnet", SUBNET, check=True)
        cb("lab", "set", "--node", "3", "--rate", "300mbit", check=True)  # before slurmd's health check
        # slurmd runs the program as it starts; the interval keeps it from running again in this module.
        cb("lab", "slurm", "up", "--health-check", str(_wrapper(profile)), "--health-check-interval", "3600",
           check=True)
        yield profile
    finally:
        down = cb("lab", "down")
        assert down.returncode == 0, down.stderr
    assert leftovers(PREFIX) == []


def _wrapper(profile: Path) -> Path:
    """What slurmd runs: no argument, an empty environment; each host writes its own --out folder."""
    script = profile.parent / "healthcheck.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"export PATH={Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin "
        f"COMMBENCH_LAB_PREFIX={PREFIX} COMMBENCH_LAB_DIR={STATE}\n"
        f"exec {sys.executable} -m commbench check --mode healthcheck --profile {profile} "
        f'--time-budget {HC_BUDGET} --out "{profile.parent}/slurmd-$(hostname)"\n')
    script.chmod(0o755)
    return script


def _stamp(line: str) -> datetime:
    return datetime.fromisoformat(line[1:line.index("]")])


def reasons() -> dict[str, str]:
    """sinfo -R of the lab: node -> reason."""
    res = cb("lab", "exec", f"{PREFIX}node1", "--", "sinfo", "-R", "-h", "-N", "-o", "%N|%E",
             env={**ENV, "SLURM_CONF": f"/run/commbench-lab-{PREFIX}/slurm/slurm.conf"}, check=True)
    return dict(line.split("|", 1) for line in res.stdout.splitlines() if "|" in line)


def test_healthcheck_fails_host_3_within_its_budget_and_passes_host_1(lab):
    said = {}
    for host, want in ((3, 1), (1, 0)):
        start = time.monotonic()
        res = cb("lab", "exec", f"{PREFIX}node{host}", "--", sys.executable, "-m", "commbench", "check",
                 "--mode", "healthcheck", "--profile", str(lab), "--time-budget", "30", "--out", str(lab.parent))
        took = time.monotonic() - start
        assert res.returncode == want, res.stdout + res.stderr
        assert took < 30 + 10, took  # its budget, and the lab exec around it
        said[host] = res.stdout + res.stderr
    assert "commbench healthcheck: FAIL chknode3: its link runs at 300 Mbit/s, below the profile's 1 Gbit/s" \
        in said[3], said[3]
    assert "commbench healthcheck: PASS chknode1" in said[1], said[1]
    assert reasons() == {}  # a health check calls no scontrol


def test_slurmd_runs_the_health_check_program_and_logs_host_3_failing_within_its_budget(lab):
    for host in (1, 3):
        assert (lab.parent / f"slurmd-{PREFIX}node{host}" / "healthcheck.log").is_file(), host  # slurmd ran it
    ok = (STATE / "slurm" / f"slurmd-{PREFIX}node1.log").read_text()
    assert "health_check failed" not in ok, ok
    log = (STATE / "slurm" / f"slurmd-{PREFIX}node3.log").read_text().splitlines()
    started = next(line for line in log if re.search(r"\] slurmd started on ", line))
    failed = [line for line in log if HC_FAILED in line]
    assert len(failed) == 1, log
    assert failed[0].endswith("commbench healthcheck: FAIL chknode3: its link runs at 300 Mbit/s, "
                              "below the profile's 1 Gbit/s"), failed
    took = (_stamp(failed[0]) - _stamp(started)).total_seconds()
    assert took < HC_BUDGET + 5, took  # its budget, and python's start
    assert reasons() == {}  # slurmd only logs a failed health check: nothing drained


def test_nightly_job_drains_host_3_alone_and_resume_returns_it_but_not_a_hand_drained_node(lab, tmp_path):
    env = {**ENV, "COMMBENCH": f"{sys.executable} -m commbench", "PROFILE": str(lab),
           "RESULTS_DIR": str(tmp_path / "nightly")}
    res = cb("lab", "slurm", "submit", "--wait", "--timeout", "180", str(TEMPLATE), "--nodes", "4",
             env=env, timeout=200, cwd=tmp_path)
    jobs = [line.split()[-1] for line in res.stdout.splitlines() if line.startswith("Submitted batch job")]
    log = (tmp_path / f"slurm-{jobs[0]}.out").read_text() if jobs else "(no job)"
    assert res.returncode == 1, res.stdout + res.stderr + log  # check's exit: a host failed
    assert "drained chknode3: commbench: its links run at" in log, log
    drained = reasons()
    assert list(drained) == ["chknode3"] and drained["chknode3"].startswith("commbench: its links run at 0."), drained

    cb("lab", "set", "--node", "3", "--rate", "1gbit", check=True)
    cb("lab", "exec", f"{PREFIX}node1", "--", "scontrol", "update", "NodeName=chknode2", "State=DRAIN",
       f"Reason={HAND}", env={**ENV, "SLURM_CONF": f"/run/commbench-lab-{PREFIX}/slurm/slurm.conf"}, check=True)
    res = cb("check", "--resume", "--launcher", "lab", "--profile", str(lab), "--out", str(tmp_path / "resume"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "# slurm: resumed chknode3" in res.stdout, res.stdout
    assert "chknode2: drained by someone else (hand: bad dimm): not resumed" in res.stdout, res.stdout
    assert reasons() == {"chknode2": HAND}
