"""`commbench doctor` across real hosts: two local ranks started like torchrun (no root), and the
lab (root): a clean 2-host lab is healthy, an MTU changed on one host is named, a wrong
NCCL_SOCKET_IFNAME is caught, and `commbench sweep` warns about it before it runs.

The lab tests use their own instance (prefix `cd`, subnet 10.236.0.0/24) and always take it down.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from functools import partial

import pytest

import helpers  # tests/helpers.py

pytestmark = pytest.mark.integration

PREFIX = "cd"
SUBNET = "10.236.0.0/24"
BASE = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_"))}
ENV = {**BASE, "COMMBENCH_LAB_PREFIX": PREFIX, "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{PREFIX}"}
DOCTOR = [sys.executable, "-m", "commbench", "doctor"]


cb = partial(helpers.cb, env=ENV)  # python -m commbench in a subprocess (tests/helpers.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_local_ranks_gather_and_agree():
    """Rank 0 prints for both ranks; both exit with rank 0's code (1: a wrong NCCL_SOCKET_IFNAME)."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**BASE, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "GLOO_SOCKET_IFNAME": "lo",
               "NCCL_SOCKET_IFNAME": "ib9"}
        procs.append(subprocess.Popen([*DOCTOR, "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes == [1, 1], outs
    assert outs[1][0] == ""  # only rank 0 reports
    doc = json.loads(outs[0][0])
    assert len(doc["hosts"]) == 1  # two ranks, one host
    assert any(f["check"] == "socket-ifname" and "NCCL_SOCKET_IFNAME=ib9" in f["message"] for f in doc["findings"])


@pytest.fixture
def lab():
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", SUBNET)
    assert up.returncode == 0, up.stderr
    try:
        yield
    finally:
        cb("lab", "down")


@pytest.mark.usefixtures("lab")
@pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, veth, tc)")
@pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                    reason="iproute2 (ip, tc) is not installed: apt-get install iproute2")
def test_lab_doctor_healthy_then_mtu_mismatch_then_bad_ifname():
    clean = cb("lab", "run", "--", *DOCTOR)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "doctor: healthy (2 host(s) checked" in clean.stdout
    assert f"{PREFIX}node1" in clean.stdout and f"{PREFIX}node2" in clean.stdout

    assert cb("lab", "set", "--node", f"{PREFIX}node2", "--mtu", "9000").returncode == 0
    mismatch = cb("lab", "run", "--", *DOCTOR)
    assert mismatch.returncode == 1, mismatch.stdout + mismatch.stderr
    line = next(line for line in mismatch.stdout.splitlines() if line.startswith("PROBLEM [mtu-mismatch]"))
    assert f"{PREFIX}node2" in line and "1500" in line and "9000" in line
    print(f"\n{line}")

    # `lab run` sets NCCL_SOCKET_IFNAME=eth0 for every rank: override it inside the command
    wrong = cb("lab", "run", "--", "env", "NCCL_SOCKET_IFNAME=ib9", *DOCTOR)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert f"NCCL_SOCKET_IFNAME=ib9 matches no interface with an IP address on {PREFIX}node1" in wrong.stdout
    assert f"NCCL_SOCKET_IFNAME=ib9 matches no interface with an IP address on {PREFIX}node2" in wrong.stdout


def test_sweep_warns_before_it_runs(tmp_path):
    env = {**BASE, "NCCL_SOCKET_IFNAME": "ib9"}
    res = cb("sweep", "--sizes", "1K", "-n", "2", "--out", str(tmp_path / "r.parquet"), env=env)
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("commbench: warning:")]
    assert len(warnings) == 1 and "NCCL_SOCKET_IFNAME=ib9 matches no interface" in warnings[0]
    assert res.stdout  # and then it ran: the table and the results file
    import pandas as pd

    net = json.loads(pd.read_parquet(tmp_path / "r.parquet").net.iloc[0])
    facts = net[socket.gethostname()]["host_net"]  # every result row keeps the host's network facts
    assert facts["env"] == {"NCCL_SOCKET_IFNAME": "ib9"}
    assert any(i["name"] == "lo" and i["mtu"] for i in facts["interfaces"]) and facts["rdma"] == []
