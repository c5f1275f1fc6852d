"""A real Slurm on the lab (root only): munged, slurmctld and one slurmd per lab host, and the
shipped batch template slurm/commbench.sbatch run unchanged through sbatch + srun.

The test uses its own lab instance (prefix `cst`, its own state folder and subnet 10.240.0.0/24),
so a user's lab or another test's is never touched; the lab's munged has its own socket and key,
so the machine's munge (if any) is not used either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pandas as pd
import psutil
import pytest

import helpers  # tests/helpers.py

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "slurm" / "commbench.sbatch"
SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")


def _missing_tools() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin"
    return [t for t in SLURM_TOOLS if shutil.which(t, path=path) is None]


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, veth, tc, daemons)"),
    pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                       reason="iproute2 (ip, tc) is not installed: apt-get install iproute2"),
    pytest.mark.skipif(bool(_missing_tools()),
                       reason=f"Slurm/munge not installed ({', '.join(_missing_tools())} missing): "
                              "apt-get install slurm-wlm munge"),
]

PREFIX = "cst"
STATE_DIR = Path(f"/run/commbench-lab-{PREFIX}")
SUBNET = "10.240.0.0/24"
HOSTS = [f"{PREFIX}node1", f"{PREFIX}node2"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
ENV.update({"COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": str(STATE_DIR)})


cb = partial(helpers.cb, env=ENV, timeout=120)  # python -m commbench in a subprocess (tests/helpers.py)


def lab_processes() -> list[str]:
    """munged / slurmctld / slurmd / slurmstepd processes that belong to this test's lab: their
    command line or their SLURM_CONF points into the lab's state folder, or they are a slurmd of
    one of its hosts."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        name = p.info["name"] or ""
        if not name.startswith(("munged", "slurmctld", "slurmd", "slurmstepd")):
            continue
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue  # exited; only waits for its (re)parent to reap it
        cmdline = " ".join(p.info["cmdline"] or [])
        try:
            conf = p.environ().get("SLURM_CONF", "")
        except psutil.Error:
            conf = ""
        if str(STATE_DIR) in cmdline or conf.startswith(str(STATE_DIR)) or any(h in cmdline for h in HOSTS):
            found.append(f"{name} (pid {p.info['pid']})")
    return found


def leftovers() -> list[str]:
    """Anything of this test's lab that still exists: namespaces, links, qdiscs, daemons, state."""
    left = [f"netns {n}" for n in os.listdir("/var/run/netns") if n.startswith(PREFIX)] \
        if os.path.isdir("/var/run/netns") else []
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout)
    left += [f"link {link['ifname']}" for link in links if link["ifname"].startswith(PREFIX)]
    qdiscs = json.loads(subprocess.run(["tc", "-j", "qdisc", "show"], capture_output=True, text=True).stdout or "[]")
    left += [f"qdisc {q['dev']}" for q in qdiscs if q.get("dev", "").startswith(PREFIX)]
    left += [f"process {p}" for p in lab_processes()]
    if STATE_DIR.exists():
        left.append(f"dir {STATE_DIR}")
    return left


def wait_gone(timeout: float = 10.0) -> list[str]:
    """leftovers(), allowing exited daemons a moment to be reaped."""
    deadline = time.monotonic() + timeout
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(scope="module")
def slurm_lab():
    cb("lab", "down")
    assert wait_gone() == [], "a previous run left this test's lab behind"
    try:
        cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", SUBNET, check=True)
        started = time.monotonic()
        up = cb("lab", "slurm", "up", check=True)
        assert "2 nodes idle" in up.stdout
        assert time.monotonic() - started < 60
        yield
    finally:
        down = cb("lab", "down")
        assert down.returncode == 0, down.stderr
    assert wait_gone() == []


def test_slurm_needs_a_lab():
    other = {**ENV, "COMMBENCH_LAB_PREFIX": "csx", "COMMBENCH_LAB_DIR": "/run/commbench-lab-csx-none"}
    for args in (["lab", "slurm", "up"], ["lab", "slurm", "submit", str(TEMPLATE)]):
        res = cb(*args, env=other)
        assert res.returncode == 2, res.stderr
        assert "no lab is up" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_status_and_double_up(slurm_lab):
    status = cb("lab", "slurm", "status", check=True).stdout
    for host in HOSTS:
        assert f"node {host}: idle" in status and f"slurmd {host}: running" in status
    assert "munged: running" in status and "slurmctld: running" in status
    again = cb("lab", "slurm", "up")
    assert again.returncode == 2 and "already up" in again.stderr
    # the lab's Slurm uses its own munged: the conf names a socket inside the lab's folder
    conf = (STATE_DIR / "slurm" / "slurm.conf").read_text()
    assert f"AuthInfo=socket={STATE_DIR}/munge/munge.socket" in conf


