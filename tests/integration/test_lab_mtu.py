"""`sweep --mtu` on the lab (root): every host's MTU set per pass, checked, and restored, also
when the run is interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial

import pandas as pd
import pytest

import helpers  # tests/helpers.py
from labkit import NEEDS_LAB, lab_env

pytestmark = NEEDS_LAB

PREFIX = "cm"
ENV = lab_env(PREFIX)


cb = partial(helpers.cb, env=ENV, timeout=600)  # python -m commbench in a subprocess (tests/helpers.py)


def host_mtus() -> dict[str, int]:
    return {h["host"]: h["mtu"] for h in json.loads(cb("lab", "status", "--json").stdout)["hosts"]}


@pytest.fixture
def lab():
    cb("lab", "down")
    up = cb("lab", "up", "--nodes", "2", "--rate", "1gbit", "--mtu", "1500", "--subnet", "10.237.0.0/24")
    assert up.returncode == 0
    yield
    cb("lab", "down")


@pytest.mark.failure(
    row="mtu-change-left-behind",
    section="Security",
    failure="an MTU change left behind",
    does="`sweep --mtu` restores the original MTU on a normal end, Ctrl-C, SIGTERM and a runtime failure",
)
def test_mtu_axis_stores_both_and_restores(lab, tmp_path):
    out = tmp_path / "mtu.parquet"
    res = cb("lab", "run", "--", sys.executable, "-m", "commbench", "sweep", "--mtu", "1500,9000", "--iface", "eth0",
             "--sizes", "16M", "-n", "5", "-w", "2", "-R", "3", "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "# MTU 9000 on eth0 of every host" in res.stdout
    df = pd.read_parquet(out)
    assert sorted(df.mtu) == [1500] * 3 + [9000] * 3 and set(df.wrong) == {0}
    # The median of three repetitions a side: one sample a side is one stall on 2 busy cores from the wrong
    # order (test_lab once measured MTU 9000 at 92% of its limit, below MTU 1500).
    busbw = df.groupby("mtu").busbw_GBps.median().to_dict()
    print(f"\nsweep --mtu on 2 lab hosts at 1gbit, 16 MiB all_reduce: {busbw}")
    assert busbw[9000] > 1.02 * busbw[1500]  # about 4%: (MTU-52)/(MTU+14) at 9000 vs 1500
    assert host_mtus() == {f"{PREFIX}node1": 1500, f"{PREFIX}node2": 1500}


@pytest.mark.failure(
    row="ctrl-c-during-sweep-mtu",
    section="Interruptions (Ctrl-C, Slurm preemption, scancel)",
    failure="Ctrl-C during `sweep --mtu` on the lab",
    does="every host's MTU is restored, exit 130",
)
@pytest.mark.failure(row="mtu-change-left-behind")
def test_mtu_is_restored_after_ctrl_c(lab, tmp_path):
    out = tmp_path / "mtu.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "lab", "run", "--", sys.executable, "-m", "commbench",
                             "sweep", "--mtu", "9000", "--iface", "eth0", "-b", "1M", "-e", "64M", "-n", "20",
                             "--out", str(out)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and host_mtus().get(f"{PREFIX}node2") != 9000:
        time.sleep(0.2)
    assert host_mtus() == {f"{PREFIX}node1": 9000, f"{PREFIX}node2": 9000}
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert host_mtus() == {f"{PREFIX}node1": 1500, f"{PREFIX}node2": 1500}