def test_template_runs_unchanged_on_two_nodes(slurm_lab, tmp_path):
    results = tmp_path / "results"
    env = {**ENV, "COMMBENCH_ARGS": "--sizes 64K,1M --time-budget 0.05",
           "RESULTS_DIR": str(results), "COMMBENCH": f"{sys.executable} -m commbench"}
    started = time.monotonic()
    res = cb("lab", "slurm", "submit", "--wait", "--timeout", "180", str(TEMPLATE), env=env, timeout=200,
             cwd=tmp_path)
    elapsed = time.monotonic() - started
    jobs = [line.split()[-1] for line in res.stdout.splitlines() if line.startswith("Submitted batch job")]
    assert len(jobs) == 1, res.stdout + res.stderr
    job = jobs[0]
    output = tmp_path / f"slurm-{job}.out"
    log = output.read_text() if output.exists() else "(no job output)"
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}\n{log}"
    assert f"job {job} COMPLETED" in res.stdout
    assert elapsed < 180

    df = pd.read_parquet(results / f"slurm-{job}.parquet")
    assert len(df) == 2 and sorted(df["size_bytes"]) == [64 * 1024, 1024 * 1024]
    assert set(df["world_size"]) == {2}
    assert set(df["nnodes"]) == {2}
    assert set(df["launcher"]) == {"slurm"}
    for hosts in df["hosts"]:
        assert sorted(hosts) == HOSTS
    assert set(df["wrong"]) == {0}
    assert set(df["iface"]) == {"eth0"}  # the traffic went over the lab link, not loopback
    env_snapshot = json.loads(df["env"].iloc[0])
    assert env_snapshot["SLURM_JOB_ID"] == job and env_snapshot["MASTER_PORT"] == str(20000 + int(job) % 20000)
    assert env_snapshot["MASTER_ADDR"] == HOSTS[0]


TUNE_JOB = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=slurm-%j.out
set -eu
export GLOO_SOCKET_IFNAME=eth0
{python} -m commbench tune --launcher srun --ds-config ds.json --layers 2 --hidden 256 --vocab 6000 --stages 2 \
    --reduce-buckets 5e4,1e6 --grad-accum 1 --dtypes fp16 --top 2 --backend gloo -w 1 -n 5 --no-wire --out tuned
"""


def test_tune_in_a_batch_script_measures_on_every_task_of_the_job(slurm_lab, tmp_path):
    """tune runs in the batch script; its quick curve and each measured candidate are srun steps
    of the job, one rank on each of the 2 nodes, over the lab link."""
    (tmp_path / "ds.json").write_text(json.dumps({
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 50000}, "fp16": {"enabled": True},
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}))
    script = tmp_path / "tune.sbatch"
    script.write_text(TUNE_JOB.format(python=sys.executable))
    res = cb("lab", "slurm", "submit", "--wait", "--timeout", "240", str(script), timeout=260, cwd=tmp_path)
    job = next(line.split()[-1] for line in res.stdout.splitlines() if line.startswith("Submitted batch job"))
    log = (tmp_path / f"slurm-{job}.out").read_text()
    assert res.returncode == 0 and f"job {job} COMPLETED" in res.stdout, f"{res.stdout}\n{res.stderr}\n{log}"

    assert "# tune: custom-2x256 (0.00465B parameters), 2 ranks, 2 candidates" in log
    assert "# winner: ZeRO-2, reduce_bucket_size" in log
    runs = sorted((tmp_path / "tuned").glob("*.parquet"))
    kinds = sorted(p.name.split(".")[1].split("-")[0] for p in runs)
    assert kinds == ["curve", "zero", "zero"]  # the quick curve and both candidates (--top 2: yours among them)
    for path in runs:
        df = pd.read_parquet(path)
        assert set(df["launcher"]) == {"slurm"} and set(df["world_size"]) == {2} and set(df["nnodes"]) == {2}
        assert set(df["iface"]) == {"eth0"} and sorted(df["hosts"].iloc[0]) == HOSTS
        assert json.loads(df["env"].iloc[0])["SLURM_JOB_ID"] == job
    tuned = json.loads((tmp_path / "tuned" / "ds.tuned.json").read_text())
    assert tuned["zero_optimization"]["stage"] == 2


def test_slurm_down_keeps_the_network_and_up_again(slurm_lab):
    down = cb("lab", "slurm", "down", check=True)
    assert "slurmctld" in down.stdout and "munged" in down.stdout
    deadline = time.monotonic() + 10
    while lab_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lab_processes() == []
    assert not (STATE_DIR / "slurm").exists() and not (STATE_DIR / "munge").exists()
    assert "not up" in cb("lab", "slurm", "status", check=True).stdout
    refused = cb("lab", "slurm", "submit", str(TEMPLATE))
    assert refused.returncode == 2 and "not up" in refused.stderr
    hosts = [h["host"] for h in json.loads(cb("lab", "status", "--json", check=True).stdout)["hosts"]]
    assert hosts == HOSTS
    cb("lab", "slurm", "up", check=True)
    assert "node cstnode2: idle" in cb("lab", "slurm", "status", check=True).stdout
